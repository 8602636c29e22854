"""One building's incident on a live lab: planned maintenance and an unplanned power loss,
both halves (user traffic and a training job) under one runbook run (issue 25).

Live stack. ``orchestrator lab serve --faults`` (live data plane, a real numpy trainer
process per job) and ``orchestrator lab traffic`` (Locust) each run in their own
process; a Temporal dev server, a worker with every registered workflow and activity,
the TrafficRebalanceWorkflow (the only writer of routing) and the job's
TrainingJobSupervisorWorkflow run here. The runbooks are the shipped
``runbooks/building-*.yaml``, loaded and linted with ``load_runbook``.

Each trial is a fresh lab (a fresh job) and runs, in order:

1. **Planned maintenance**: ``building-maintenance`` on the job's building. Measured:
   the steps the job lost in its move (target 0), the time to an empty building (run
   start to run end; and to each half: jobs moved, traffic shifted), user 5xx during
   the run (target 0) from the lab's own edge counts (``/lab/truth``). Then
   ``building-restore`` brings it back.
2. **Unplanned loss, runbook arm**: power loss of the job's (new) building under the
   same traffic, then ``building-loss`` started at once, as its alert would start it
   (the alert path is not part of this benchmark). Measured over a fixed window from
   the power loss: user 5xx, the job's MTTR and lost steps (the supervisor's failure
   record). Power and the building are then restored.
3. **Baseline "supervisor alone"**: the same power loss of the job's building, no
   runbook: the supervisor recovers the job; the traffic is left to what is always
   running, the rebalancer's own epochs (they see the region's powered capacity drop).
   Its job MTTR and lost steps are the job claims' baseline.
4. **Baseline "nobody moves the traffic"**: as 3, with the rebalancer paused for the
   window: the traffic claims' baseline.

Each loss arm starts once the rebalancer has the routing back at every region's fair
share, not from what the arm before it left. Arms 3 and 4 release the hosts the supervisor quarantined once power is back (the
repair), as building-restore does in arm 2.

The lab cannot tell which building served a request (a building is a share of its
region's pools, not a set of servers), so "the building's last request served" is not
measured; the traffic half's end is the traffic shift's end. The job is then left to
finish, and whether it did is reported per trial.

    python benchmarks/building_incident.py [--quick] [--trials N] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError
from temporalio.worker import Worker

from orchestrator import registry
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.clients.training import start_supervisor, wait_for_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import (
    REBALANCER_ID,
    PauseInput,
    RebalancerInput,
    RebalancerStatus,
    ResumeInput,
)
from orchestrator.contracts.runbook import RunbookReport, RunbookRunInput
from orchestrator.contracts.training import JobState
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    FailureRecord,
    SupervisorInput,
    SupervisorStatus,
)
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DEFAULT_CONFIG_PATH
from orchestrator.models import HealthReport
from orchestrator.runbook import load_runbook
from orchestrator.worker import sandbox_runner
from testkit.temporal import start_dev_server
from workflows.rebalancer import TrafficRebalanceWorkflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._building_stats import summarise, summary  # noqa: E402
from benchmarks._lab_process import CLI, open_env, spawn_lab, wait_healthy  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "building_incident.json"
RUNBOOKS = Path(__file__).resolve().parents[1] / "runbooks"
SUITE_TIMEOUT_S = 900.0
JOB = "llm-demo"
#: edge requests per second (the demo's), 80% web: ~32 rps on each region's web pool
TRAFFIC_RPS = 120.0
#: web slots per region (80 ms each: 62.5 rps), so that pool runs at ~51% and a building's
#: power loss (half the pool) overloads its region until its share of traffic moves out.
#: With the shipped 8 slots a half-pool still held the load: neither arm saw a 5xx, there
#: was nothing to compare; 200 rps on 8 slots instead put every region's p99 over 1.3 s on
#: 2 busy cores (Locust and the lab), before any loss. After a planned move of half of one
#: region's share the others run at ~64%, under the runbook's 75% pre-condition.
WEB_SLOTS = 5
#: the runbooks' step_wait, as short as the demo's: each step is judged on a 3 s window
STEP_WAIT = "3s"
WINDOW_S = 3
#: from a power loss, the window in which both arms' 5xx and recovery are counted
LOSS_WINDOW_S = 20.0
STEP_MS = 20.0
#: a region's share of demand this close to its fair share counts as rebalanced
SETTLED_WITHIN = 0.03
#: a runbook run not ended by then is terminated and reported so
RUN_LIMIT_S = 120.0
OPTIONS = SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1, confirm_timeout_s=60)


def lab_config(total_steps: int) -> dict[str, Any]:
    """The shipped lab with the demo's short health windows and deep web queues (a
    burst on two busy cores shows as latency, not 503s; see benchmarks/drain.py)."""
    config: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    config["metrics"] = {"window_s": WINDOW_S, "retention_s": 60}
    config["cold"].update({"factor": 1.5, "warm_after_s": 2.0})
    for region in config["regions"]:
        region["services"]["web"].update({"slots": WEB_SLOTS, "queue_limit": 4 * WEB_SLOTS})
    config["training"]["jobs"][0].update({"total_steps": total_steps, "step_ms": STEP_MS})
    return config


class Lab:
    """The lab and its Locust traffic, each its own process (group)."""

    def __init__(self, workdir: Path, total_steps: int) -> None:
        path = workdir / "lab.yaml"
        path.write_text(yaml.safe_dump(lab_config(total_steps)))
        self.env = open_env()
        self.server, self.url = spawn_lab(path, faults=True, env=self.env)
        self.traffic: subprocess.Popen[bytes] | None = None

    def start_traffic(self, duration_s: float) -> None:
        self.traffic = subprocess.Popen(
            [*CLI, "lab", "traffic", "--lab", self.url, "--rps", f"{TRAFFIC_RPS:g}"]
            + ["--duration", f"{duration_s:g}"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Locust runs as its child: the group ends together
        )

    def stop(self) -> None:
        if self.traffic is not None and self.traffic.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.traffic.pid, 2)
            try:
                self.traffic.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.traffic.pid, 9)
        self.server.terminate()
        try:
            self.server.wait(20)
        except subprocess.TimeoutExpired:
            self.server.kill()


async def edge_counts(http: httpx.AsyncClient) -> dict[str, int]:
    """All edge answers and the 5xx among them since the lab started (its own counts)."""
    truth = (await http.get("/lab/truth")).raise_for_status().json()
    total = errors = 0
    for by_status in truth.get("edge_requests", {}).values():
        for status, n in by_status.items():
            total += n
            errors += n if int(status) >= 500 else 0
    return {"requests": total, "5xx": errors}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


async def run_runbook(
    client: Client, queue: str, name: str, building: str, restore_of: str | None = None
) -> dict[str, Any]:
    """The run's summary (:func:`run_summary`); a run that fails says so in its outcome,
    and one that has not ended within ``RUN_LIMIT_S`` (paused on a gate, say) is
    terminated, so one bad trial does not hang the benchmark."""
    runbook = load_runbook(
        RUNBOOKS / f"{name}.yaml", {"building": building, "step_wait": STEP_WAIT}
    )
    handle = await client.start_workflow(
        "RunbookWorkflow",
        RunbookRunInput(runbook=runbook, requested_by="benchmark", restore_of=restore_of),
        id=f"{name}-{uuid.uuid4().hex[:6]}",
        task_queue=queue,
        result_type=RunbookReport,
    )
    started = time.monotonic()
    try:
        report: RunbookReport = await asyncio.wait_for(runbook_result(handle), RUN_LIMIT_S)
        return run_summary(report)
    except WorkflowFailureError as exc:
        outcome = f"failed: {exc.cause or exc}"
    except TimeoutError:
        await handle.terminate("benchmark: not ended in time")
        outcome = f"not ended within {RUN_LIMIT_S:g} s (terminated)"
    return {
        "workflow_id": handle.id,
        "outcome": outcome[:400],
        "duration_s": round(time.monotonic() - started, 2),
        "tasks_done_s": {},
        "messages": {},
    }


def run_summary(report: RunbookReport) -> dict[str, Any]:
    """Outcome, duration and when each task ended, in seconds from the run's start."""
    return {
        "workflow_id": report.workflow_id,
        "outcome": report.outcome,
        "duration_s": round((report.finished_at - report.started_at).total_seconds(), 2),
        "tasks_done_s": {
            t.id: round((t.finished_at - report.started_at).total_seconds(), 2)
            for t in report.tasks
            if t.finished_at is not None
        },
        "messages": {t.id: t.message for t in report.tasks if t.message},
    }


async def job_now(fleet: HttpFleet) -> tuple[int, list[str], JobState]:
    cluster = await fleet.training_cluster()
    job = next(j for j in cluster.jobs if j.spec.name == JOB)
    return job.step, list(job.hosts), job.state


def regions_over(health: HealthReport) -> dict[str, dict[str, float | None]]:
    """Each region's p99, error rate and utilization over the lab's window."""
    return {
        r.region: {"p99_ms": r.p99_ms, "error_rate": r.error_rate, "utilization": r.utilization}
        for r in health.regions
    }


def building_of(host: str) -> str:
    return host.rsplit("-h", 1)[0]  # the lab names hosts <building>-hNN


async def wait_running(fleet: HttpFleet, past_step: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        step, hosts, state = await job_now(fleet)
        if state is JobState.RUNNING and hosts and step >= past_step:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{JOB} not running past step {past_step} within {timeout_s:g}s")


async def trusted_epoch(handle: Any) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status: RebalancerStatus = await handle.query(TrafficRebalanceWorkflow.status)
        if any(e.outcome in ("unchanged", "published") for e in status.epochs):
            return
        await asyncio.sleep(0.5)
    raise RuntimeError("rebalancer found no trusted epoch")


async def settle(rebalancer: Any, fair: dict[str, float], timeout_s: float = 25.0) -> float:
    """Until the rebalancer sees every building powered again (its capacity shares back to
    ``fair``, those of the trial's start) and routes each region its fair share with no
    override held, so each loss arm starts from the same routing, not from what the arm
    before it left; the seconds waited (``timeout_s`` if it never was)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        status: RebalancerStatus = await rebalancer.query(TrafficRebalanceWorkflow.status)
        seen, shares = status.capacity_shares, status.shares
        if not status.overrides and all(
            abs(seen.get(r, 0.0) - f) <= SETTLED_WITHIN
            and abs(shares.get(r, 0.0) - f) <= SETTLED_WITHIN
            for r, f in fair.items()
        ):
            break
        await asyncio.sleep(0.5)
    return round(time.monotonic() - started, 1)


async def power(http: httpx.AsyncClient, building: str, on: bool) -> None:
    verb = "power-restore" if on else "power-loss"
    (await http.post(f"/lab/buildings/{building}/{verb}")).raise_for_status()


def lost_power(status: SupervisorStatus, known: int) -> FailureRecord | None:
    """The confirmed recovery from the power loss among the failures after the first
    ``known`` (the supervisor also records launches, e.g. a job seen stopped mid-move)."""
    for failure in status.failures[known:]:
        if failure.kind is not FailureKind.LAUNCH and failure.confirmed:
            return failure
    return None


async def loss_arm(
    client: Client,
    queue: str,
    fleet: HttpFleet,
    http: httpx.AsyncClient,
    traffic: Literal["runbook", "rebalancer", "nobody"],
    rebalancer: Any,
    fair: dict[str, float],
) -> dict[str, Any]:
    """Power loss of the job's building. ``traffic``: building-loss started at once; or no
    runbook, the rebalancer's own epochs left running; or no runbook and the rebalancer
    paused (nobody moves the traffic)."""
    settled_s = await settle(rebalancer, fair)
    _, hosts, _ = await job_now(fleet)
    dark = building_of(hosts[0])
    known = len((await wait_for_supervisor(client, JOB, lambda s: True)).failures)
    if traffic == "nobody":
        await rebalancer.execute_update(
            TrafficRebalanceWorkflow.pause, PauseInput(by="benchmark", reason="baseline arm")
        )
    before = await edge_counts(http)
    started = time.monotonic()
    await power(http, dark, False)
    region = (await fleet.topology()).building(dark).region
    out: dict[str, Any] = {
        "building": dark,
        "region": region,
        "traffic": traffic,
        "settled_s": settled_s,
    }
    if traffic == "runbook":
        out["run"] = await run_runbook(client, queue, "building-loss", dark)
    status: SupervisorStatus = await wait_for_supervisor(
        client, JOB, lambda s: lost_power(s, known) is not None, timeout_s=90
    )
    failure = lost_power(status, known)
    assert failure is not None
    await asyncio.sleep(max(0.0, LOSS_WINDOW_S - (time.monotonic() - started)))
    out["window_s"] = round(time.monotonic() - started, 2)
    out["edge"] = delta(await edge_counts(http), before)
    out["regions"] = regions_over(await fleet.health(out["window_s"]))
    out["mttr_s"] = failure.mttr_s
    out["lost_steps"] = failure.lost_steps
    out["failure_kind"] = failure.kind.value
    _, hosts, _ = await job_now(fleet)
    out["job_left_building"] = all(building_of(h) != dark for h in hosts)
    await power(http, dark, True)
    if traffic == "runbook":
        out["restore"] = await run_runbook(
            client, queue, "building-restore", dark, restore_of=out["run"]["workflow_id"]
        )
        return out
    # No runbook fenced them, but the supervisor may have: the repair releases them.
    cluster = await fleet.training_cluster()
    there = {h.name for h in cluster.hosts if h.building == dark}
    for q in cluster.quarantine:
        if q.host in there and q.active(cluster.now):
            await fleet.release_host(q.host, idempotency_key=f"bench-{uuid.uuid4().hex}")
    if traffic == "nobody":
        await rebalancer.execute_update(
            TrafficRebalanceWorkflow.resume, ResumeInput(by="benchmark")
        )
    return out


async def trial(client: Client, workdir: Path, total_steps: int) -> dict[str, Any]:
    lab = Lab(workdir, total_steps)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        wait_healthy(lab.url)
        lab.start_traffic(900.0)
        fleet = HttpFleet(lab.url, timeout=10.0)
        settings = Settings(task_queue=queue, fleet_url=lab.url, state_dir=workdir / "state")
        ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
        worker = Worker(
            client,
            task_queue=queue,
            workflows=registry.workflows(),
            activities=registry.activities(ctx),
            workflow_runner=sandbox_runner(),
        )
        async with worker, httpx.AsyncClient(base_url=lab.url, timeout=10.0) as http:
            return await _trial(client, queue, fleet, http)
    finally:
        lab.stop()


async def _trial(
    client: Client, queue: str, fleet: HttpFleet, http: httpx.AsyncClient
) -> dict[str, Any]:
    for earlier in (REBALANCER_ID, f"training-{JOB}"):
        with contextlib.suppress(RPCError):  # none running: the first trial
            await client.get_workflow_handle(earlier).terminate("an earlier trial's")
    rebalancer = await client.start_workflow(
        TrafficRebalanceWorkflow.run,
        RebalancerInput(epoch_s=1.0, window_s=WINDOW_S),
        id=REBALANCER_ID,
        task_queue=queue,
    )
    await trusted_epoch(rebalancer)
    # every building powered: each region's fair share, which every loss arm starts from
    fair = (await rebalancer.query(TrafficRebalanceWorkflow.status)).capacity_shares
    supervisor = await start_supervisor(client, JOB, task_queue=queue, options=OPTIONS)
    await wait_running(fleet, past_step=100)
    out: dict[str, Any] = {}

    # 1. planned maintenance
    step, hosts, _ = await job_now(fleet)
    building = building_of(hosts[0])
    before = await edge_counts(http)
    planned = await run_runbook(client, queue, "building-maintenance", building)
    planned["building"] = building
    planned["edge"] = delta(await edge_counts(http), before)
    status: SupervisorStatus = await wait_for_supervisor(client, JOB, lambda s: True)
    move = status.moves[-1].result if status.moves else None
    planned["move"] = None if move is None else move.model_dump(mode="json")
    _, hosts, _ = await job_now(fleet)
    planned["job_left_building"] = all(building_of(h) != building for h in hosts)
    out["planned"] = planned
    out["planned"]["restore"] = await run_runbook(
        client, queue, "building-restore", building, restore_of=planned["workflow_id"]
    )

    # 2. the runbook arm, then 3. the supervisor alone
    out["loss_runbook"] = await loss_arm(client, queue, fleet, http, "runbook", rebalancer, fair)
    await wait_running(fleet, past_step=0)
    out["loss_supervisor_alone"] = await loss_arm(
        client, queue, fleet, http, "rebalancer", rebalancer, fair
    )
    await wait_running(fleet, past_step=0)
    out["loss_traffic_unmoved"] = await loss_arm(
        client, queue, fleet, http, "nobody", rebalancer, fair
    )

    step, _, state = await job_now(fleet)
    out["job_step_at_end_of_arms"] = step
    try:
        final = await asyncio.wait_for(supervisor.result(), timeout=150)
        out["job_finished"] = final.state == "finished" and final.step == final.total_steps
        out["final_step"] = final.step
    except TimeoutError:
        out["job_finished"] = False
    await rebalancer.terminate("trial over")
    return out


async def run(trials: int, total_steps: int) -> dict[str, Any]:
    env = await start_dev_server()
    started = time.monotonic()
    results = []
    try:
        for i in range(trials):
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.monotonic()
                one = await trial(env.client, Path(tmp), total_steps)
                one["wall_s"] = round(time.monotonic() - t0, 1)
                print(f"trial {i + 1}/{trials}: {json.dumps(one, default=str)[:600]}")
                results.append(one)
    finally:
        await env.shutdown()
    return {
        "benchmark": "building_incident",
        "traffic": f"Locust (orchestrator lab traffic), {TRAFFIC_RPS:g} rps",
        "step_wait": STEP_WAIT,
        "health_window_s": WINDOW_S,
        "loss_window_s": LOSS_WINDOW_S,
        "job": {"name": JOB, "total_steps": total_steps, "step_ms": STEP_MS, "kind": "numpy"},
        "trials": results,
        **summarise(results),
        "elapsed_s": round(time.monotonic() - started, 1),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one trial")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--total-steps", type=int, default=8000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = asyncio.run(run(1 if args.quick else args.trials, args.total_steps))
    result["summary"] = summary(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result["verdicts"], indent=2))
    return 0 if all(result["verdicts"].values()) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # as drain.py: the Temporal client's threads can abort a normal exit
