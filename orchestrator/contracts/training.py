"""The fleet contract for training: the cluster (hosts with GPU health), jobs, checkpoints.

Hosts, checkpoints, incidents and quarantine records are the recovery policy's own
models (:mod:`orchestrator.policy.training.models`), so what the fleet answers is
exactly what the policy decides on, with no translation layer to drift.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import AwareDatetime, Field

from orchestrator.models import StrictModel
from orchestrator.policy.training.models import (
    CheckpointInfo,
    Host,
    Incident,
    JobSpec,
    QuarantineRecord,
)

__all__ = [
    "JobFailure",
    "JobState",
    "QuarantineRequest",
    "ReleaseRequest",
    "StartJobRequest",
    "StopJobRequest",
    "TrainingCheckpoints",
    "TrainingCluster",
    "TrainingJob",
]


class JobState(StrEnum):
    #: defined but never started
    PENDING = "pending"
    #: a run is alive (it may still be hung: compare ``last_heartbeat`` with the clock)
    RUNNING = "running"
    #: the last run died (non-zero exit, killed with its host)
    CRASHED = "crashed"
    #: stopped through the API
    STOPPED = "stopped"
    #: reached ``total_steps``
    FINISHED = "finished"


class JobFailure(StrictModel):
    """Why the last run ended, when it said so itself (on a real fleet: the job's exit
    reason from the scheduler)."""

    #: a short name: ``disk_full``, ``checkpoints_lost``, ...
    reason: str = Field(min_length=1)
    detail: str = ""
    #: False: restarting cannot succeed until someone acts (frees space, restores files)
    retryable: bool = True
    exit_code: int | None = None


class TrainingJob(StrictModel):
    spec: JobSpec
    state: JobState
    #: steps completed by the current (or last) run
    step: int = Field(ge=0)
    total_steps: int = Field(ge=1)
    #: the step the current run started from
    resumed_from: int = Field(default=0, ge=0)
    #: the newest checkpoint the current run committed
    checkpoint_step: int | None = None
    last_heartbeat: AwareDatetime | None = None
    #: when the current (or last) run was started
    started_at: AwareDatetime | None = None
    #: when the last run ended (crash, stop or finish)
    ended_at: AwareDatetime | None = None
    hosts: list[str] = Field(default_factory=list)
    #: how many times the job has been started
    runs: int = Field(default=0, ge=0)
    #: configured heartbeat interval of the trainer, seconds
    heartbeat_s: float = Field(gt=0)
    #: configured time per step, seconds (the productive rate)
    step_s: float = Field(gt=0)
    step_ms_avg: float | None = None
    #: each host's own compute per step (ms, before waiting for its peers), where the
    #: fleet measures it per rank: how a straggler is told from a slow job. A recent
    #: figure (the lab's ranks: the median of their last 3 steps), so a slowdown shows
    host_step_ms: dict[str, float] | None = None
    #: sha256 of the parameters at the newest checkpoint (or at the end)
    params_digest: str | None = None
    #: a crashed run's own account of why, when it gave one
    failure: JobFailure | None = None


class TrainingCluster(StrictModel):
    """Everything a placement decision needs, read at one instant of the fleet's clock."""

    now: AwareDatetime
    hosts: list[Host]
    incidents: list[Incident] = Field(default_factory=list)
    quarantine: list[QuarantineRecord] = Field(default_factory=list)
    jobs: list[TrainingJob] = Field(default_factory=list)


class TrainingCheckpoints(StrictModel):
    job: str
    #: oldest first, digests computed over the data now
    checkpoints: list[CheckpointInfo]


class StopJobRequest(StrictModel):
    job: str = Field(min_length=1)
    #: checkpoint at the current step first (a planned move): the answer's
    #: ``checkpoint_step`` is the step a restart resumes from, with no step lost
    checkpoint: bool = False


class StartJobRequest(StrictModel):
    job: str = Field(min_length=1)
    hosts: list[str] = Field(min_length=1)
    #: resume from this checkpoint step; None starts from step 0
    checkpoint_step: int | None = Field(default=None, ge=0)


class QuarantineRequest(StrictModel):
    host: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    until: AwareDatetime


class ReleaseRequest(StrictModel):
    host: str = Field(min_length=1)
