"""The vocabulary of training-job recovery: hosts, jobs, checkpoints, incidents, quarantine.

The pure recovery policy takes and returns these models; the fleet contract reuses
them for the training resources (hosts with GPU health, jobs, checkpoints with
digests, quarantine). Timestamps are timezone-aware so a workflow's
``workflow.now()`` and a lab's wall clock compare without surprises.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import AwareDatetime, Field, model_validator

from orchestrator.models import StrictModel

__all__ = [
    "DEFAULT_GPUS_PER_HOST",
    "CheckpointChoice",
    "CheckpointInfo",
    "CheckpointRejection",
    "CrashLoopAction",
    "CrashLoopDecision",
    "Host",
    "HostState",
    "Incident",
    "JobSpec",
    "Placement",
    "QuarantinePolicy",
    "QuarantineRecord",
    "RecoveryAttempt",
    "RejectReason",
]

#: GPUs per host (node) unless a host or job says otherwise: DGX/HGX A100 and H100 boxes.
DEFAULT_GPUS_PER_HOST = 8


# --- hosts and jobs -----------------------------------------------------------


class HostState(StrEnum):
    #: held in the warm spare pool: the first choice for a replacement
    SPARE = "spare"
    #: free, but not reserved as a spare
    IDLE = "idle"
    #: running a job (``Host.job`` names it)
    ALLOCATED = "allocated"
    #: unreachable or powered off
    DOWN = "down"


class Host(StrictModel):
    name: str = Field(min_length=1)
    region: str = Field(min_length=1)
    building: str = Field(min_length=1)
    gpus: int = Field(default=DEFAULT_GPUS_PER_HOST, ge=1)
    #: one flag per GPU, True when healthy (no XID error, no ECC, link up)
    gpu_health: list[bool] = Field(default_factory=list)
    state: HostState = HostState.IDLE
    #: the job this host is allocated to, when ``state`` is allocated
    job: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Host:
        if not self.gpu_health:
            self.gpu_health = [True] * self.gpus
        elif len(self.gpu_health) != self.gpus:
            raise ValueError(
                f"gpu_health has {len(self.gpu_health)} entries but gpus is {self.gpus}"
            )
        if (self.state is HostState.ALLOCATED) != (self.job is not None):
            raise ValueError("job must be set exactly when state is 'allocated'")
        return self

    @property
    def healthy_gpus(self) -> int:
        return sum(self.gpu_health)


class JobSpec(StrictModel):
    name: str = Field(min_length=1)
    #: whole hosts the job needs
    hosts: int = Field(ge=1)
    #: healthy GPUs each host must have
    gpus_per_host: int = Field(default=DEFAULT_GPUS_PER_HOST, ge=1)
    #: the region the job prefers (its data and storage live there)
    region: str = Field(min_length=1)


# --- checkpoints ----------------------------------------------------------------


class CheckpointInfo(StrictModel):
    """One checkpoint as listed by the fleet.

    ``manifest_digest`` is the sha256 the trainer recorded in the manifest, which it
    writes last; no manifest means the checkpoint is partial. ``digest`` is the
    sha256 actually computed over the data now (None: not computed).
    """

    id: str = Field(min_length=1)
    step: int = Field(ge=0)
    digest: str | None = None
    manifest_digest: str | None = None
    #: the manifest exists, so the writer finished
    complete: bool = False

    @model_validator(mode="after")
    def _check(self) -> CheckpointInfo:
        if self.manifest_digest is not None and not self.complete:
            raise ValueError("manifest_digest is set but complete is false")
        return self


class RejectReason(StrEnum):
    PARTIAL = "partial"
    UNVERIFIED = "unverified"
    CORRUPT = "corrupt"
    FAILED_RESUMES = "failed_resumes"
    #: valid, but a newer valid checkpoint was chosen
    SUPERSEDED = "superseded"


class CheckpointRejection(StrictModel):
    id: str
    step: int
    reason: RejectReason
    detail: str


class CheckpointChoice(StrictModel):
    #: None: start from step 0 (the job has never checkpointed)
    chosen: CheckpointInfo | None
    #: every checkpoint not chosen, newest first, with the reason
    rejected: list[CheckpointRejection] = Field(default_factory=list)

    @property
    def step(self) -> int:
        return 0 if self.chosen is None else self.chosen.step


# --- incidents and quarantine ---------------------------------------------------------


class Incident(StrictModel):
    """An outage of a building (power, cooling, network) or a whole region."""

    id: str = Field(min_length=1)
    building: str | None = None
    region: str | None = None
    opened_at: AwareDatetime
    closed_at: AwareDatetime | None = None

    @model_validator(mode="after")
    def _check(self) -> Incident:
        if self.building is None and self.region is None:
            raise ValueError("an incident needs a building or a region")
        if self.closed_at is not None and self.closed_at < self.opened_at:
            raise ValueError("closed_at is before opened_at")
        return self

    def is_open(self, now: AwareDatetime) -> bool:
        return self.opened_at <= now and (self.closed_at is None or now < self.closed_at)


class QuarantinePolicy(StrictModel):
    """Cooldown grows by ``factor`` per offence within ``horizon_s``, up to ``max_cooldown_s``.

    Cooldowns, not permanent bans: a host that behaves comes back (Horovod#1926).
    """

    base_cooldown_s: float = Field(default=3600.0, gt=0)
    factor: float = Field(default=4.0, ge=1.0)
    max_cooldown_s: float = Field(default=7 * 86400.0, gt=0)
    #: offences older than this no longer count towards a longer cooldown
    horizon_s: float = Field(default=30 * 86400.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> QuarantinePolicy:
        if self.max_cooldown_s < self.base_cooldown_s:
            raise ValueError("max_cooldown_s is below base_cooldown_s")
        return self


class QuarantineRecord(StrictModel):
    host: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    started_at: AwareDatetime
    until: AwareDatetime
    #: 1 for a first offence within the policy horizon, 2 for the second, ...
    offence: int = Field(ge=1)
    #: set when an operator released the host before ``until``
    released_at: AwareDatetime | None = None

    @model_validator(mode="after")
    def _check(self) -> QuarantineRecord:
        if self.until <= self.started_at:
            raise ValueError("until must be after started_at")
        return self

    def active(self, now: AwareDatetime) -> bool:
        if self.released_at is not None and self.released_at <= now:
            return False
        return self.started_at <= now < self.until


# --- placement and crash loops -------------------------------------------------------------


class Placement(StrictModel):
    job: str
    region: str
    hosts: list[str]
    buildings: list[str]
    #: hosts the job already held and keeps
    kept: list[str] = Field(default_factory=list)
    #: hosts taken from the spare pool
    from_spares: list[str] = Field(default_factory=list)
    #: hosts taken from idle, non-spare capacity
    from_idle: list[str] = Field(default_factory=list)
    #: True when the job's own region could not hold it
    moved_region: bool = False


class RecoveryAttempt(StrictModel):
    """One recovery, as the supervisor saw it."""

    #: the step the job had reached when the failure that triggered it happened
    failed_at_step: int = Field(ge=0)
    resumed_from_step: int = Field(ge=0)
    #: the highest step seen after the restart; None while the attempt is still running
    #: and undecided. An attempt that crashed before any step sets it to
    #: ``resumed_from_step``.
    reached_step: int | None = Field(default=None, ge=0)
    #: the newest checkpoint committed after the restart, if any
    checkpointed_step: int | None = Field(default=None, ge=0)


class CrashLoopAction(StrEnum):
    CONTINUE = "continue"
    HALT = "halt"


class CrashLoopDecision(StrictModel):
    action: CrashLoopAction
    #: the trailing run of recoveries that made no progress
    without_progress: int
    reason: str
