"""What the training supervisor takes, keeps and answers: inputs, failures, status.

Shared by the workflows, the CLI (``orchestrator training status``) and the helper
that starts a supervised lab job, so they all read the same shape.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import AwareDatetime, Field, model_validator

from orchestrator.contracts.failure_totals import FailureTotals, totals_of
from orchestrator.contracts.host_list import HostList
from orchestrator.contracts.training_moves import MoveRecord
from orchestrator.models import StrictModel
from orchestrator.policy.training.models import (
    CheckpointRejection,
    QuarantineRecord,
    RecoveryAttempt,
)

__all__ = [
    "SUPERVISOR_WORKFLOW",
    "FailureKind",
    "FailureRecord",
    "RecoveryInput",
    "RecoveryResult",
    "SupervisorInput",
    "SupervisorState",
    "SupervisorStatus",
    "WatchMode",
    "supervisor_id",
]


#: the workflow type a client starts (workflows/training_supervisor.py defines it)
SUPERVISOR_WORKFLOW = "TrainingJobSupervisorWorkflow"


def supervisor_id(job: str) -> str:
    return f"training-{job}"


class FailureKind(StrEnum):
    GPU = "gpu"
    HOST_DOWN = "host-down"
    BUILDING = "building"
    CRASH = "crash"
    HANG = "hang"
    #: one host computes far slower than the job's others: the whole job waits for it
    STRAGGLER = "straggler"
    #: the job was never started (or was stopped by hand): the supervisor launches it
    LAUNCH = "launch"
    #: the last run reported a failure no restart can cure (disk full, checkpoint
    #: manifests lost): the supervisor halts and alerts instead of crash-looping
    FATAL = "fatal"


class WatchMode(StrEnum):
    """How the watch and the restart confirmation poll the fleet."""

    #: one long activity polls every ``poll_s`` and heartbeats to Temporal
    HEARTBEAT = "heartbeat"
    #: every poll is one short activity attempt; nothing to report fails it with a
    #: retryable StillWaiting and Temporal retries after ``poll_s``, so the workflow
    #: waits on the server's retry timer (a time-skipping server skips it)
    RETRY = "retry"


class SupervisorState(StrEnum):
    WATCHING = "watching"
    RECOVERING = "recovering"
    #: a planned move (the ``move_job`` Update) is checkpointing and restarting the job
    MOVING = "moving"
    FINISHED = "finished"
    #: the crash-loop guard, or a failure no restart can cure, stopped it: a human has to look
    HALTED = "halted"


class FailureRecord(StrictModel):
    number: int = Field(ge=0)
    kind: FailureKind
    #: best estimate of the onset: the run's end for a crash, its last heartbeat for a hang
    onset_at: AwareDatetime
    detected_at: AwareDatetime
    decided_at: AwareDatetime | None = None
    restarted_at: AwareDatetime | None = None
    #: the first step past the checkpoint was seen (the job is productive again)
    recovered_at: AwareDatetime | None = None
    failed_at_step: int = Field(ge=0)
    resumed_from_step: int | None = None
    #: host lists travel as ranges (``host_list``): a 2,048-host record is 45 KB as lists
    hosts_before: HostList = Field(default_factory=list)
    hosts_after: HostList = Field(default_factory=list)
    quarantined: HostList = Field(default_factory=list)
    #: set once carried across continue-as-new: the full lists above are emptied and only
    #: the change is kept (hosts that left the job, hosts that joined). A fragmented
    #: 2,048-host list is kilobytes; every record carrying two would not stay bounded.
    hosts_compacted: bool = False
    hosts_out: HostList = Field(default_factory=list)
    hosts_in: HostList = Field(default_factory=list)
    rejected_checkpoints: list[CheckpointRejection] = Field(default_factory=list)
    confirmed: bool = False
    detail: str = ""

    def compacted(self) -> FailureRecord:
        """This record with its host lists replaced by their difference (order kept)."""
        if self.hosts_compacted:
            return self
        before, after = set(self.hosts_before), set(self.hosts_after)
        return self.model_copy(
            update={
                "hosts_compacted": True,
                "hosts_out": [h for h in self.hosts_before if h not in after],
                "hosts_in": [h for h in self.hosts_after if h not in before],
                "hosts_before": [],
                "hosts_after": [],
            }
        )

    @property
    def mttd_s(self) -> float:
        return (self.detected_at - self.onset_at).total_seconds()

    @property
    def mttr_s(self) -> float | None:
        if self.recovered_at is None:
            return None
        return (self.recovered_at - self.onset_at).total_seconds()

    @property
    def lost_steps(self) -> int | None:
        if self.resumed_from_step is None:
            return None
        return max(self.failed_at_step - self.resumed_from_step, 0)


class SupervisorInput(StrictModel):
    job: str = Field(min_length=1)
    #: a heartbeat older than this means the trainer is hung (keep it under two intervals)
    hang_after_s: float = Field(default=1.5, gt=0)
    #: how often the watcher reads the fleet
    poll_s: float = Field(default=0.2, gt=0)
    #: how long a restarted job may take to step past its checkpoint
    confirm_timeout_s: float = Field(default=120.0, gt=0)
    watch_mode: WatchMode = WatchMode.HEARTBEAT
    #: how often a restart's progress is read (None: ``poll_s``)
    confirm_poll_s: float | None = Field(default=None, gt=0)
    crash_loop_limit: int = Field(default=3, ge=1)
    #: resumes from one checkpoint that made no progress before it is passed over for an
    #: older one; size it with the limit at high failure rates (crash_loop_limit_for)
    max_failed_resumes: int = Field(default=2, ge=1)
    #: continue-as-new after this many failures (history stays short)
    failures_per_run: int = Field(default=25, ge=1)
    #: failure records carried in full across continue-as-new; older ones are folded
    #: into ``totals`` so the input stays bounded (issue 24)
    keep_failures: int = Field(default=30, ge=1)
    #: the trainer's blocking checkpoint write, seconds per checkpoint, and the compute
    #: between two checkpoints: the supervisor cannot see writes (a write is no outage),
    #: so it is told, and ETTR counts the running time as compute in the ratio
    #: interval : interval + write. 0 (or no interval): writes count as productive.
    checkpoint_write_s: float = Field(default=0.0, ge=0)
    checkpoint_interval_s: float | None = Field(default=None, gt=0)
    # --- carried across continue-as-new ---
    started_at: AwareDatetime | None = None
    #: the newest recoveries, launches included (numbers continue from ``totals.records``)
    failures: list[FailureRecord] = Field(default_factory=list)
    #: running totals over the records no longer in ``failures``; None in payloads from
    #: before there were totals, whose ``failures`` is then complete
    totals: FailureTotals | None = None
    attempts: list[RecoveryAttempt] = Field(default_factory=list)
    quarantine: list[QuarantineRecord] = Field(default_factory=list)
    #: checkpoint step -> resumes from it that made no progress
    failed_resumes: dict[int, int] = Field(default_factory=dict)
    #: planned moves (``move_job``), newest last; apart from failures, never in ETTR
    moves: list[MoveRecord] = Field(default_factory=list)


class RecoveryInput(StrictModel):
    job: str = Field(min_length=1)
    failure: FailureRecord
    #: hosts to quarantine (their GPUs failed)
    bad_hosts: HostList = Field(default_factory=list)
    quarantine: list[QuarantineRecord] = Field(default_factory=list)
    failed_resumes: dict[int, int] = Field(default_factory=dict)
    max_failed_resumes: int = Field(default=2, ge=1)
    #: every fleet mutation's key starts with this (supervisor id + failure number)
    key_prefix: str = Field(min_length=1)
    confirm_timeout_s: float = Field(gt=0)
    hang_after_s: float = Field(gt=0)
    poll_s: float = Field(gt=0)
    watch_mode: WatchMode = WatchMode.HEARTBEAT


class RecoveryResult(StrictModel):
    failure: FailureRecord
    new_quarantine: list[QuarantineRecord] = Field(default_factory=list)
    #: the step the job reached before it failed again (when not confirmed)
    reached_step: int | None = None


class SupervisorStatus(StrictModel):
    job: str
    state: SupervisorState
    failures: list[FailureRecord]
    step: int = 0
    total_steps: int | None = None
    #: productive time / wall time since supervision began (None before any time passed)
    ettr: float | None = None
    alert: str | None = None
    mttd_s: list[float] = Field(default_factory=list)
    mttr_s: list[float | None] = Field(default_factory=list)
    lost_steps: list[int | None] = Field(default_factory=list)
    #: over every failure ever (launches left out), not only those listed
    totals: FailureTotals = Field(default_factory=FailureTotals)
    #: older failure records folded into ``totals`` and no longer listed (launches included)
    dropped: int = Field(default=0, ge=0)
    #: planned moves, newest last (not failures: they leave ETTR alone)
    moves: list[MoveRecord] = Field(default_factory=list)

    @model_validator(mode="after")
    def _derive_totals(self) -> SupervisorStatus:
        # A status from before there were totals listed every failure: derive them.
        if "totals" not in self.model_fields_set:
            self.totals = totals_of(None, self.failures)
        return self
