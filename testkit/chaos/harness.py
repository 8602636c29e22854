"""Chaos harness: real processes, real crashes, then the audit log decides.

One trial = a fresh stack (a Temporal dev server on a ``--db-file`` in a tmp dir,
an in-process lab in model mode with faults on, ``orchestrator worker`` as a
real subprocess configured only through its environment), a scenario started
on it, and a seeded monkey that SIGKILLs the worker at random moments and
starts a new one, optionally SIGKILLs the dev server once and restarts it from its database,
and makes a share of fleet-API calls fail (500) or hang past the worker's
fleet timeout. When the scenario is over the faults are cleared and the lab's
audit log and state are checked: no idempotency key applied twice, no logical
step applied under two runs, and the scenario's own end state; publishes that
repeat the table before them are counted.

A new workflow type is one small :class:`Scenario` subclass in its own module
(``traffic_scenarios.py``, ``training_scenario.py``): ``prepare`` (before the
chaos), ``run`` (under the chaos, returns when the workflow is done) and
``verify`` (problems found, empty when right); add it to ``SCENARIOS`` in
:mod:`testkit.chaos.scenarios`.
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

from temporalio.client import Client

from orchestrator.devserver import DevServer
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DemandConfig, LabConfig, load_config
from orchestrator.lab.server import LabThread, build_app
from orchestrator.lab.training.config import TrainingLabConfig
from orchestrator.models import AuditEntry, RoutingTable
from orchestrator.ports import free_port
from orchestrator.temporal import data_converter
from testkit.lab import RunningLab, launch_lab

__all__ = [
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
    #: SIGKILL and restart the dev server (from its db file) after this many kills; None: never
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
    #: the scenario's own numbers (:meth:`Scenario.details`)
    details: dict[str, Any] = field(default_factory=dict)

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
    #: when the monkey killed the worker (``time.time()``, the in-process lab's clock too)
    kill_times: list[float] = field(default_factory=list)
    #: what the lab was started with, so that :meth:`restart_lab` starts the same one
    lab_config: LabConfig | None = None

    async def restart_lab(self) -> RoutingTable:
        """Kill the lab and start a fresh one on the same port: it has lost every state
        (routing back at its initial version and table, audit log and keys empty). Returns
        the table it starts with, read before it serves: once it serves, the rebalancer's
        next epoch may fix it before the caller looks (a hogged run: already fixed)."""
        old = self.lab._thread
        assert old is not None, "only an in-process lab can be restarted"
        await asyncio.to_thread(old.stop)
        app = build_app(self.lab_config, mode="model", faults=True, seed=0)
        started_with: RoutingTable = app.state.runtime.state.routing.table(include_buckets=False)
        fresh = await asyncio.to_thread(LabThread(app, port=old.port).start)
        self.lab._thread, self.lab.runtime = fresh, app.state.runtime
        return started_with

    def starve_worker(self, stopped: bool) -> None:
        """SIGSTOP (or SIGCONT) the worker: a starved host where nothing of it runs."""
        process = self.worker.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGSTOP if stopped else signal.SIGCONT)

    async def set_faults(self, rate: float) -> None:
        body = {"api_error_rate": rate / 2, "api_hang_rate": rate / 2, "api_hang_s": HANG_S}
        async with self.lab.http() as http:
            (await http.post("/lab/faults", json=body)).raise_for_status()

    async def clear_faults(self) -> None:
        async with self.lab.http() as http:
            (await http.delete("/lab/faults")).raise_for_status()

    async def restart_server(self) -> None:
        """SIGKILL the dev server (a crashed host, not a clean stop) and start it again on the
        same port from the same db file."""
        await asyncio.to_thread(self.server.kill)
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
    initial_routing: str = "nearest",
    total_rps: float | None = None,
    training: TrainingLabConfig | None = None,
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
        if training is not None:
            config = config.model_copy(update={"training": training})
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
        stack = ChaosStack(tmp, server, lab, worker, client, fleet, queue, lab_config=config)
        worker.start()
        try:
            yield stack
        finally:
            worker.stop()
            await fleet.aclose()
            await lab.aclose()
            lab.stop()
            await asyncio.to_thread(server.stop)


async def monkey(
    stack: ChaosStack, plan: ChaosPlan, counts: Counter[str], scenario: Scenario | None = None
) -> None:
    """Kill the worker ``plan.kills`` times at seeded random moments, restarting it each time.

    The moments are random gaps unless the scenario aims them (:meth:`Scenario.next_kill`).
    """
    rng = random.Random(plan.seed)
    for n in range(plan.kills):
        if scenario is None:
            await asyncio.sleep(rng.uniform(*plan.kill_gap_s))
        else:
            await scenario.next_kill(plan, rng)
        stack.worker.kill()
        stack.kill_times.append(time.time())
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
    # again under another run id (a reset, a second start) is a repeat too. Not so a
    # routing write: a new rebalancer run numbers its epochs from 1 again, and each
    # write carries If-Match, so one that repeats a table shows as a redundant publish.
    steps = Counter(
        (m["wf"], m["rest"])
        for e in entries
        if e.kind != "routing" and (m := _STEP_KEY.match(e.idempotency_key)) is not None
    )
    problems += [
        f"step {wf}/{rest} applied under {n} runs" for (wf, rest), n in steps.items() if n > 1
    ]
    return problems


def redundant_publishes(entries: list[AuditEntry]) -> list[str]:
    """Routing writes that repeat the table before them under a new key.

    Not a double apply (the table is the same), but the trace of an at-least-once
    step: an override request sent again after a crash triggers another urgent
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
    region again, a batch job started (or stopped) again, a host quarantined again. A
    drain and its restore move each shard out once and back once, and flip each job
    once each way; a training recovery quarantines each failed host once (the chaos
    trials release none)."""
    changes: Counter[str] = Counter()
    for e in entries:
        if e.kind == "shard-move":
            changes.update(f"{s} -> {e.request['to_region']}" for s in e.request["shards"])
        elif e.kind == "batch-job":
            changes[f"{e.request['action']} {e.request['job']}"] += 1
        elif e.kind == "host-quarantine":
            changes[f"quarantine {e.request['host']}"] += 1
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
    #: the lab's training cluster; None: the default config's
    training: ClassVar[TrainingLabConfig | None] = None

    async def prepare(self, stack: ChaosStack) -> None:  # noqa: B027 (optional hook)
        """Set up before the chaos starts (faults off, worker steady)."""

    @abstractmethod
    async def run(self, stack: ChaosStack) -> None:
        """Start the workflow and return once it has finished (under the chaos)."""

    @abstractmethod
    async def verify(self, stack: ChaosStack) -> list[str]:
        """Problems with the end state (faults are off by now); empty when right."""

    def details(self, stack: ChaosStack) -> dict[str, Any]:
        """Numbers of this scenario's own worth reporting (after ``verify``)."""
        return {}

    async def next_kill(self, plan: ChaosPlan, rng: random.Random) -> None:
        """Wait for the monkey's next kill: a random gap from the plan unless overridden."""
        await asyncio.sleep(rng.uniform(*plan.kill_gap_s))


async def run_trial(scenario: Scenario, plan: ChaosPlan) -> TrialResult:
    """One scenario on a fresh stack under ``plan``; never raises for a failed run."""
    counts: Counter[str] = Counter()
    started = time.monotonic()
    problems: list[str] = []
    mutations = redundant = 0
    details: dict[str, Any] = {}
    async with chaos_stack(total_rps=scenario.total_rps, training=scenario.training) as stack:
        await scenario.prepare(stack)
        await stack.set_faults(plan.api_fault_rate)
        chaos = asyncio.create_task(monkey(stack, plan, counts, scenario))
        try:
            await scenario.run(stack)
            # Every planned kill happens even when the run is quick: the last
            # ones then hit a worker that only has the rebalancer to run.
            await chaos
        except Exception as exc:  # a stuck or failed run is a finding, not a crash
            # asyncio.wait_for's TimeoutError has no message: say which deadline it was
            detail = str(exc) or f"not done within the scenario's {scenario.limit_s:g} s"
            problems.append(f"run failed: {type(exc).__name__}: {detail}"[:500])
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
        details = scenario.details(stack)
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
        details=details,
    )
