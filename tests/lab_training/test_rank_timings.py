"""Per-rank step timings into the straggler detector: quick on a slow host, deaf to jitter.

Each rank reports the median of its last three own step times after every step
(ranks.py); the detector flags a host at 3x its peers' median (training_detect.py).
These tests run both on step sequences, step by step, as the lab would read them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.activities.training_detect import STRAGGLER_RATIO, classify
from orchestrator.contracts.training import JobState, TrainingCluster, TrainingJob
from orchestrator.contracts.training_supervisor import FailureKind
from orchestrator.lab.training.torchjob.ranks import (
    WINDOW_STEPS,
    RankTiming,
    StepWindow,
    read_host_step_ms,
    write_rank_timing,
)
from orchestrator.policy.training.models import Host, HostState, JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HOSTS = [f"a-h{i:02d}" for i in range(8)]
BASE_S = 0.1

#: own seconds of ``host`` at ``step``
Steps = Callable[[str, int], float]


def classify_timings(timings: dict[str, float]) -> tuple[FailureKind, list[str], str] | None:
    job = TrainingJob(
        spec=JobSpec(name="j", hosts=len(HOSTS), gpus_per_host=8, region="r"),
        state=JobState.RUNNING,
        step=10,
        total_steps=1000,
        hosts=HOSTS,
        runs=1,
        heartbeat_s=2.0,
        step_s=BASE_S,
        last_heartbeat=NOW - timedelta(seconds=0.5),
        host_step_ms=timings or None,
    )
    hosts = [
        Host(name=h, region="r", building="a", gpus=8, state=HostState.ALLOCATED, job="j")
        for h in HOSTS
    ]
    found = classify(TrainingCluster(now=NOW, hosts=hosts, jobs=[job]), job, 3.0)
    return None if found is None else (found[0], found[2], found[3])


def first_flagged(own_s: Steps, steps: int) -> tuple[int, list[str]] | None:
    """Feed every host's steps through its window; the first step the detector flags."""
    windows = {h: StepWindow() for h in HOSTS}
    for step in range(steps):
        for host, window in windows.items():
            window.add(own_s(host, step))
        timings = {h: ms for h, w in windows.items() if (ms := w.own_ms()) is not None}
        found = classify_timings(timings)
        if found is not None:
            assert found[0] is FailureKind.STRAGGLER
            return step, found[1]
    return None


def jittery(seed: int, low: float, high: float) -> Steps:
    """Every step stretched by a factor in [low, high), drawn per host and step."""
    rng = random.Random(seed)
    draws = {(h, s): rng.uniform(low, high) for h in HOSTS for s in range(400)}
    return lambda host, step: BASE_S * draws[host, step]


class TestStepWindow:
    def test_no_figure_until_the_window_is_full(self) -> None:
        window = StepWindow()
        for _ in range(WINDOW_STEPS - 1):
            window.add(0.1)
            assert window.own_ms() is None
        window.add(0.1)
        assert window.own_ms() == pytest.approx(100.0)

    def test_one_stretched_step_does_not_move_the_figure(self) -> None:
        window = StepWindow()
        for seconds in (0.1, 5.0, 0.1):
            window.add(seconds)
        assert window.own_ms() == pytest.approx(100.0)

    def test_the_figure_follows_the_last_steps_only(self) -> None:
        window = StepWindow()
        for seconds in (0.1, 0.1, 0.1, 0.4, 0.4):
            window.add(seconds)
        assert window.own_ms() == pytest.approx(400.0)


class TestNormalJobIsNotFlagged:
    @pytest.mark.parametrize("seed", range(5))
    def test_steps_jittering_between_0_5x_and_1_5x_for_400_steps(self, seed: int) -> None:
        assert first_flagged(jittery(seed, 0.5, 1.5), 400) is None

    def test_isolated_10x_spikes_on_every_host(self) -> None:
        """A host descheduled for a whole step now and then (one step in three at most)."""
        base = jittery(11, 0.8, 1.2)

        def own(host: str, step: int) -> float:
            spiking = (step + HOSTS.index(host)) % WINDOW_STEPS == 0
            return base(host, step) * (10 if spiking else 1)

        assert first_flagged(own, 400) is None

    def test_the_whole_job_slowing_together_is_no_straggler(self) -> None:
        """A loaded machine slows every rank alike: no one host stands out."""
        base = jittery(3, 0.9, 1.1)
        assert first_flagged(lambda h, s: base(h, s) * (5 if s >= 50 else 1), 200) is None


class TestSlowHostIsFlaggedAtItsSecondSlowStep:
    @pytest.mark.parametrize("factor", [STRAGGLER_RATIO, 4.0])
    def test_a_host_turning_slow_mid_run(self, factor: float) -> None:
        fault_at = 40

        def own(host: str, step: int) -> float:
            slow = host == HOSTS[-1] and step >= fault_at
            return BASE_S * (factor if slow else 1.0)

        assert first_flagged(own, 200) == (fault_at + 1, [HOSTS[-1]])

    def test_a_4x_host_among_jittery_peers(self) -> None:
        fault_at = 40
        base = jittery(5, 0.8, 1.2)

        def own(host: str, step: int) -> float:
            slow = host == HOSTS[-1] and step >= fault_at
            return base(host, step) * (4.0 if slow else 1.0)

        assert first_flagged(own, 200) == (fault_at + 1, [HOSTS[-1]])


class TestTimingFiles:
    def test_the_lab_reads_fresh_figures_of_the_jobs_own_hosts(self, tmp_path: Path) -> None:
        now = datetime.now(UTC).timestamp()
        write_rank_timing(tmp_path, RankTiming(rank=0, host="h0", step=9, own_ms=101, time=now))
        write_rank_timing(tmp_path, RankTiming(rank=1, host="h1", step=9, own_ms=400, time=now))
        # a report older than the freshness bound, and one from another placement
        write_rank_timing(tmp_path, RankTiming(rank=2, host="h2", step=9, own_ms=99, time=now - 9))
        write_rank_timing(tmp_path, RankTiming(rank=3, host="zz", step=9, own_ms=99, time=now))
        got = read_host_step_ms(tmp_path, ("h0", "h1", "h2", "h3"), fresh_s=6.0)
        assert got == {"h0": 101, "h1": 400}
