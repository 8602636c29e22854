"""Crash-loop guard: three recoveries in a row without progress halt the job.

A job that keeps dying at the same place (a bad data shard, a corrupt optimizer
state, a lemon host that passes health checks) would otherwise be restarted
forever: one 1024-GPU job on RSC was requeued 35 times. NVRx exits after three
cycles without progress; we do the same and alert a human instead.

Progress means the attempt either committed a checkpoint newer than the one it
resumed from, or trained past the highest step any earlier run of the job had
reached. Re-reaching the same step after each restart is not progress.

At scale independent failures alone make streaks without progress: a job that fails
every 46 minutes (65,536 GPUs at Llama 3's rate) with a 30-minute checkpoint interval
loses about half its restarts before the next checkpoint, so three in a row are routine.
:func:`crash_loop_limit_for` sizes the limit from the job's failure rate so that chance
alone halts a healthy job rarely.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchestrator.exceptions import InvalidInstance
from orchestrator.policy.training.models import CrashLoopAction, CrashLoopDecision, RecoveryAttempt

__all__ = [
    "DEFAULT_CRASH_LOOP_LIMIT",
    "crash_loop_decision",
    "crash_loop_limit_for",
    "made_progress",
    "no_progress_chance",
    "trim_attempts",
]

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


def no_progress_chance(*, mtbf_s: float, interval_s: float, restart_s: float, k: int = 1) -> float:
    """The chance that ``k`` restarts in a row make no progress, failures being independent.

    A run resumed from the checkpoint makes progress once it passes the step the failed
    run had reached: after ``restart_s`` plus the work lost, tau, which lies between 0 and
    the checkpoint interval. A failure (Poisson, rate 1/``mtbf_s``) beats it with
    probability p(tau) = 1 - exp(-(restart + tau) / MTBF); k restarts in a row share the
    same tau, so the chance is the mean of p(tau)**k over tau uniform in [0, interval].
    """
    for name, value in (("mtbf_s", mtbf_s), ("interval_s", interval_s)):
        if value <= 0:
            raise InvalidInstance(f"{name} must be positive, got {value}")
    if restart_s < 0:
        raise InvalidInstance(f"restart_s must not be negative, got {restart_s}")
    if k < 1:
        raise InvalidInstance(f"k must be at least 1, got {k}")
    points = 256
    total = 0.0
    for i in range(points):
        tau = (i + 0.5) * interval_s / points
        total += (-math.expm1(-(restart_s + tau) / mtbf_s)) ** k
    return total / points


def crash_loop_limit_for(
    *,
    mtbf_s: float,
    interval_s: float,
    restart_s: float,
    failures: float,
    false_halt: float = 0.01,
    floor: int = DEFAULT_CRASH_LOOP_LIMIT,
    ceiling: int = 64,
) -> int:
    """The smallest limit (at least ``floor``) at which chance alone halts a healthy job
    with probability at most about ``false_halt`` over ``failures`` failures.

    Any failure can start a streak, so the expected false halts are about ``failures``
    times the chance of ``limit`` restarts in a row without progress.
    """
    if not 0 < false_halt < 1:
        raise InvalidInstance(f"false_halt must be in (0, 1), got {false_halt}")
    if failures < 0:
        raise InvalidInstance(f"failures must not be negative, got {failures}")
    if floor < 1:
        raise InvalidInstance(f"floor must be at least 1, got {floor}")
    for limit in range(floor, ceiling + 1):
        chance = no_progress_chance(
            mtbf_s=mtbf_s, interval_s=interval_s, restart_s=restart_s, k=limit
        )
        if failures * chance <= false_halt:
            return limit
    raise InvalidInstance(
        f"mtbf_s {mtbf_s} is too short for interval_s {interval_s} and restart_s "
        f"{restart_s}: even {ceiling} restarts in a row without progress are likely by "
        "chance, so no limit tells a crash loop from bad luck; shorten the interval"
    )
