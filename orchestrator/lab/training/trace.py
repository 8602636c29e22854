"""A training fleet driven by a failure trace fixed in advance, on an injectable clock.

The lab's model mode runs on wall-clock time, so a time-skipping Temporal server
cannot hurry it: the server skips only while no activity runs. :class:`TraceFleet`
instead computes everything from the clock it is given, and
:func:`activity_clock` is the time of the Temporal activity asking (when its
attempt started), so fleet time is the workflow's, skipped time included.

The job is the simulation's (:mod:`orchestrator.policy.training.ettr_sim`) made observable:

- it runs from trace time 0 on its first hosts, without a restart;
- a run started at ``s`` loads its checkpoint for ``restart_s`` (heartbeating), then
  does one step every ``step_s``; after every ``checkpoint_every`` steps it blocks for
  ``checkpoint_write_s`` (w, no steps, heartbeats go on) writing a checkpoint, which
  commits when the write ends (the newest ``keep`` kept). A failure during the write
  loses it, and the steps since the last commit;
- a failure of the trace kills the run alive at its time; a ``gpu`` failure also
  breaks a GPU of one of the run's hosts, repaired ``repair_s`` later. A failure that
  lands while no run is alive kills the next run as it starts (the simulation's
  "a failure during a restart starts the restart over");
- at ``horizon_s`` the job is finished: the trace is over.

Only the training part of the fleet contract is served; the rest raises. Mutations
apply once per idempotency key, as over HTTP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn

import numpy as np

from orchestrator.contracts.training import (
    JobState,
    QuarantineRequest,
    StartJobRequest,
    TrainingCheckpoints,
    TrainingCluster,
    TrainingJob,
)
from orchestrator.exceptions import FleetNotFound, FleetRejected, InvalidRequest
from orchestrator.lab.clock import Clock, activity_clock
from orchestrator.lab.training.failure_trace import FailureTrace, TraceJob
from orchestrator.lab.training.runs import model_digest
from orchestrator.models import (
    AuditEntry,
    BatchJobAction,
    ConfigChange,
    HealthReport,
    MutationResult,
    RoutingTable,
    RoutingWrite,
    ServiceWeightChange,
    ShardMove,
    StrictModel,
    Topology,
)
from orchestrator.policy.training.models import (
    CheckpointInfo,
    Host,
    HostState,
    JobSpec,
    QuarantineRecord,
)

__all__ = ["TraceCounts", "TraceFleet", "activity_clock"]


class TraceCounts(StrictModel):
    """Ground truth: what the trace did to the job."""

    #: failures that killed a run at their own time
    hits: int = 0
    #: failures that landed while no run was alive and killed the next run as it started
    deferred: int = 0
    #: runs started through the API
    starts: int = 0
    #: failures of the trace applied so far (hits + deferred + still pending)
    applied: int = 0


@dataclass
class _Run:
    started: float
    #: when steps begin (after loading the checkpoint)
    productive: float
    resumed_from: int
    hosts: list[str]
    ended: float | None = None
    by_api: bool = False
    committed: list[int] = field(default_factory=list)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


class TraceFleet:
    """The training fleet contract over a fixed failure trace; see the module docstring."""

    def __init__(
        self,
        job: TraceJob,
        trace: FailureTrace,
        *,
        clock: Clock,
        epoch: float | None = None,
        buildings: int = 4,
        hosts_per_building: int = 16,
        spares_per_building: int = 2,
        repair_s: float = 4 * 3600.0,
    ) -> None:
        if buildings * hosts_per_building < job.hosts:
            raise InvalidRequest(f"{buildings * hosts_per_building} hosts cannot hold the job")
        self.job = job
        self.trace = trace
        self.clock = clock
        self.epoch = epoch
        self.repair_s = repair_s
        self.hosts: dict[str, Host] = {}
        # one width per fleet, so a building's names form one run (``host_list``)
        width = max(2, len(str(hosts_per_building - 1)))
        for b in range(buildings):
            for i in range(hosts_per_building):
                name = f"b{b}-h{i:0{width}d}"
                state = HostState.SPARE if i < spares_per_building else HostState.IDLE
                self.hosts[name] = Host(
                    name=name,
                    region=job.region,
                    building=f"b{b}",
                    gpus=job.gpus_per_host,
                    state=state,
                )
        self.quarantine: list[QuarantineRecord] = []
        self.counts = TraceCounts()
        self._next = 0
        self._pending: list[int] = []
        self._repairs: list[tuple[float, str]] = []
        self._ckpts: list[int] = []
        self._ledger: dict[str, MutationResult] = {}
        self._last = 0.0
        first = [h for h in self.hosts.values() if h.state is HostState.IDLE][: job.hosts]
        self.run = _Run(0.0, 0.0, 0, [h.name for h in first])
        self._allocate(self.run.hosts)

    # --- time ----------------------------------------------------------------------

    def now_s(self) -> float:
        """Trace time now (never earlier than the last answer), failures applied."""
        wall = self.clock()
        if self.epoch is None:
            self.epoch = wall
        t = max(wall - self.epoch, self._last)
        self._last = t
        self._advance(t)
        return t

    def productive_s(self) -> float:
        """Compute that survived so far (the job's step times ``step_s``): the ground
        truth the simulation's productive time and the supervisor's ETTR estimate."""
        return self._step(self.run, self._last) * self.job.step_s

    @property
    def elapsed_s(self) -> float:
        """The latest trace time answered so far (no clock read)."""
        return self._last

    def _advance(self, t: float) -> None:
        times = self.trace.failures_s
        while self._next < len(times) and times[self._next] <= t:
            i = self._next
            self._next += 1
            self.counts.applied += 1
            run = self.run
            if run.ended is None and run.started <= times[i] < self.trace.horizon_s:
                self.counts.hits += 1
                self._strike(run, i, times[i])
            else:
                self._pending.append(i)
        while self._repairs and self._repairs[0][0] <= t:
            _, name = self._repairs.pop(0)
            h = self.hosts[name]
            self.hosts[name] = h.model_copy(update={"gpu_health": [True] * h.gpus})

    def _strike(self, run: _Run, i: int, at: float) -> None:
        self._commit(run, at)
        run.ended = at
        if self.trace.kinds[i] == "gpu":
            name = run.hosts[self.trace.host_picks[i] % len(run.hosts)]
            h = self.hosts[name]
            self.hosts[name] = h.model_copy(update={"gpu_health": [False] + [True] * (h.gpus - 1)})
            self._repairs.append((at + self.repair_s, name))
            self._repairs.sort()

    # --- the job -------------------------------------------------------------------

    def _frozen(self, run: _Run, t: float) -> float:
        end = min(t, self.trace.horizon_s)
        return end if run.ended is None else min(end, run.ended)

    def _writes(self, run: _Run, t: float) -> tuple[int, float]:
        """(checkpoint writes finished, compute seconds done) by the run at ``t``."""
        job = self.job
        running = max(self._frozen(run, t) - run.productive, 0.0)
        cycles = int(np.floor(running / job.cycle_s + 1e-9))
        rest = running - cycles * job.cycle_s
        return cycles, cycles * job.interval_s + min(max(rest, 0.0), job.interval_s)

    def _step(self, run: _Run, t: float) -> int:
        done = self._writes(run, t)[1] / self.job.step_s
        return run.resumed_from + max(int(np.floor(done + 1e-9)), 0)

    def _commit(self, run: _Run, t: float) -> None:
        k = self.job.checkpoint_every
        first = (run.resumed_from // k + 1) * k
        written = self._writes(run, t)[0]
        new = [s for s in range(first, first + written * k, k) if s not in run.committed]
        if new:
            run.committed.extend(new)
            self._ckpts = sorted({*self._ckpts, *new})[-self.job.keep :]

    def _state(self, run: _Run, t: float) -> JobState:
        if t >= self.trace.horizon_s:
            return JobState.FINISHED
        if run.ended is None:
            return JobState.RUNNING
        return JobState.STOPPED if run.by_api else JobState.CRASHED

    def _view(self, t: float) -> TrainingJob:
        run, job = self.run, self.job
        self._commit(run, t)
        frozen = self._frozen(run, t)
        beats = np.floor((frozen - run.started) / job.heartbeat_s + 1e-9)
        ckpt = run.committed[-1] if run.committed else (run.resumed_from or None)
        state = self._state(run, t)
        return TrainingJob(
            spec=self.spec,
            state=state,
            step=self._step(run, t),
            total_steps=max(int(self.trace.horizon_s / job.step_s) + 1, 1),
            resumed_from=run.resumed_from,
            checkpoint_step=ckpt,
            last_heartbeat=_dt(self.epoch_s + run.started + float(beats) * job.heartbeat_s),
            started_at=_dt(self.epoch_s + run.started),
            ended_at=None if run.ended is None else _dt(self.epoch_s + run.ended),
            hosts=list(run.hosts),
            runs=self.counts.starts + 1,
            heartbeat_s=job.heartbeat_s,
            step_s=job.step_s,
            params_digest=None if ckpt is None else model_digest(job.name, 0, ckpt),
        )

    def now(self) -> datetime:
        """Fleet time now, as ``training_cluster().now`` reports it."""
        return _dt(self.epoch_s + self.now_s())

    @property
    def epoch_s(self) -> float:
        return 0.0 if self.epoch is None else self.epoch

    @property
    def spec(self) -> JobSpec:
        j = self.job
        return JobSpec(name=j.name, hosts=j.hosts, gpus_per_host=j.gpus_per_host, region=j.region)

    def _allocate(self, names: list[str]) -> None:
        for name in list(self.hosts):
            h = self.hosts[name]
            if h.job == self.job.name and name not in names:
                self.hosts[name] = h.model_copy(update={"state": HostState.IDLE, "job": None})
        for name in names:
            self.hosts[name] = self.hosts[name].model_copy(
                update={"state": HostState.ALLOCATED, "job": self.job.name}
            )

    def _check(self, job: str) -> None:
        if job != self.job.name:
            raise FleetNotFound(f"training job {job!r} is not in the fleet", status=404)

    # --- the fleet contract: training ------------------------------------------------

    async def training_cluster(self) -> TrainingCluster:
        t = self.now_s()
        return TrainingCluster(
            now=_dt(self.epoch_s + t),
            hosts=list(self.hosts.values()),
            quarantine=list(self.quarantine),
            jobs=[self._view(t)],
        )

    async def training_checkpoints(self, job: str) -> TrainingCheckpoints:
        self._check(job)
        t = self.now_s()
        self._commit(self.run, t)
        infos = []
        for step in self._ckpts:
            digest = model_digest(self.job.name, 0, step)
            infos.append(
                CheckpointInfo(
                    id=f"step-{step:08d}",
                    step=step,
                    digest=digest,
                    manifest_digest=digest,
                    complete=True,
                )
            )
        return TrainingCheckpoints(job=job, checkpoints=infos)

    def _once(self, key: str, kind: str, apply: Callable[[], dict[str, Any]]) -> MutationResult:
        if key in self._ledger:
            return self._ledger[key]
        result = MutationResult(
            idempotency_key=key, audit_seq=len(self._ledger) + 1, kind=kind, detail=apply()
        )
        self._ledger[key] = result
        return result

    async def stop_training_job(
        self, job: str, *, idempotency_key: str, checkpoint: bool = False
    ) -> MutationResult:
        self._check(job)
        t = self.now_s()

        def apply() -> dict[str, Any]:
            run = self.run
            was = self._state(run, t)
            if run.ended is None:
                self._commit(run, t)
                run.ended, run.by_api = min(t, self.trace.horizon_s), True
            out: dict[str, Any] = {"job": job, "was": was.value}
            if checkpoint:
                # a planned move: the step reached is checkpointed before the stop
                step = self._step(run, t)
                if step not in self._ckpts:
                    self._ckpts = sorted({*self._ckpts, step})[-self.job.keep :]
                out["checkpoint_step"] = step
            return out

        return self._once(idempotency_key, "training-stop", apply)

    async def start_training_job(
        self, request: StartJobRequest, *, idempotency_key: str
    ) -> MutationResult:
        self._check(request.job)
        t = self.now_s()
        if idempotency_key in self._ledger:
            return self._ledger[idempotency_key]
        self._refuse_start(request, t)

        def apply() -> dict[str, Any]:
            resumed = request.checkpoint_step or 0
            self._allocate(list(request.hosts))
            run = _Run(t, t + self.job.restart_s, resumed, list(request.hosts))
            self.run = run
            self.counts.starts += 1
            if self._pending:
                self.counts.deferred += 1
                self._strike(run, self._pending.pop(0), t)
            return {"job": request.job, "hosts": run.hosts, "resumed_from": resumed}

        return self._once(idempotency_key, "training-start", apply)

    def _refuse_start(self, req: StartJobRequest, t: float) -> None:
        if self.run.ended is None and t < self.trace.horizon_s:
            raise FleetRejected(f"job {req.job} is running; stop it first", status=409)
        if len(set(req.hosts)) != len(req.hosts) or len(req.hosts) != self.job.hosts:
            raise InvalidRequest(f"job {req.job} needs {self.job.hosts} distinct hosts")
        now = _dt(self.epoch_s + t)
        for name in req.hosts:
            h = self.hosts.get(name)
            if h is None or h.state is HostState.DOWN or h.healthy_gpus < self.job.gpus_per_host:
                raise FleetRejected(f"host {name} cannot run the job", status=409)
            if any(r.host == name and r.active(now) for r in self.quarantine):
                raise FleetRejected(f"host {name} is quarantined", status=409)
        if req.checkpoint_step is not None and req.checkpoint_step not in self._ckpts:
            raise InvalidRequest(f"no checkpoint at step {req.checkpoint_step}")

    async def quarantine_host(
        self, request: QuarantineRequest, *, idempotency_key: str
    ) -> MutationResult:
        t = self.now_s()
        if request.host not in self.hosts:
            raise InvalidRequest(f"unknown host {request.host!r}")
        if request.until <= _dt(self.epoch_s + t):
            raise InvalidRequest("until must be in the future")

        def apply() -> dict[str, Any]:
            now = _dt(self.epoch_s + t)
            offence = 1 + sum(1 for r in self.quarantine if r.host == request.host)
            record = QuarantineRecord(
                host=request.host,
                reason=request.reason,
                started_at=now,
                until=request.until,
                offence=offence,
            )
            self.quarantine.append(record)
            return record.model_dump(mode="json")

        return self._once(idempotency_key, "training-quarantine", apply)

    async def release_host(self, host: str, *, idempotency_key: str) -> MutationResult:
        t = self.now_s()

        def apply() -> dict[str, Any]:
            now = _dt(self.epoch_s + t)
            for i, r in enumerate(self.quarantine):
                if r.host == host and r.active(now):
                    self.quarantine[i] = r.model_copy(update={"released_at": now})
            return {"host": host}

        return self._once(idempotency_key, "training-release", apply)

    async def aclose(self) -> None:
        return None

    # --- the rest of the contract: not served -----------------------------------------

    @staticmethod
    def _none() -> NoReturn:
        raise FleetNotFound("the trace fleet serves training only", status=404, reason="trace")

    async def topology(self) -> Topology:
        self._none()

    async def routing(self) -> RoutingTable:
        self._none()

    async def write_routing(
        self, write: RoutingWrite, *, if_match: int, idempotency_key: str
    ) -> RoutingTable:
        self._none()

    async def health(self, window_s: float | None = None) -> HealthReport:
        self._none()

    async def set_service_weight(
        self, change: ServiceWeightChange, *, idempotency_key: str
    ) -> MutationResult:
        self._none()

    async def move_shards(self, move: ShardMove, *, idempotency_key: str) -> MutationResult:
        self._none()

    async def batch_job(self, action: BatchJobAction, *, idempotency_key: str) -> MutationResult:
        self._none()

    async def change_config(self, change: ConfigChange, *, idempotency_key: str) -> MutationResult:
        self._none()

    async def audit(self, since_seq: int = 0) -> list[AuditEntry]:
        self._none()
