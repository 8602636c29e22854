"""Chaos harness: real processes, real crashes, then the audit log decides.

One trial = a fresh stack (a Temporal dev server on a ``--db-file`` in a tmp dir,
an in-process lab in model mode with faults on, ``orchestrator worker`` as a
real subprocess configured only through its environment), a scenario started
on it, and a seeded monkey that SIGKILLs the worker at random moments and
starts a new one, optionally restarts the dev server once from its database,
and makes a share of fleet-API calls fail (500) or hang past the worker's
fleet timeout. When the scenario is over the faults are cleared and the lab's
audit log and state are checked: no idempotency key applied twice, no logical
step applied under two runs, and the scenario's own end state; publishes that
repeat the table before them are counted.

A new workflow type is one small :class:`Scenario` subclass: ``prepare``
(before the chaos), ``run`` (under the chaos, returns when the workflow is
done) and ``verify`` (problems found, empty when right); add it to
``SCENARIOS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from temporalio.client import Client, WorkflowHandle

from orchestrator.devserver import DevServer
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DemandConfig, load_config
from orchestrator.models import AuditEntry
from orchestrator.temporal import data_converter
from tests.fixtures.lab import RunningLab, launch_lab
from tests.fixtures.ports import free_port

__all__ = [
    "SCENARIOS",
    "ChaosPlan",
    "ChaosStack",
    "Scenario",
    "TrialResult",
    "audit_problems",
    "run_trial",
]

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
#: fleet timeout the worker runs with; injected hangs last longer, so they time out
WORKER_FLEET_TIMEOUT_S = 1.0
HANG_S = 2.5


@dataclass(frozen=True)
class ChaosPlan:
    """What the monkey does during one trial."""

    seed: int
    kills: int = 3
    #: restart the dev server (from its db file) after this many kills; None: never
    server_restart_after: int | None = None
    #: share of /v1 calls that fail (half answered 500, half hang past the timeout)
    api_fault_rate: float = 0.3
    #: seconds between two kills, drawn uniformly from this range
    kill_gap_s: tuple[float, float] = (1.0, 3.5)


@dataclass
class TrialResult:
    scenario: str
    seed: int
    ok: bool
    kills: int
    server_restarts: int
    duration_s: float
    mutations: int
    #: routing writes that repeated the previous table (see :func:`redundant_publishes`)
    redundant_publishes: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class WorkerProcess:
    """``orchestrator worker`` in its own process, configured by environment only."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self._env = env
        self._log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = self._log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from orchestrator.cli import app; app()", "worker"],
            env=self._env,
            cwd=ROOT,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, in-flight activities and tasks are simply lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(25)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class ChaosStack:
    """Everything one trial runs on; build it with :func:`chaos_stack`."""

    tmp: Path
    server: DevServer
    lab: RunningLab
    worker: WorkerProcess
    client: Client
    fleet: HttpFleet
    task_queue: str
    notes: dict[str, Any] = field(default_factory=dict)

    async def set_faults(self, rate: float) -> None:
        body = {"api_error_rate": rate / 2, "api_hang_rate": rate / 2, "api_hang_s": HANG_S}
        async with self.lab.http() as http:
            (await http.post("/lab/faults", json=body)).raise_for_status()

    async def clear_faults(self) -> None:
        async with self.lab.http() as http:
            (await http.delete("/lab/faults")).raise_for_status()

    async def restart_server(self) -> None:
        """Stop the dev server and start it again on the same port from the same db file."""
        await asyncio.to_thread(self.server.stop)
        await asyncio.to_thread(self.server.start, timeout_s=60.0)

    async def read(self, probe: Callable[[], Awaitable[T]], tries: int = 40) -> T:
        """A fleet read or a query, retried through injected faults and a dead worker."""
        for attempt in range(tries):
            try:
                return await probe()
            except Exception:
                if attempt == tries - 1:
                    raise
                await asyncio.sleep(0.25)
        raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def chaos_stack(
    initial_routing: str = "nearest", total_rps: float | None = None
) -> AsyncIterator[ChaosStack]:
    with tempfile.TemporaryDirectory(prefix="chaos-") as name:
        tmp = Path(name)
        server = DevServer(
            port=free_port(), ui=False, db_file=tmp / "temporal.db", log_level="error"
        )
        await asyncio.to_thread(server.start, timeout_s=60.0)
        config = load_config(None).model_copy(update={"initial_routing": initial_routing})
        if total_rps is not None:
            config = config.model_copy(update={"demand": DemandConfig(total_rps=total_rps)})
        lab = await asyncio.to_thread(launch_lab, config, mode="model", faults=True)
        queue = f"chaos-{os.getpid()}-{random.randrange(1 << 30):x}"
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "ORCHESTRATOR_"))
        }
        env.update(
            TEMPORAL_ADDRESS=server.address,
            TEMPORAL_NAMESPACE="default",
            ORCHESTRATOR_FLEET_URL=lab.url,
            ORCHESTRATOR_TASK_QUEUE=queue,
            ORCHESTRATOR_STATE_DIR=str(tmp / "state"),
            ORCHESTRATOR_FLEET_TIMEOUT_S=str(WORKER_FLEET_TIMEOUT_S),
            ORCHESTRATOR_LOG_LEVEL="WARNING",
        )
        worker = WorkerProcess(env, tmp / "worker.log")
        client = await Client.connect(server.address, data_converter=data_converter)
        fleet = HttpFleet(lab.url, timeout=5.0)
        stack = ChaosStack(tmp, server, lab, worker, client, fleet, queue)
        worker.start()
        try:
            yield stack
        finally:
            worker.stop()
            await fleet.aclose()
            await lab.aclose()
            lab.stop()
            await asyncio.to_thread(server.stop)


async def monkey(stack: ChaosStack, plan: ChaosPlan, counts: Counter[str]) -> None:
    """Kill the worker ``plan.kills`` times at seeded random moments, restarting it each time."""
    rng = random.Random(plan.seed)
    for n in range(plan.kills):
        await asyncio.sleep(rng.uniform(*plan.kill_gap_s))
        stack.worker.kill()
        counts["kills"] += 1
        if plan.server_restart_after is not None and n + 1 == plan.server_restart_after:
            await stack.restart_server()
            counts["server_restarts"] += 1
        # A moment with no worker at all: timers fire and tasks queue up meanwhile.
        await asyncio.sleep(rng.uniform(0.0, 0.8))
        stack.worker.start()


# --- audit checks shared by every scenario -----------------------------------------

_STEP_KEY = re.compile(r"^(?P<wf>[^/]+)/(?P<run>[0-9a-f-]{36})/(?P<rest>.+)$")


def audit_problems(entries: list[AuditEntry]) -> list[str]:
    """Double applies the audit log can show, whatever the workflow."""
    problems: list[str] = []
    keys = Counter(e.idempotency_key for e in entries)
    problems += [f"key {k} applied {n} times" for k, n in keys.items() if n > 1]
    # A runbook step is keyed by workflow/run/task/step; the same step applied
    # again under another run id (a reset, a second start) is a repeat too.
    steps = Counter(
        (m["wf"], m["rest"])
        for e in entries
        if (m := _STEP_KEY.match(e.idempotency_key)) is not None
    )
    problems += [
        f"step {wf}/{rest} applied under {n} runs" for (wf, rest), n in steps.items() if n > 1
    ]
    return problems


def redundant_publishes(entries: list[AuditEntry]) -> list[str]:
    """Routing writes that repeat the table before them under a new key.

    Not a double apply (the table is the same), but the trace of an at-least-once
    step: an override Update delivered again after a crash triggers another urgent
    epoch, which publishes even when nothing moved. Counted, not failed.
    """
    found: list[str] = []
    previous: Any = None
    for entry in sorted((e for e in entries if e.kind == "routing"), key=lambda e: e.seq):
        fractions = entry.request.get("fractions")
        if previous is not None and fractions == previous:
            found.append(entry.idempotency_key)
        previous = fractions
    return found


def repeated_changes(entries: list[AuditEntry]) -> list[str]:
    """The same change applied twice under different keys: a shard moved to the same
    region again, a batch job started (or stopped) again. A drain and its restore
    move each shard out once and back once, and flip each job once each way."""
    changes: Counter[str] = Counter()
    for e in entries:
        if e.kind == "shard-move":
            changes.update(f"{s} -> {e.request['to_region']}" for s in e.request["shards"])
        elif e.kind == "batch-job":
            changes[f"{e.request['action']} {e.request['job']}"] += 1
    return [f"{change} applied {n} times" for change, n in changes.items() if n > 1]


def max_difference(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> float:
    return max(
        (
            abs(a.get(p, {}).get(r, 0.0) - b.get(p, {}).get(r, 0.0))
            for p in set(a) | set(b)
            for r in set(a.get(p, {})) | set(b.get(p, {}))
        ),
        default=0.0,
    )


def effective_weights(topology: Any) -> dict[str, float]:
    """Every region's pool weights, an unset one at its default 1.0."""
    return {
        f"{r.name}/{s.name}": topology.service_weights.get(f"{r.name}/{s.name}", 1.0)
        for r in topology.regions
        for s in topology.services
    }


# --- scenarios ----------------------------------------------------------------------


class Scenario(ABC):
    """One workflow type under chaos."""

    name: ClassVar[str]
    #: the longest a run may take under chaos before it counts as stuck
    limit_s: ClassVar[float] = 150.0
    #: the lab's edge demand in model mode; None: the default config's
    total_rps: ClassVar[float | None] = None

    async def prepare(self, stack: ChaosStack) -> None:  # noqa: B027 (optional hook)
        """Set up before the chaos starts (faults off, worker steady)."""

    @abstractmethod
    async def run(self, stack: ChaosStack) -> None:
        """Start the workflow and return once it has finished (under the chaos)."""

    @abstractmethod
    async def verify(self, stack: ChaosStack) -> list[str]:
        """Problems with the end state (faults are off by now); empty when right."""


async def start_rebalancer(
    stack: ChaosStack, epochs_per_run: int = 200
) -> WorkflowHandle[Any, Any]:
    from orchestrator.contracts.rebalancer import RebalancerInput
    from workflows.rebalancer import TrafficRebalanceWorkflow

    return await stack.client.start_workflow(
        TrafficRebalanceWorkflow.run,
        RebalancerInput(epoch_s=0.5, window_s=5, epochs_per_run=epochs_per_run),
        id="rebalancer",  # the id the worker's override activities address
        task_queue=stack.task_queue,
    )


async def wait_converged(stack: ChaosStack, limit_s: float) -> None:
    """Until the rebalancer's last two epochs changed nothing (queries retried through kills)."""
    await wait_converged_handle(stack.client.get_workflow_handle("rebalancer"), limit_s)


async def wait_converged_handle(handle: WorkflowHandle[Any, Any], limit_s: float) -> None:
    from workflows.rebalancer import TrafficRebalanceWorkflow

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            status = await asyncio.wait_for(handle.query(TrafficRebalanceWorkflow.status), 5)
            last = status.epochs[-2:]
            if len(status.epochs) >= 3 and all(e.outcome == "unchanged" for e in last):
                return
        await asyncio.sleep(0.3)
    raise TimeoutError(f"rebalancer did not converge within {limit_s:g}s")


async def spread(stack: ChaosStack) -> float:
    health = await stack.read(lambda: stack.fleet.health(5))
    utils = [r.utilization for r in health.regions if r.utilization is not None]
    return max(utils) - min(utils)


class RebalanceEpochs(Scenario):
    """From nearest-region routing the rebalancer converges, continuing-as-new on the way."""

    name = "rebalance"

    async def run(self, stack: ChaosStack) -> None:
        stack.notes["spread_before"] = await spread(stack)
        # Few epochs per run, so continue-as-new happens under the chaos too.
        await start_rebalancer(stack, epochs_per_run=8)
        await wait_converged(stack, self.limit_s)

    async def verify(self, stack: ChaosStack) -> list[str]:
        problems = []
        after = await spread(stack)
        if after >= 0.03:
            problems.append(f"utilization spread {after:.3f} >= 0.03 after convergence")
        if stack.notes["spread_before"] < 0.1:
            problems.append("the lab started balanced: nothing was tested")
        routing = [e for e in await stack.read(stack.fleet.audit) if e.kind == "routing"]
        if not routing:
            problems.append("the rebalancer never published")
        return problems


class DrainRestore(Scenario):
    """region-drain then region-restore: drained in between, the original table after."""

    name = "drain"
    region = "eu-west"
    # Two drains' worth of steps, gates and a dev-server restart: the full benchmark's
    # trials took 134 s on average, and one CI run on a busy machine passed 150 s.
    limit_s = 300.0
    # The default demand leaves the other two regions no room for eu-west's load, so
    # the capacity check (rightly) refuses; this much lets a drain start.
    total_rps = 120.0

    async def prepare(self, stack: ChaosStack) -> None:
        await start_rebalancer(stack)
        await wait_converged(stack, 60)
        stack.notes["routing"] = (await stack.read(stack.fleet.routing)).fractions
        stack.notes["topology"] = await stack.read(stack.fleet.topology)

    async def _runbook(self, stack: ChaosStack, name: str, restore_of: str | None = None) -> str:
        from orchestrator.contracts.runbook import RunbookRunInput
        from orchestrator.runbook.lint import load_runbook
        from workflows.runbook import RunbookWorkflow

        rb = load_runbook(
            ROOT
            / "runbooks"
            / f"{name}.yaml",  # The model lab's queues put p99 near 250 ms once one region is gone;
            # the gates are not what this measures, so their SLO is loose.
            {"region": self.region, "step_wait": "0.3s", "slo_p99_ms": 2000},
        )
        handle = await stack.client.start_workflow(
            RunbookWorkflow.run,
            RunbookRunInput(runbook=rb, mode="drill", requested_by="chaos", restore_of=restore_of),
            id=f"{name}-{self.region}",
            task_queue=stack.task_queue,
        )
        report = await asyncio.wait_for(handle.result(), self.limit_s)
        return str(report.outcome)

    async def run(self, stack: ChaosStack) -> None:
        stack.notes["drain"] = await self._runbook(stack, "region-drain")
        table = (await stack.read(stack.fleet.routing)).fractions
        topo = await stack.read(stack.fleet.topology)
        stack.notes["drained"] = {
            "share": max(s.get(self.region, 0.0) for s in table.values()),
            "sessions": topo.service_weights.get(f"{self.region}/sessions"),
            "primaries": sum(1 for s in topo.shards if s.primary == self.region),
            "jobs": sum(1 for j in topo.batch_jobs if j.region == self.region and j.running),
        }
        stack.notes["restore"] = await self._runbook(
            stack, "region-restore", restore_of=f"region-drain-{self.region}"
        )

    async def verify(self, stack: ChaosStack) -> list[str]:
        problems = []
        if stack.notes["drain"] != "completed" or stack.notes["restore"] != "completed":
            problems.append(f"drain {stack.notes['drain']}, restore {stack.notes['restore']}")
        drained = stack.notes["drained"]
        if drained != {"share": 0.0, "sessions": 0.0, "primaries": 0, "jobs": 0}:
            problems.append(f"{self.region} not fully drained: {drained}")
        await wait_converged(stack, 60)
        diff = max_difference(
            (await stack.read(stack.fleet.routing)).fractions, stack.notes["routing"]
        )
        # The restore publishes the very table recorded before the drain.
        if diff > 1e-6:
            problems.append(f"routing {diff:.3g} away from the original table after restore")
        before, after = stack.notes["topology"], await stack.read(stack.fleet.topology)
        if effective_weights(after) != effective_weights(before):
            problems.append("service weights differ from before the drain")
        if sorted((s.id, s.primary) for s in after.shards) != sorted(
            (s.id, s.primary) for s in before.shards
        ):
            problems.append("kv primaries differ from before the drain")
        if [(j.name, j.running) for j in after.batch_jobs] != [
            (j.name, j.running) for j in before.batch_jobs
        ]:
            problems.append("batch jobs differ from before the drain")
        return problems + repeated_changes(await stack.read(stack.fleet.audit))


class LoadTest(Scenario):
    """LiveLoadTestWorkflow ramps a region and puts its routing back."""

    name = "loadtest"
    region = "eu-west"

    async def prepare(self, stack: ChaosStack) -> None:
        await start_rebalancer(stack)
        await wait_converged(stack, 60)
        stack.notes["routing"] = (await stack.read(stack.fleet.routing)).fractions

    async def run(self, stack: ChaosStack) -> None:
        from orchestrator.contracts.load_test import LoadTestInput
        from workflows.load_test import LiveLoadTestWorkflow

        handle = await stack.client.start_workflow(
            LiveLoadTestWorkflow.run,
            LoadTestInput(
                region=self.region,
                p99_slo_ms=400.0,
                max_utilization=0.9,
                window_s=0.5,
                settle_s=0.0,
            ),
            id=f"loadtest-{self.region}",
            task_queue=stack.task_queue,
        )
        result = await asyncio.wait_for(handle.result(), self.limit_s)
        stack.notes["result"] = result

    async def verify(self, stack: ChaosStack) -> list[str]:
        from workflows.rebalancer import TrafficRebalanceWorkflow

        problems = []
        result = stack.notes["result"]
        if not result.routing_restored:
            problems.append(f"load test says routing not restored ({result.reason})")
        if result.steps < 1:
            problems.append(f"load test applied no step ({result.outcome}: {result.reason})")
        await wait_converged(stack, 60)
        diff = max_difference(
            (await stack.read(stack.fleet.routing)).fractions, stack.notes["routing"]
        )
        if diff > 0.02:
            problems.append(f"routing {diff:.3f} away from the table before the load test")
        status = await stack.read(
            lambda: stack.client.get_workflow_handle("rebalancer").query(
                TrafficRebalanceWorkflow.status
            )
        )
        if status.overrides:
            problems.append(f"overrides left behind: {[o.region for o in status.overrides]}")
        return problems


SCENARIOS: dict[str, type[Scenario]] = {
    s.name: s for s in (DrainRestore, RebalanceEpochs, LoadTest)
}


async def run_trial(scenario: Scenario, plan: ChaosPlan) -> TrialResult:
    """One scenario on a fresh stack under ``plan``; never raises for a failed run."""
    counts: Counter[str] = Counter()
    started = time.monotonic()
    problems: list[str] = []
    mutations = redundant = 0
    async with chaos_stack(total_rps=scenario.total_rps) as stack:
        await scenario.prepare(stack)
        await stack.set_faults(plan.api_fault_rate)
        chaos = asyncio.create_task(monkey(stack, plan, counts))
        try:
            await scenario.run(stack)
            # Every planned kill happens even when the run is quick: the last
            # ones then hit a worker that only has the rebalancer to run.
            await chaos
        except Exception as exc:  # a stuck or failed run is a finding, not a crash
            problems.append(f"run failed: {type(exc).__name__}: {exc}"[:500])
            chaos.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await chaos
        if stack.worker.process is None or stack.worker.process.poll() is not None:
            stack.worker.start()
        await stack.clear_faults()
        if not problems:
            try:
                problems += await scenario.verify(stack)
            except Exception as exc:
                problems.append(f"verify failed: {type(exc).__name__}: {exc}"[:500])
        entries = await stack.read(stack.fleet.audit)
        mutations = len(entries)
        problems += audit_problems(entries)
        redundant = len(redundant_publishes(entries))
        if problems:
            log = (stack.tmp / "worker.log").read_text(errors="replace")[-1500:]
            problems.append(f"worker log tail: {log}")
    return TrialResult(
        scenario=scenario.name,
        seed=plan.seed,
        ok=not problems,
        kills=counts["kills"],
        server_restarts=counts["server_restarts"],
        duration_s=round(time.monotonic() - started, 2),
        mutations=mutations,
        redundant_publishes=redundant,
        problems=problems,
    )
