"""Training-job recovery policy, pure: one import for the supervisor workflow.

The pieces live in their own modules, split by concept:

- :mod:`~orchestrator.policy.checkpoints`: the newest checkpoint whose digest verifies;
- :mod:`~orchestrator.policy.placement`: healthy hosts, spares first, fewest buildings;
- :mod:`~orchestrator.policy.quarantine`: cooldowns that grow for repeat offenders;
- :mod:`~orchestrator.policy.crashloop`: halt after three recoveries without progress;
- :mod:`~orchestrator.policy.ettr`: interval advice (Young, Daly, Meta) and ETTR formulas;
- :mod:`~orchestrator.policy.ettr_sim`: discrete-event simulation of ETTR.

The models they take and return are in :mod:`~orchestrator.policy.recovery_models`.
"""

from __future__ import annotations

from orchestrator.policy.checkpoints import choose_checkpoint, verify_checkpoint
from orchestrator.policy.crashloop import (
    DEFAULT_CRASH_LOOP_LIMIT,
    crash_loop_decision,
    made_progress,
)
from orchestrator.policy.ettr import FailureModel, IntervalAdvice, advise_interval
from orchestrator.policy.placement import exclusion_reason, place_job
from orchestrator.policy.quarantine import (
    active_quarantine,
    cooldown_for,
    due_for_release,
    quarantine_host,
    quarantined_hosts,
    release,
)
from orchestrator.policy.recovery_models import (
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
    "due_for_release",
    "exclusion_reason",
    "made_progress",
    "place_job",
    "quarantine_host",
    "quarantined_hosts",
    "release",
    "verify_checkpoint",
]
