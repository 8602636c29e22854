"""Chaos scenario of the training workflows: a supervised job survives failures and crashes.

:class:`TrainingRecovery` starts ``TrainingJobSupervisorWorkflow`` on a model-mode
training job (no trainer processes: progress is computed from the clock) and, under
the harness's chaos (worker SIGKILLs, 30% of fleet calls failing or hanging),
injects one training failure after another: a GPU error, a host down, a hung
trainer, a building power loss, another GPU error. Each is injected once the
previous recovery has restarted the job and the job has checkpointed past the step
it failed at (so the crash-loop guard rightly sees progress). The monkey aims one
kill within 2.5 s of each fault. Two failures per run, so the supervisor
continues-as-new under the chaos too.

The job's progress is gated on the faults, not raced against them: it has far more steps
than the trial has time for, so however slowly a loaded machine lets the scenario inject
(four trials share two cores), the job cannot finish before the last fault. Once the last
recovery has restarted it, the scenario speeds that run up (a straggler factor below 1,
through the lab's fault API) and the job finishes its steps within a second.

Afterwards the lab's audit log must show each failure's recovery applied exactly
once: one stop and one start per failure number (launch included), one quarantine
per GPU error and none otherwise, exactly one start between one injected fault and
the next, and as many runs of the job as starts; the supervisor's final status must
list every failure, of the kind injected, as recovered, and the job must have
finished its steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections import Counter
from typing import Any

from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

from orchestrator.contracts.training import JobState, TrainingJob
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    SupervisorInput,
    SupervisorState,
    SupervisorStatus,
    supervisor_id,
)
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.training.config import TrainingJobConfig, TrainingLabConfig
from orchestrator.models import AuditEntry
from testkit.chaos.harness import ChaosPlan, ChaosStack, Scenario, repeated_changes

__all__ = ["FAULTS", "TrainingRecovery", "training_problems"]

JOB = "llm-chaos"
CHECKPOINT_EVERY = 20
STEP_MS = 20.0
STEP_S = STEP_MS / 1000.0
#: 2,000 s of steps at STEP_MS: far past the trial's limit, so only the speed-up ends the job
TOTAL_STEPS = 100_000
#: how long the last run may take to finish its steps once sped up
FINISH_S = 1.0
#: the lab fault injected, and the failure kind the supervisor must record for it
FAULTS: list[tuple[str, FailureKind]] = [
    ("gpu-error", FailureKind.GPU),
    ("host-down", FailureKind.HOST_DOWN),
    ("hang", FailureKind.HANG),
    ("power-loss", FailureKind.BUILDING),
    ("gpu-error", FailureKind.GPU),
]
OPTIONS = SupervisorInput(
    job=JOB,
    hang_after_s=1.5,
    poll_s=0.2,
    confirm_timeout_s=60.0,
    # Continue-as-new after every two recoveries: it happens under the chaos too.
    failures_per_run=2,
)


class TrainingRecovery(Scenario):
    """The supervisor recovers a model-mode job from every injected failure, once each."""

    name = "training"
    limit_s = 300.0
    training = TrainingLabConfig(
        hosts_per_building=4,
        spares_per_building=1,
        jobs=[
            TrainingJobConfig(
                name=JOB,
                region="us-east",
                hosts=2,
                total_steps=TOTAL_STEPS,
                checkpoint_every=CHECKPOINT_EVERY,
                step_ms=STEP_MS,
                heartbeat_s=0.5,
                seed=5,
                keep=4,
            )
        ],
    )

    def __init__(self) -> None:
        #: one cue per injected fault, for the monkey to aim a kill at its recovery
        self._cues: asyncio.Queue[None] = asyncio.Queue()
        self._aimed = 0
        #: when the last read of the job was sent (the lab read its step after that)
        self._read_at = 0.0

    async def next_kill(self, plan: ChaosPlan, rng: random.Random) -> None:
        """The first kills land within 2.5 s of a fault's injection: in its detection, in the
        recovery's stop, quarantine, read or start, or while the restart is confirmed. Kills
        beyond one per fault come at the plan's random gaps."""
        if self._aimed >= len(FAULTS):
            await super().next_kill(plan, rng)
            return
        self._aimed += 1
        await self._cues.get()
        await asyncio.sleep(rng.uniform(0.0, 2.5))

    async def run(self, stack: ChaosStack) -> None:
        from orchestrator.clients.training import start_supervisor

        deadline = time.monotonic() + self.limit_s
        stack.notes["injected"] = []
        stack.notes["high"] = 0
        handle = await start_supervisor(
            stack.client, JOB, task_queue=stack.task_queue, options=OPTIONS
        )
        for n, (fault, _) in enumerate(FAULTS):
            job = await self._steady(stack, recovered=n, deadline=deadline)
            body = self._target(stack, fault, job)
            async with stack.lab.http() as http:
                (await http.post(f"/lab/training/faults/{fault}", json=body)).raise_for_status()
            self._cues.put_nowait(None)
            # The next fault waits for a checkpoint past this one's step, so the
            # crash-loop guard rightly sees progress.
            at_most = job.step + math.ceil((time.monotonic() - self._read_at) / STEP_S) + 1
            step = await self._stopped_at(stack, fault, job, at_most, deadline)
            stack.notes["high"] = step
            stack.notes["injected"].append({"fault": fault, "step": step, **body})
        job = await self._steady(stack, recovered=len(FAULTS), deadline=deadline)
        await self._finish_soon(stack, job)
        final = await asyncio.wait_for(handle.result(), max(deadline - time.monotonic(), 1.0))
        stack.notes["final"] = final

    async def _stopped_at(
        self, stack: ChaosStack, fault: str, before: TrainingJob, at_most: int, deadline: float
    ) -> int:
        """The step the job stopped at (crashed, or hung), or ``at_most``, the most it can
        have reached since ``before`` was read, when the recovery restarted it before a
        read saw it stopped: a loaded machine can fail reads for longer than the recovery
        takes, and waiting to see the stopped run then never ends."""
        while time.monotonic() < deadline:
            job = await self._job(stack)
            if job is not None and job.runs > before.runs:
                return at_most
            if job is not None and (fault == "hang" or job.state is not JobState.RUNNING):
                return job.step
            await asyncio.sleep(0.05)
        raise TimeoutError(f"the job was never seen stopped by the {fault}")

    @staticmethod
    async def _finish_soon(stack: ChaosStack, job: TrainingJob) -> None:
        """Speed the job's current run up so that its remaining steps take FINISH_S."""
        left_s = (job.total_steps - job.step) * STEP_S
        body = {"job": JOB, "factor": FINISH_S / max(left_s, FINISH_S)}
        # The run is alive (no fault is left to kill it, and it cannot finish on its own).
        async with stack.lab.http() as http:
            (await http.post("/lab/training/faults/straggler", json=body)).raise_for_status()

    @staticmethod
    def _target(stack: ChaosStack, fault: str, job: TrainingJob) -> dict[str, Any]:
        if fault in ("gpu-error", "host-down"):
            return {"host": job.hosts[0]}
        if fault == "power-loss":
            building = stack.notes["buildings"][job.hosts[0]]
            return {"building": building}
        return {"job": JOB}

    async def _steady(self, stack: ChaosStack, *, recovered: int, deadline: float) -> TrainingJob:
        """Until the job, restarted by recovery ``recovered + 1`` (the launch is the first),
        runs and has checkpointed past the step of the last failure.

        The next fault may then come before that recovery has confirmed the restart (its
        confirmation sees the steps the run made either way). Waiting for the confirmation
        would let the job run on for the seconds a crashed worker's sticky task queue holds
        the recovery's last workflow task, and a kill inside it would let it finish early.
        The supervisor is read through describe, not a query, which would wait for the
        killed worker's sticky queue to time out."""
        sup = stack.client.get_workflow_handle(supervisor_id(JOB), result_type=SupervisorStatus)
        recovery = stack.client.get_workflow_handle(
            f"{supervisor_id(JOB)}-recovery-{recovered + 2}"
        )
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            if (await sup.describe()).status is not WorkflowExecutionStatus.RUNNING:
                ended = await sup.result()
                raise AssertionError(
                    f"the supervisor ended before fault {recovered + 1}: "
                    f"{ended.state.value}, {ended.alert}, failures {ended.failures}"
                )
            with contextlib.suppress(RPCError):  # NOT_FOUND, as it should be
                await recovery.describe()
                raise AssertionError(f"recovery {recovered + 2} for a failure never injected")
            job = await self._job(stack)
            if job is None:
                continue
            if (
                job.state is JobState.RUNNING
                and job.runs == recovered + 1
                and (job.checkpoint_step or 0) >= stack.notes["high"] + 2 * CHECKPOINT_EVERY
            ):
                return job
        raise TimeoutError(f"the job was not restarted after fault {recovered} in time")

    async def _job(self, stack: ChaosStack) -> TrainingJob | None:
        """The job as the lab has it now; None when the read hit an injected fault."""
        self._read_at = time.monotonic()
        try:
            cluster = await self._reader(stack).training_cluster()
        except Exception:
            return None
        stack.notes["buildings"] = {h.name: h.building for h in cluster.hosts}
        return next(j for j in cluster.jobs if j.spec.name == JOB)

    @staticmethod
    def _reader(stack: ChaosStack) -> HttpFleet:
        """The scenario's own fleet reads time out in 0.5 s: an injected hang (2.5 s) then
        costs a retry, not the hang, and the job runs on less between two faults."""
        if "reader" not in stack.notes:
            stack.notes["reader"] = stack.lab.fleet(timeout=0.5)
        reader: HttpFleet = stack.notes["reader"]
        return reader

    async def verify(self, stack: ChaosStack) -> list[str]:
        final: SupervisorStatus = stack.notes["final"]
        cluster = await stack.read(stack.fleet.training_cluster)
        job = next(j for j in cluster.jobs if j.spec.name == JOB)
        async with stack.lab.http() as http:
            response = await http.get("/lab/training/faults")
            response.raise_for_status()
            faults = [f for f in response.json() if f["kind"] in {k for k, _ in FAULTS}]
        entries = await stack.read(stack.fleet.audit)
        return training_problems(final, job, entries, faults) + repeated_changes(entries)

    def details(self, stack: ChaosStack) -> dict[str, Any]:
        injected = stack.notes.get("injected", [])
        final: SupervisorStatus | None = stack.notes.get("final")
        failures = [] if final is None else final.failures
        return {
            "faults_injected": len(injected),
            "failures_recovered": sum(f.confirmed for f in failures),
            "kills_during_recovery": 0
            if final is None
            else kills_during_recovery(final, stack.kill_times),
            "steps_at_faults": [i["step"] for i in injected],
            "recoveries": [] if final is None else timeline(final, stack.kill_times),
        }


def timeline(final: SupervisorStatus, kill_times: list[float]) -> list[dict[str, Any]]:
    """Per failure: its kind, when it was detected, decided, restarted and recovered, and
    the kills in that window, all in seconds after its onset."""

    def since(onset: float, at: Any) -> float | None:
        return None if at is None else round(at.timestamp() - onset, 2)

    out = []
    for f in final.failures:
        onset = f.onset_at.timestamp()
        end = f.recovered_at.timestamp() if f.recovered_at is not None else float("inf")
        out.append(
            {
                "kind": f.kind.value,
                "detected_s": since(onset, f.detected_at),
                "decided_s": since(onset, f.decided_at),
                "restarted_s": since(onset, f.restarted_at),
                "recovered_s": since(onset, f.recovered_at),
                "kills_s": [round(t - onset, 2) for t in kill_times if onset <= t <= end],
            }
        )
    return out


def kills_during_recovery(final: SupervisorStatus, kill_times: list[float]) -> int:
    """Kills between a failure's onset and its recovery (lab and harness share the clock)."""
    windows = [
        (f.onset_at.timestamp(), f.recovered_at.timestamp())
        for f in final.failures
        if f.recovered_at is not None
    ]
    return sum(any(a <= t <= b for a, b in windows) for t in kill_times)


def training_problems(
    final: SupervisorStatus,
    job: TrainingJob,
    entries: list[AuditEntry],
    faults: list[dict[str, Any]],
) -> list[str]:
    """What is wrong with the job, the supervisor's account and the audit log after the trial."""
    problems: list[str] = []
    if final.state is not SupervisorState.FINISHED:
        problems.append(f"supervisor ended {final.state.value}: {final.alert}")
    if job.state is not JobState.FINISHED or job.step != job.total_steps:
        problems.append(f"job {job.state.value} at step {job.step} of {job.total_steps}")
    kinds = [f.kind for f in final.failures]
    if kinds != [kind for _, kind in FAULTS] or len(faults) != len(FAULTS):
        problems.append(f"injected {[f['kind'] for f in faults]}, supervisor recorded {kinds}")
    problems += [
        f"failure {f.number} ({f.kind.value}) not recovered: {f.detail}"
        for f in final.failures
        if not f.confirmed or f.recovered_at is None
    ]

    prefix = f"{supervisor_id(JOB)}/failure-"
    per_failure: Counter[tuple[int, str]] = Counter()
    quarantined: list[str] = []
    for e in entries:
        if not e.idempotency_key.startswith(prefix):
            continue
        number = int(e.idempotency_key[len(prefix) :].split("/", 1)[0])
        per_failure[(number, e.kind)] += 1
        if e.kind == "host-quarantine":
            quarantined.append(e.request["host"])
    # failure-1 is the launch; failure n+1 is the n-th injected fault.
    for number in range(1, len(FAULTS) + 2):
        for kind in ("training-stop", "training-start"):
            n = per_failure[(number, kind)]
            if n == 0:
                problems.append(f"failure {number}: no {kind}")
            elif n > 1:
                problems.append(f"failure {number}: {kind} applied {n} times")
    gpu_hosts = sorted(f["target"].split("/")[0] for f in faults if f["kind"] == "gpu-error")
    if sorted(quarantined) != gpu_hosts:
        problems.append(f"quarantined {sorted(quarantined)}, GPU errors were on {gpu_hosts}")
    starts = sorted((e for e in entries if e.kind == "training-start"), key=lambda e: e.seq)
    if len(starts) != len(FAULTS) + 1 or job.runs != len(starts):
        problems.append(f"{len(starts)} starts and {job.runs} runs for {len(FAULTS)} failures")
    # Exactly one start between one fault and the next (and after the last one).
    times = sorted(f["at"] for f in faults) + [float("inf")]
    for i, (a, b) in enumerate(zip(times, times[1:], strict=False)):
        n = sum(a < s.at.timestamp() < b for s in starts)
        if n != 1:
            problems.append(f"{n} starts after fault {i + 1} before the next")
    return problems
