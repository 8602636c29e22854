"""Training-job recovery policy, pure: one import for the supervisor workflow.

The pieces live in their own modules, split by concept:

- :mod:`~orchestrator.policy.training.checkpoints`: the newest checkpoint whose digest verifies;
- :mod:`~orchestrator.policy.training.placement`: healthy hosts, spares first, fewest buildings;
- :mod:`~orchestrator.policy.training.quarantine`: cooldowns that grow for repeat offenders;
- :mod:`~orchestrator.policy.training.crashloop`: halt after three recoveries without progress;
- :mod:`~orchestrator.policy.training.ettr`: interval advice (Young, Daly, Meta) and ETTR formulas;
- :mod:`~orchestrator.policy.training.ettr_sim`: discrete-event simulation of ETTR.

The models they take and return are in :mod:`~orchestrator.policy.training.models`.
"""

from __future__ import annotations

from orchestrator.policy.training.checkpoints import choose_checkpoint, verify_checkpoint
from orchestrator.policy.training.crashloop import (
    DEFAULT_CRASH_LOOP_LIMIT,
    crash_loop_decision,
    crash_loop_limit_for,
    made_progress,
    no_progress_chance,
)
from orchestrator.policy.training.ettr import FailureModel, IntervalAdvice, advise_interval
from orchestrator.policy.training.models import (
    CheckpointChoice,
    CheckpointInfo,
    CheckpointRejection,
    CrashLoopAction,
    CrashLoopDecision,
    Host,
    HostState,
    Incident,
    JobSpec,
    Placement,
    QuarantinePolicy,
    QuarantineRecord,
    RecoveryAttempt,
    RejectReason,
)
from orchestrator.policy.training.placement import exclusion_reason, place_job
from orchestrator.policy.training.quarantine import (
    active_quarantine,
    cooldown_for,
    due_for_release,
    quarantine_host,
    quarantined_hosts,
    release,
)

__all__ = [
    "DEFAULT_CRASH_LOOP_LIMIT",
    "CheckpointChoice",
    "CheckpointInfo",
    "CheckpointRejection",
    "CrashLoopAction",
    "CrashLoopDecision",
    "FailureModel",
    "Host",
    "HostState",
    "Incident",
    "IntervalAdvice",
    "JobSpec",
    "Placement",
    "QuarantinePolicy",
    "QuarantineRecord",
    "RecoveryAttempt",
    "RejectReason",
    "active_quarantine",
    "advise_interval",
    "choose_checkpoint",
    "cooldown_for",
    "crash_loop_decision",
    "crash_loop_limit_for",
    "due_for_release",
    "exclusion_reason",
    "made_progress",
    "no_progress_chance",
    "place_job",
    "quarantine_host",
    "quarantined_hosts",
    "release",
    "verify_checkpoint",
]
