"""Crash-loop guard: recoveries in a row without progress halt the job; the limit is sized to the failure rate."""

from __future__ import annotations

import random

import pytest

from orchestrator.exceptions import InvalidInstance
from orchestrator.policy.training.crashloop import trim_attempts
from orchestrator.policy.training.recovery import (
    CrashLoopAction,
    RecoveryAttempt,
    crash_loop_decision,
    crash_loop_limit_for,
    no_progress_chance,
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


def healthy_job_halts(
    *, mtbf: float, interval: float, restart: float, failures: int, limit: int, jobs: int, seed: int
) -> int:
    """How many of ``jobs`` healthy jobs (independent Poisson failures, steps = seconds of
    work, a checkpoint every ``interval``) the guard halts within ``failures`` failures."""
    rng = random.Random(seed)
    halted = 0
    for _ in range(jobs):
        pos = int(rng.expovariate(1 / mtbf))
        attempts: list[RecoveryAttempt] = []
        for _ in range(failures):
            ckpt = pos // int(interval) * int(interval)
            work = max(0, int(rng.expovariate(1 / mtbf) - restart))
            reached = ckpt + work
            committed = reached // int(interval) * int(interval)
            attempts.append(
                RecoveryAttempt(
                    failed_at_step=pos,
                    resumed_from_step=ckpt,
                    reached_step=reached,
                    checkpointed_step=committed if committed > ckpt else None,
                )
            )
            attempts = trim_attempts(attempts, keep=limit + 2)
            if crash_loop_decision(attempts, limit=limit).action is CrashLoopAction.HALT:
                halted += 1
                break
            pos = max(pos, reached)
    return halted


class TestLimitForTheFailureRate:
    """The limit grows with the chance that independent failures alone make no progress."""

    def test_2048_hosts_over_54_days(self) -> None:
        # Llama 3's rate: a failure every ~3.1 h; Δt 30 min; restart + detection 6 min
        expected = dict(mtbf_s=11_135, interval_s=1800, restart_s=360)
        limit = crash_loop_limit_for(**expected, failures=430)
        assert 430 * no_progress_chance(**expected, k=limit) <= 0.01
        assert 430 * no_progress_chance(**expected, k=limit - 1) > 0.01
        assert limit == 6

    def test_65k_gpus_need_a_longer_streak_and_a_shorter_interval_helps(self) -> None:
        # one failure every 46 min: most restarts die before passing the lost work
        at_30_min = crash_loop_limit_for(mtbf_s=2784, interval_s=1800, restart_s=360, failures=225)
        at_7_min = crash_loop_limit_for(mtbf_s=2784, interval_s=420, restart_s=360, failures=225)
        assert (at_30_min, at_7_min) == (13, 7)

    def test_never_below_the_floor(self) -> None:
        assert crash_loop_limit_for(mtbf_s=1e9, interval_s=60, restart_s=60, failures=3) == 3
        assert crash_loop_limit_for(mtbf_s=1e3, interval_s=60, restart_s=60, failures=0) == 3

    def test_bad_input_names_the_field(self) -> None:
        with pytest.raises(InvalidInstance, match="mtbf_s"):
            crash_loop_limit_for(mtbf_s=0, interval_s=60, restart_s=60, failures=3)
        with pytest.raises(InvalidInstance, match="false_halt"):
            crash_loop_limit_for(
                mtbf_s=100, interval_s=60, restart_s=60, failures=3, false_halt=1.0
            )
        with pytest.raises(InvalidInstance, match="mtbf_s 1 is too short"):
            crash_loop_limit_for(mtbf_s=1, interval_s=1e6, restart_s=60, failures=3)

    @pytest.mark.parametrize(
        ("mtbf", "interval"),
        [(11_135, 1800), (2784, 1800), (2784, 420), (1200, 300), (40_000, 3600)],
    )
    def test_chance_alone_rarely_reaches_the_limit(self, mtbf: float, interval: float) -> None:
        """Simulated healthy jobs hit the sized limit about as rarely as promised (1%), and
        the fixed limit of 3 halts them far more often wherever the sizing raised it."""
        restart, failures, jobs = 360.0, 100, 200
        limit = crash_loop_limit_for(
            mtbf_s=mtbf, interval_s=interval, restart_s=restart, failures=failures
        )
        sim = dict(mtbf=mtbf, interval=interval, restart=restart, failures=failures, jobs=jobs)
        assert healthy_job_halts(**sim, limit=limit, seed=7) <= jobs * 0.02
        if limit > 3:
            assert healthy_job_halts(**sim, limit=3, seed=7) > jobs * 0.01
