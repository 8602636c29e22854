"""The lab's training cluster: GPU hosts in buildings, a spare pool, jobs and their faults.

Every building of the lab config gets ``hosts_per_building`` hosts, the first
``spares_per_building`` of them spares. A job runs as one :class:`~.runs.LiveRun`
(a real trainer process whose checkpoints live in the job's own directory, the
"shared storage" every host of the job can read) or, in model mode, a
:class:`~.runs.ModelRun`. Faults (``faults``, :class:`~.faults.TrainingFaults`) act
the way they would on real machines.
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
from orchestrator.lab.training.checkpoints import list_checkpoints
from orchestrator.lab.training.config import TrainingJobConfig, TrainingLabConfig
from orchestrator.lab.training.faults import TrainingFaults
from orchestrator.lab.training.runs import LiveRun, ModelRun, Run, model_digest
from orchestrator.lab.training.sharded import list_sharded
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

__all__ = ["LabTrainingCluster"]

Clock = Callable[[], float]


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


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
        self.faults = TrainingFaults(self)
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

    def now(self) -> datetime:
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
            self.commit_model_checkpoints(j)
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
            now=self.now(),
            hosts=[h.model_copy() for h in self.hosts.values()],
            incidents=list(self.incidents),
            quarantine=list(self.quarantine),
            jobs=[self.job_view(j) for j in self.jobs.values()],
        )

    def commit_model_checkpoints(self, j: _Job) -> None:
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
        self.commit_model_checkpoints(j)
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
        now = self.now()
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
                self.commit_model_checkpoints(j)
                ckpt = j.run.checkpoint_step()
                if ckpt is not None:
                    j.model_ckpts.add(ckpt)
            known = [c.step for c in self.checkpoints(name) if c.step <= step]
            out["checkpoint_step"] = max(known) if known else None
        return out

    def quarantine_host(self, host: str, reason: str, until: datetime) -> dict[str, Any]:
        if host not in self.hosts:
            raise invalid("host", f"unknown host {host!r}")
        now = self.now()
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
        now = self.now()
        released = 0
        for i, r in enumerate(self.quarantine):
            if r.host == host and r.active(now):
                self.quarantine[i] = r.model_copy(update={"released_at": now})
                released += 1
        h = self.hosts[host]
        # A host comes back from quarantine repaired: its GPUs were swapped or reset.
        self.hosts[host] = h.model_copy(update={"gpu_health": [True] * h.gpus})
        return {"host": host, "released": released}

    def close(self) -> None:
        for j in self.jobs.values():
            if j.run is not None and not j.run.exited():
                j.run.kill()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
