"""The lab's training cluster: GPU hosts in buildings, a spare pool, jobs and their faults.

Every building of the lab config gets ``hosts_per_building`` hosts, the first
``spares_per_building`` of them spares. A job runs as one :class:`~.runs.LiveRun`
(a real trainer process whose checkpoints live in the job's own directory, the
"shared storage" every host of the job can read) or, in model mode, a
:class:`~.runs.ModelRun`. Faults act the way they would on real machines: a GPU
error or a dead host kills the job's process, a building power loss takes every
host in it down and opens an incident, a hung trainer is SIGSTOPped.
"""

from __future__ import annotations

import atexit
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from orchestrator.contracts.training import (
    JobState,
    StartJobRequest,
    TrainingCluster,
    TrainingJob,
)
from orchestrator.lab.errors import conflict, invalid, not_found
from orchestrator.lab.training.checkpoints import corrupt_newest, list_checkpoints
from orchestrator.lab.training.config import TrainingJobConfig, TrainingLabConfig
from orchestrator.lab.training.runs import LiveRun, ModelRun, Run, model_digest
from orchestrator.lab.training.sharded import corrupt_newest_sharded, list_sharded
from orchestrator.lab.training.torchjob.args import WorkerArgs
from orchestrator.lab.training.torchjob.run import TorchRun
from orchestrator.lab.training.trainer import TrainerArgs
from orchestrator.policy.training.models import (
    CheckpointInfo,
    Host,
    HostState,
    Incident,
    JobSpec,
    QuarantineRecord,
)

__all__ = ["FaultRecord", "LabTrainingCluster"]

Clock = Callable[[], float]


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


@dataclass
class FaultRecord:
    """One injected fault and when (lab wall clock): the ground truth for MTTD."""

    kind: str
    target: str
    at: float
    jobs_hit: list[str] = field(default_factory=list)
    #: corrupt-checkpoint: the step whose data was damaged
    step: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "at": self.at,
            "jobs_hit": self.jobs_hit,
            "step": self.step,
        }


@dataclass
class _Job:
    cfg: TrainingJobConfig
    hosts: list[str] = field(default_factory=list)
    run: Run | None = None
    runs: int = 0
    #: model mode: committed checkpoint steps and the corrupted ones
    model_ckpts: set[int] = field(default_factory=set)
    model_corrupt: set[int] = field(default_factory=set)
    #: the "poison" fault: every run dies writing its first checkpoint (a crash loop)
    poisoned: bool = False
    #: the "disk full" fault: the job's storage takes no more checkpoints, for every run
    disk_full: bool = False

    @property
    def spec(self) -> JobSpec:
        c = self.cfg
        return JobSpec(name=c.name, hosts=c.hosts, gpus_per_host=c.gpus_per_host, region=c.region)


class LabTrainingCluster:
    def __init__(
        self,
        config: TrainingLabConfig,
        buildings: list[tuple[str, str]],
        mode: Literal["live", "model"],
        *,
        clock: Clock = time.time,
    ) -> None:
        self.mode = mode
        self.clock = clock
        self.hosts: dict[str, Host] = {}
        for region, building in buildings:
            for i in range(config.hosts_per_building):
                name = f"{building}-h{i:02d}"
                state = HostState.SPARE if i < config.spares_per_building else HostState.IDLE
                self.hosts[name] = Host(
                    name=name,
                    region=region,
                    building=building,
                    gpus=config.gpus_per_host,
                    state=state,
                )
        self.jobs = {j.name: _Job(j) for j in config.jobs}
        self.incidents: list[Incident] = []
        self.quarantine: list[QuarantineRecord] = []
        self.faults: list[FaultRecord] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if config.workdir is not None:
            self.root = Path(config.workdir)
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="lab-training-")
            self.root = Path(self._tmp.name)
        atexit.register(self.close)

    # --- reads -------------------------------------------------------------------------

    def job(self, name: str) -> _Job:
        if name not in self.jobs:
            raise not_found(f"unknown training job {name!r}", "job")
        return self.jobs[name]

    def workdir(self, name: str) -> Path:
        return self.root / name

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def job_view(self, j: _Job) -> TrainingJob:
        run = j.run
        cfg = j.cfg
        common: dict[str, Any] = {
            "spec": j.spec,
            "total_steps": cfg.total_steps,
            "hosts": list(j.hosts),
            "runs": j.runs,
            "heartbeat_s": cfg.heartbeat_s,
            "step_s": cfg.step_ms / 1000.0 or 1e-3,
        }
        if run is None:
            return TrainingJob(state=JobState.PENDING, step=0, **common)
        state = run.state(self.clock)
        ckpt = run.checkpoint_step()
        digest = run.params_digest()
        if self.mode == "model":
            self._commit_model_checkpoints(j)
            if ckpt is not None:
                digest = model_digest(cfg.name, cfg.seed, ckpt)
        return TrainingJob(
            state=state,
            step=run.step(),
            resumed_from=run.resumed_from,
            checkpoint_step=ckpt,
            last_heartbeat=_dt(run.last_heartbeat()),
            ended_at=_dt(run.ended_at),
            started_at=_dt(run.started_at),
            step_ms_avg=run.step_ms_avg(),
            host_step_ms=run.host_step_ms(),
            params_digest=digest,
            failure=run.failure() if state is JobState.CRASHED else None,
            **common,
        )

    def cluster(self) -> TrainingCluster:
        return TrainingCluster(
            now=self._now(),
            hosts=[h.model_copy() for h in self.hosts.values()],
            incidents=list(self.incidents),
            quarantine=list(self.quarantine),
            jobs=[self.job_view(j) for j in self.jobs.values()],
        )

    def _commit_model_checkpoints(self, j: _Job) -> None:
        run = j.run
        if run is None:
            return
        k = j.cfg.checkpoint_every
        top = run.step()
        first = (run.resumed_from // k + 1) * k
        j.model_ckpts.update(range(first, top + 1, k))
        if run.finished():
            j.model_ckpts.add(top)
        keep = sorted(j.model_ckpts)[-j.cfg.keep :]
        j.model_ckpts = set(keep)

    def checkpoints(self, name: str) -> list[CheckpointInfo]:
        j = self.job(name)
        if self.mode == "live":
            workdir = self.workdir(name)
            if not workdir.exists():
                return []
            return list_sharded(workdir) if j.cfg.kind == "torch" else list_checkpoints(workdir)
        self._commit_model_checkpoints(j)
        out = []
        for step in sorted(j.model_ckpts):
            manifest = model_digest(j.cfg.name, j.cfg.seed, step)
            actual = "0" * 64 if step in j.model_corrupt else manifest
            out.append(
                CheckpointInfo(
                    id=f"step-{step:08d}",
                    step=step,
                    digest=actual,
                    manifest_digest=manifest,
                    complete=True,
                )
            )
        return out

    # --- mutations (called through the ledger, so each key applies once) ------------

    def _quarantined(self, host: str) -> bool:
        now = self._now()
        return any(r.host == host and r.active(now) for r in self.quarantine)

    def start(self, req: StartJobRequest) -> dict[str, Any]:
        j = self.job(req.job)
        if j.run is not None and j.run.state(self.clock) is JobState.RUNNING:
            raise conflict(f"job {req.job} is running; stop it first", "job")
        if len(set(req.hosts)) != len(req.hosts):
            raise invalid("hosts", "a host is listed twice")
        if len(req.hosts) != j.cfg.hosts:
            raise invalid("hosts", f"job {req.job} needs {j.cfg.hosts} hosts, got {len(req.hosts)}")
        for name in req.hosts:
            host = self.hosts.get(name)
            if host is None:
                raise invalid("hosts", f"unknown host {name!r}")
            if host.state is HostState.DOWN:
                raise conflict(f"host {name} is down", "hosts")
            if host.state is HostState.ALLOCATED and host.job != req.job:
                raise conflict(f"host {name} is allocated to {host.job}", "hosts")
            if self._quarantined(name):
                raise conflict(f"host {name} is quarantined", "hosts")
            if host.healthy_gpus < j.cfg.gpus_per_host:
                raise conflict(f"host {name} has only {host.healthy_gpus} healthy GPUs", "hosts")
        if req.checkpoint_step is not None:
            known = {c.step for c in self.checkpoints(req.job)}
            if req.checkpoint_step not in known:
                raise invalid("checkpoint_step", f"no checkpoint at step {req.checkpoint_step}")
        for name in j.hosts:
            host = self.hosts[name]
            if name not in req.hosts and host.job == req.job:
                self.hosts[name] = host.model_copy(update={"state": HostState.IDLE, "job": None})
        for name in req.hosts:
            self.hosts[name] = self.hosts[name].model_copy(
                update={"state": HostState.ALLOCATED, "job": req.job}
            )
        j.hosts = list(req.hosts)
        resumed = req.checkpoint_step or 0
        cfg = j.cfg
        if self.mode == "live" and cfg.kind == "torch":
            j.run = TorchRun(self._torch_args(cfg, req), resumed)
        elif self.mode == "live":
            args = TrainerArgs(
                job=cfg.name,
                workdir=self.workdir(cfg.name),
                hosts=tuple(req.hosts),
                total_steps=cfg.total_steps,
                checkpoint_every=cfg.checkpoint_every,
                step_ms=cfg.step_ms,
                seed=cfg.seed,
                resume="none" if req.checkpoint_step is None else req.checkpoint_step,
                keep=cfg.keep,
                heartbeat_s=cfg.heartbeat_s,
                slow_factor=1.0,
                crash_at=("data", (resumed // cfg.checkpoint_every + 1) * cfg.checkpoint_every)
                if j.poisoned
                else None,
            )
            j.run = LiveRun(args, resumed, disk_full=j.disk_full)
        else:
            j.run = ModelRun(
                clock=self.clock,
                resumed_from=resumed,
                total_steps=cfg.total_steps,
                step_s=cfg.step_ms / 1000.0 or 1e-3,
                heartbeat_s=cfg.heartbeat_s,
                checkpoint_every=cfg.checkpoint_every,
            )
        j.runs += 1
        return {"job": req.job, "hosts": j.hosts, "resumed_from": resumed, "run": j.runs}

    def _torch_args(self, cfg: TrainingJobConfig, req: StartJobRequest) -> WorkerArgs:
        return WorkerArgs(
            job=cfg.name,
            workdir=self.workdir(cfg.name),
            hosts=tuple(req.hosts),
            total_steps=cfg.total_steps,
            checkpoint_every=cfg.checkpoint_every,
            seed=cfg.seed,
            resume="none" if req.checkpoint_step is None else req.checkpoint_step,
            keep=cfg.keep,
            heartbeat_s=cfg.heartbeat_s,
            batch=32,
            lr=1e-3,
            save="async",
            step_ms=cfg.step_ms,
            timeout_s=30.0,
        )

    def stop(self, name: str, checkpoint: bool = False) -> dict[str, Any]:
        """Stop the job; with ``checkpoint`` it first checkpoints at its current step (a
        planned move), and ``checkpoint_step`` in the answer is the step to resume from."""
        j = self.job(name)
        was = "pending" if j.run is None else j.run.state(self.clock).value
        if j.run is not None and was == JobState.RUNNING.value:
            if checkpoint:
                j.run.checkpoint_stop()
            else:
                j.run.stop()
        step = 0 if j.run is None else j.run.step()
        out: dict[str, Any] = {"job": name, "was": was, "step": step}
        if checkpoint:
            if j.run is not None and self.mode == "model":
                self._commit_model_checkpoints(j)
                ckpt = j.run.checkpoint_step()
                if ckpt is not None:
                    j.model_ckpts.add(ckpt)
            known = [c.step for c in self.checkpoints(name) if c.step <= step]
            out["checkpoint_step"] = max(known) if known else None
        return out

    def quarantine_host(self, host: str, reason: str, until: datetime) -> dict[str, Any]:
        if host not in self.hosts:
            raise invalid("host", f"unknown host {host!r}")
        now = self._now()
        if until <= now:
            raise invalid("until", "must be in the future")
        offence = 1 + sum(1 for r in self.quarantine if r.host == host)
        record = QuarantineRecord(
            host=host, reason=reason, started_at=now, until=until, offence=offence
        )
        self.quarantine.append(record)
        return record.model_dump(mode="json")

    def release_host(self, host: str) -> dict[str, Any]:
        if host not in self.hosts:
            raise invalid("host", f"unknown host {host!r}")
        now = self._now()
        released = 0
        for i, r in enumerate(self.quarantine):
            if r.host == host and r.active(now):
                self.quarantine[i] = r.model_copy(update={"released_at": now})
                released += 1
        h = self.hosts[host]
        # A host comes back from quarantine repaired: its GPUs were swapped or reset.
        self.hosts[host] = h.model_copy(update={"gpu_health": [True] * h.gpus})
        return {"host": host, "released": released}

    # --- faults (lab only) ---------------------------------------------------------------

    def _crash_jobs_on(self, hosts: set[str]) -> list[str]:
        hit = []
        for j in self.jobs.values():
            if j.run is not None and set(j.hosts) & hosts and not j.run.exited():
                j.run.kill()
                hit.append(j.cfg.name)
        return hit

    def _record(self, kind: str, target: str, hit: list[str], at: float) -> FaultRecord:
        record = FaultRecord(kind=kind, target=target, at=at, jobs_hit=hit)
        self.faults.append(record)
        return record

    def _host(self, name: str) -> Host:
        if name not in self.hosts:
            raise not_found(f"unknown host {name!r}", "host")
        return self.hosts[name]

    def gpu_error(self, host: str, gpu: int = 0) -> FaultRecord:
        h = self._host(host)
        if not 0 <= gpu < h.gpus:
            raise invalid("gpu", f"host {host} has GPUs 0..{h.gpus - 1}")
        at = self.clock()
        health = list(h.gpu_health)
        health[gpu] = False
        self.hosts[host] = h.model_copy(update={"gpu_health": health})
        return self._record("gpu-error", f"{host}/gpu{gpu}", self._crash_jobs_on({host}), at)

    def _down(self, names: list[str]) -> None:
        for name in names:
            self.hosts[name] = self.hosts[name].model_copy(
                update={"state": HostState.DOWN, "job": None}
            )

    def host_down(self, host: str) -> FaultRecord:
        self._host(host)
        at = self.clock()
        hit = self._crash_jobs_on({host})
        self._down([host])
        return self._record("host-down", host, hit, at)

    def host_up(self, host: str) -> FaultRecord:
        h = self._host(host)
        if h.state is HostState.DOWN:
            self.hosts[host] = h.model_copy(update={"state": HostState.IDLE})
        return self._record("host-up", host, [], self.clock())

    def power_loss(self, building: str) -> FaultRecord:
        names = [h.name for h in self.hosts.values() if h.building == building]
        if not names:
            raise not_found(f"unknown building {building!r}", "building")
        at = self.clock()
        hit = self._crash_jobs_on(set(names))
        self._down(names)
        self.incidents.append(
            Incident(
                id=f"power-{building}-{len(self.incidents) + 1}",
                building=building,
                opened_at=datetime.fromtimestamp(at, UTC),
            )
        )
        return self._record("power-loss", building, hit, at)

    def power_restore(self, building: str) -> FaultRecord:
        now = self._now()
        for i, inc in enumerate(self.incidents):
            if inc.building == building and inc.closed_at is None:
                self.incidents[i] = inc.model_copy(update={"closed_at": now})
        for h in list(self.hosts.values()):
            if h.building == building and h.state is HostState.DOWN:
                self.hosts[h.name] = h.model_copy(update={"state": HostState.IDLE})
        return self._record("power-restore", building, [], self.clock())

    def _running(self, name: str) -> Run:
        j = self.job(name)
        if j.run is None or j.run.exited():
            raise conflict(f"job {name} is not running", "job")
        return j.run

    def hang(self, job: str) -> FaultRecord:
        run = self._running(job)
        at = self.clock()
        run.pause()
        return self._record("hang", job, [job], at)

    def rank_kill(self, job: str, rank: int) -> FaultRecord:
        """SIGKILL one rank of a PyTorch job (its torchrun agent sees it die)."""
        run = self._running(job)
        if not isinstance(run, TorchRun):
            raise conflict(f"job {job} is not a PyTorch job: it has no ranks", "job")
        if not 0 <= rank < len(run.job.agents):
            raise invalid("rank", f"job {job} has ranks 0..{len(run.job.agents) - 1}")
        at = self.clock()
        try:
            run.kill_rank(rank)
        except ProcessLookupError as exc:
            raise conflict(f"job {job}: {exc}", "rank") from None
        return self._record("rank-kill", f"{job}/{rank}", [job], at)

    def straggler(self, job: str, factor: float) -> FaultRecord:
        if factor <= 0:
            raise invalid("factor", "must be positive")
        self._running(job).set_slow_factor(factor)
        return self._record("straggler", job, [], self.clock())

    def corrupt_checkpoint(self, job: str, crash: bool = True) -> FaultRecord:
        """Corrupt the newest committed checkpoint; with ``crash`` the job dies too.

        Corruption only matters when the job resumes, so the fault normally comes
        with the crash (a storage fault that takes the job down) that makes it matter.
        """
        j = self.job(job)
        at = self.clock()
        hit = []
        if crash and j.run is not None and not j.run.exited():
            # Killed first, so it cannot commit a newer checkpoint over the corrupt one.
            j.run.kill()
            hit.append(job)
        if self.mode == "live":
            try:
                corrupt = corrupt_newest_sharded if j.cfg.kind == "torch" else corrupt_newest
                step = corrupt(self.workdir(job)).step
            except Exception as exc:
                raise conflict(f"job {job}: {exc}", "job") from None
        else:
            self._commit_model_checkpoints(j)
            if not j.model_ckpts:
                raise conflict(f"job {job} has no checkpoint to corrupt", "job")
            step = max(j.model_ckpts)
            j.model_corrupt.add(step)
        record = self._record("corrupt-checkpoint", job, hit, at)
        record.step = step
        return record

    def poison(self, job: str) -> FaultRecord:
        """Crash the job now, and every later run while writing its first checkpoint.

        A bad data shard or a corrupt optimizer state in miniature: restarts never get
        past the checkpoint they resumed from, which is what the crash-loop guard is for.
        """
        if self.mode != "live":
            raise invalid("kind", "poison needs live mode (it rides on the trainer's crash hook)")
        j = self.job(job)
        j.poisoned = True
        at = self.clock()
        hit = []
        if j.run is not None and not j.run.exited():
            j.run.kill()
            hit.append(job)
        return self._record("poison", job, hit, at)

    def disk_full(self, job: str) -> FaultRecord:
        """Fill the job's checkpoint storage: its next checkpoint write, and every later
        run's, fails with ENOSPC, and the trainer exits 5 ("disk full")."""
        if self.mode != "live":
            raise invalid("kind", "disk-full needs live mode (real trainers write the files)")
        j = self.job(job)
        j.disk_full = True
        hit = []
        if j.run is not None and not j.run.exited():
            j.run.fill_disk()
            hit.append(job)
        return self._record("disk-full", job, hit, self.clock())

    def close(self) -> None:
        for j in self.jobs.values():
            if j.run is not None and not j.run.exited():
                j.run.kill()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
