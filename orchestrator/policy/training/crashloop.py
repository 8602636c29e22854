"""Crash-loop guard: three recoveries in a row without progress halt the job.

A job that keeps dying at the same place (a bad data shard, a corrupt optimizer
state, a lemon host that passes health checks) would otherwise be restarted
forever: one 1024-GPU job on RSC was requeued 35 times. NVRx exits after three
cycles without progress; we do the same and alert a human instead.

Progress means the attempt either committed a checkpoint newer than the one it
resumed from, or trained past the highest step any earlier run of the job had
reached. Re-reaching the same step after each restart is not progress.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.exceptions import InvalidInstance
from orchestrator.policy.training.models import CrashLoopAction, CrashLoopDecision, RecoveryAttempt

__all__ = ["DEFAULT_CRASH_LOOP_LIMIT", "crash_loop_decision", "made_progress", "trim_attempts"]

DEFAULT_CRASH_LOOP_LIMIT = 3


def made_progress(attempt: RecoveryAttempt, high_water: int) -> bool | None:
    """Whether ``attempt`` progressed past ``high_water``; None while it is undecided."""
    if attempt.checkpointed_step is not None and (
        attempt.checkpointed_step > attempt.resumed_from_step
    ):
        return True
    if attempt.reached_step is None:
        return None
    return attempt.reached_step > high_water


def crash_loop_decision(
    attempts: Sequence[RecoveryAttempt], *, limit: int = DEFAULT_CRASH_LOOP_LIMIT
) -> CrashLoopDecision:
    """Continue recovering, or halt: ``attempts`` is the job's recoveries, oldest first."""
    if limit < 1:
        raise InvalidInstance(f"limit must be at least 1, got {limit}")
    high_water = 0
    streak = 0
    for i, a in enumerate(attempts):
        if a.resumed_from_step > a.failed_at_step:
            raise InvalidInstance(
                f"attempts[{i}]: resumed_from_step {a.resumed_from_step} is after "
                f"failed_at_step {a.failed_at_step}"
            )
        if a.reached_step is not None and a.reached_step < a.resumed_from_step:
            raise InvalidInstance(
                f"attempts[{i}]: reached_step {a.reached_step} is before "
                f"resumed_from_step {a.resumed_from_step}"
            )
        high_water = max(high_water, a.failed_at_step)
        progressed = made_progress(a, high_water)
        if progressed is None:
            # Still running: it has not failed, so it cannot extend the streak yet.
            continue
        streak = 0 if progressed else streak + 1
        if a.reached_step is not None:
            high_water = max(high_water, a.reached_step)
    if streak >= limit:
        return CrashLoopDecision(
            action=CrashLoopAction.HALT,
            without_progress=streak,
            reason=f"{streak} recoveries in a row made no progress past step {high_water}; "
            "halting and alerting instead of restarting again",
        )
    return CrashLoopDecision(
        action=CrashLoopAction.CONTINUE,
        without_progress=streak,
        reason=f"{streak} of {limit} recoveries without progress",
    )


def trim_attempts(attempts: Sequence[RecoveryAttempt], keep: int) -> list[RecoveryAttempt]:
    """At most about ``keep`` attempts that decide exactly as ``attempts`` do, now and later.

    The decision depends on the high-water step and the trailing streak without progress,
    so the cut goes just after a decided attempt that progressed (the streak restarts
    there), and one synthetic attempt in front carries the dropped high-water step.
    """
    if len(attempts) <= keep:
        return list(attempts)
    high_water, cut = 0, None
    for i, a in enumerate(attempts):
        high_water = max(high_water, a.failed_at_step)
        if i >= len(attempts) - keep and made_progress(a, high_water) is True:
            cut = i
            break
        if a.reached_step is not None:
            high_water = max(high_water, a.reached_step)
    if cut is None or high_water == 0:
        return list(attempts)
    # A fresh attempt that checkpointed progress: resets the streak, sets the high water.
    marker = RecoveryAttempt(
        failed_at_step=high_water,
        resumed_from_step=0,
        reached_step=high_water,
        checkpointed_step=high_water,
    )
    return [marker, *attempts[cut:]]
