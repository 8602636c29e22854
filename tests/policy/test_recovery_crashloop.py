"""Crash-loop guard: three recoveries in a row without progress halt the job."""

from __future__ import annotations

import pytest

from orchestrator.exceptions import InvalidInstance
from orchestrator.policy.training.recovery import (
    CrashLoopAction,
    RecoveryAttempt,
    crash_loop_decision,
)


def stuck(resume: int = 1000, fail_at: int = 1049) -> RecoveryAttempt:
    """Resumed from ``resume`` and died again before passing ``fail_at``."""
    return RecoveryAttempt(failed_at_step=fail_at, resumed_from_step=resume, reached_step=fail_at)


class TestCrashLoop:
    """Recoveries that only re-reach old steps count towards the limit; progress resets it."""

    def test_three_without_progress_halt(self) -> None:
        assert crash_loop_decision([stuck(), stuck()]).action is CrashLoopAction.CONTINUE
        decision = crash_loop_decision([stuck(), stuck(), stuck()])
        assert decision.action is CrashLoopAction.HALT
        assert decision.without_progress == 3
        assert "1049" in decision.reason

    def test_progress_past_high_water_resets_the_streak(self) -> None:
        progressed = RecoveryAttempt(failed_at_step=1049, resumed_from_step=1000, reached_step=1500)
        decision = crash_loop_decision([stuck(), stuck(), progressed, stuck(1000, 1400)])
        assert decision.action is CrashLoopAction.CONTINUE
        # Reaching 1400 after having been at 1500 is not progress.
        assert decision.without_progress == 1

    def test_new_checkpoint_counts_as_progress(self) -> None:
        committed = RecoveryAttempt(
            failed_at_step=1049, resumed_from_step=1000, reached_step=1049, checkpointed_step=1040
        )
        decision = crash_loop_decision([stuck(), stuck(), committed])
        assert decision.action is CrashLoopAction.CONTINUE
        assert decision.without_progress == 0

    def test_running_attempt_does_not_count_yet(self) -> None:
        running = RecoveryAttempt(failed_at_step=1049, resumed_from_step=1000)
        decision = crash_loop_decision([stuck(), stuck(), running])
        assert decision.action is CrashLoopAction.CONTINUE
        assert decision.without_progress == 2

    def test_limit_is_configurable(self) -> None:
        assert crash_loop_decision([stuck()], limit=1).action is CrashLoopAction.HALT
        with pytest.raises(InvalidInstance, match="limit"):
            crash_loop_decision([], limit=0)

    def test_inconsistent_attempt_names_the_field(self) -> None:
        bad = RecoveryAttempt(failed_at_step=10, resumed_from_step=20, reached_step=25)
        with pytest.raises(InvalidInstance, match=r"attempts\[0\]: resumed_from_step"):
            crash_loop_decision([bad])
