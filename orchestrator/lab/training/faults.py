"""Faults injected into the lab's training cluster, acting as they would on real machines.

A GPU error or a dead host kills the job's process, a building power loss takes every
host in it down and opens an incident, a hung trainer is SIGSTOPped. Three act on
checkpoints: corrupt-checkpoint damages the newest, poison makes every run die writing
its first, disk-full makes every write fail. Each fault is logged with when it happened
(lab wall clock): the ground truth a supervisor's MTTD is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orchestrator.lab.errors import conflict, invalid, not_found
from orchestrator.lab.training.checkpoints import corrupt_newest
from orchestrator.lab.training.runs import Run
from orchestrator.lab.training.sharded import corrupt_newest_sharded
from orchestrator.lab.training.torchjob.run import TorchRun
from orchestrator.policy.training.models import Host, HostState, Incident

if TYPE_CHECKING:
    from orchestrator.lab.training.cluster import LabTrainingCluster

__all__ = ["FaultRecord", "TrainingFaults"]


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


class TrainingFaults:
    """The fault injector of one :class:`LabTrainingCluster`, and its log (``log``)."""

    def __init__(self, cluster: LabTrainingCluster) -> None:
        self.cluster = cluster
        self.log: list[FaultRecord] = []

    def _crash_jobs_on(self, hosts: set[str]) -> list[str]:
        hit = []
        for j in self.cluster.jobs.values():
            if j.run is not None and set(j.hosts) & hosts and not j.run.exited():
                j.run.kill()
                hit.append(j.cfg.name)
        return hit

    def _record(self, kind: str, target: str, hit: list[str], at: float) -> FaultRecord:
        record = FaultRecord(kind=kind, target=target, at=at, jobs_hit=hit)
        self.log.append(record)
        return record

    def _host(self, name: str) -> Host:
        if name not in self.cluster.hosts:
            raise not_found(f"unknown host {name!r}", "host")
        return self.cluster.hosts[name]

    def gpu_error(self, host: str, gpu: int = 0) -> FaultRecord:
        h = self._host(host)
        if not 0 <= gpu < h.gpus:
            raise invalid("gpu", f"host {host} has GPUs 0..{h.gpus - 1}")
        at = self.cluster.clock()
        health = list(h.gpu_health)
        health[gpu] = False
        self.cluster.hosts[host] = h.model_copy(update={"gpu_health": health})
        return self._record("gpu-error", f"{host}/gpu{gpu}", self._crash_jobs_on({host}), at)

    def _down(self, names: list[str]) -> None:
        for name in names:
            self.cluster.hosts[name] = self.cluster.hosts[name].model_copy(
                update={"state": HostState.DOWN, "job": None}
            )

    def host_down(self, host: str) -> FaultRecord:
        self._host(host)
        at = self.cluster.clock()
        hit = self._crash_jobs_on({host})
        self._down([host])
        return self._record("host-down", host, hit, at)

    def host_up(self, host: str) -> FaultRecord:
        h = self._host(host)
        if h.state is HostState.DOWN:
            self.cluster.hosts[host] = h.model_copy(update={"state": HostState.IDLE})
        return self._record("host-up", host, [], self.cluster.clock())

    def power(self, building: str, on: bool) -> FaultRecord:
        """The building's GPU hosts lose (``on`` False) or get back their power."""
        return self.power_restore(building) if on else self.power_loss(building)

    def power_loss(self, building: str) -> FaultRecord:
        names = [h.name for h in self.cluster.hosts.values() if h.building == building]
        if not names:
            raise not_found(f"unknown building {building!r}", "building")
        at = self.cluster.clock()
        hit = self._crash_jobs_on(set(names))
        self._down(names)
        self.cluster.incidents.append(
            Incident(
                id=f"power-{building}-{len(self.cluster.incidents) + 1}",
                building=building,
                opened_at=datetime.fromtimestamp(at, UTC),
            )
        )
        return self._record("power-loss", building, hit, at)

    def power_restore(self, building: str) -> FaultRecord:
        now = self.cluster.now()
        for i, inc in enumerate(self.cluster.incidents):
            if inc.building == building and inc.closed_at is None:
                self.cluster.incidents[i] = inc.model_copy(update={"closed_at": now})
        for h in list(self.cluster.hosts.values()):
            if h.building == building and h.state is HostState.DOWN:
                self.cluster.hosts[h.name] = h.model_copy(update={"state": HostState.IDLE})
        return self._record("power-restore", building, [], self.cluster.clock())

    def _running(self, name: str) -> Run:
        j = self.cluster.job(name)
        if j.run is None or j.run.exited():
            raise conflict(f"job {name} is not running", "job")
        return j.run

    def hang(self, job: str) -> FaultRecord:
        run = self._running(job)
        at = self.cluster.clock()
        run.pause()
        return self._record("hang", job, [job], at)

    def rank_kill(self, job: str, rank: int) -> FaultRecord:
        """SIGKILL one rank of a PyTorch job (its torchrun agent sees it die)."""
        run = self._running(job)
        if not isinstance(run, TorchRun):
            raise conflict(f"job {job} is not a PyTorch job: it has no ranks", "job")
        if not 0 <= rank < len(run.job.agents):
            raise invalid("rank", f"job {job} has ranks 0..{len(run.job.agents) - 1}")
        at = self.cluster.clock()
        try:
            run.kill_rank(rank)
        except ProcessLookupError as exc:
            raise conflict(f"job {job}: {exc}", "rank") from None
        return self._record("rank-kill", f"{job}/{rank}", [job], at)

    def straggler(self, job: str, factor: float) -> FaultRecord:
        if factor <= 0:
            raise invalid("factor", "must be positive")
        self._running(job).set_slow_factor(factor)
        return self._record("straggler", job, [], self.cluster.clock())

    def corrupt_checkpoint(self, job: str, crash: bool = True) -> FaultRecord:
        """Corrupt the newest committed checkpoint; with ``crash`` the job dies too.

        Corruption only matters when the job resumes, so the fault normally comes
        with the crash (a storage fault that takes the job down) that makes it matter.
        """
        j = self.cluster.job(job)
        at = self.cluster.clock()
        hit = []
        if crash and j.run is not None and not j.run.exited():
            # Killed first, so it cannot commit a newer checkpoint over the corrupt one.
            j.run.kill()
            hit.append(job)
        if self.cluster.mode == "live":
            try:
                corrupt = corrupt_newest_sharded if j.cfg.kind == "torch" else corrupt_newest
                step = corrupt(self.cluster.workdir(job)).step
            except Exception as exc:
                raise conflict(f"job {job}: {exc}", "job") from None
        else:
            self.cluster.commit_model_checkpoints(j)
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
        if self.cluster.mode != "live":
            raise invalid("kind", "poison needs live mode (it rides on the trainer's crash hook)")
        j = self.cluster.job(job)
        j.poisoned = True
        at = self.cluster.clock()
        hit = []
        if j.run is not None and not j.run.exited():
            j.run.kill()
            hit.append(job)
        return self._record("poison", job, hit, at)

    def disk_full(self, job: str) -> FaultRecord:
        """Fill the job's checkpoint storage: its next checkpoint write, and every later
        run's, fails with ENOSPC, and the trainer exits 5 ("disk full")."""
        if self.cluster.mode != "live":
            raise invalid("kind", "disk-full needs live mode (real trainers write the files)")
        j = self.cluster.job(job)
        j.disk_full = True
        hit = []
        if j.run is not None and not j.run.exited():
            j.run.fill_disk()
            hit.append(job)
        return self._record("disk-full", job, hit, self.cluster.clock())
