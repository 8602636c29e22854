"""ETTR formulas and interval advice against the reference's numbers.

Reference: ../shared/reference/training-recovery.md. Rates are per 1000 node-days,
8 GPUs per node; all durations in seconds.
"""

from __future__ import annotations

import math

import pytest

from orchestrator.exceptions import InvalidInstance
from orchestrator.policy.training.ettr import (
    FailureModel,
    advise_interval,
    best_exponential_interval,
    daly_interval,
    exponential_ettr,
    meta_ettr,
    meta_optimal_interval,
    rate_from_interruptions,
    young_interval,
)

MIN = 60.0
RSC1 = FailureModel(gpus=16_384, failures_per_1000_node_days=6.5)


class TestUnits:
    """Rates are per node (8 GPUs) per 1000 days; MTTF matches the paper's projections."""

    def test_job_mttf_matches_paper(self) -> None:
        assert RSC1.nodes == 2048
        assert RSC1.mtbf_s / 3600 == pytest.approx(1.8, abs=0.01)
        at_131k = FailureModel(gpus=131_072, failures_per_1000_node_days=6.5)
        assert at_131k.mtbf_s / 3600 == pytest.approx(0.23, abs=0.01)

    def test_llama3_rate(self) -> None:
        rate = rate_from_interruptions(419, gpus=16_384, days=54)
        assert rate == pytest.approx(3.79, abs=0.01)
        llama = FailureModel(gpus=16_384, failures_per_1000_node_days=rate)
        assert llama.mtbf_s / 3600 == pytest.approx(3.1, abs=0.05)

    def test_partial_node_counts_as_a_node(self) -> None:
        assert FailureModel(gpus=9, failures_per_1000_node_days=1).nodes == 2


class TestMetaModel:
    """Meta's E[ETTR] reproduces the paper: 16k GPUs on RSC-1 with u0 = 5 min.

    The checkpoint cost used is w = 1 s (the paper's runs checkpoint asynchronously;
    the linear model gives 0.676 at 60 min, which the paper rounds to 0.70, and 0.93 at 5 min).
    """

    def test_sixty_and_five_minute_intervals(self) -> None:
        rate = RSC1.rate_per_s
        at_60 = meta_ettr(60 * MIN, 1.0, 5 * MIN, rate)
        at_5 = meta_ettr(5 * MIN, 1.0, 5 * MIN, rate)
        assert at_60 == pytest.approx(0.676, abs=0.002)
        assert at_60 == pytest.approx(0.70, abs=0.03)
        assert at_5 == pytest.approx(0.93, abs=0.005)

    def test_reference_goal_table(self) -> None:
        """The "reachable ETTR at the Young optimum" table, row by row."""
        llama = rate_from_interruptions(419, 16_384, 54)
        fleets = [(16_384, llama), (16_384, 6.5), (100_000, 2.34)]
        rows = {
            (20 * MIN, 5 * MIN): [0.70, 0.58, 0.30],
            (5 * MIN, 10.0): [0.93, 0.90, 0.82],
            (2 * MIN, 1.0): [0.98, 0.96, 0.93],
        }
        for (u0, w), expected in rows.items():
            for (gpus, rf), want in zip(fleets, expected, strict=True):
                rate = FailureModel(gpus=gpus, failures_per_1000_node_days=rf).rate_per_s
                best = meta_optimal_interval(w, rate)
                assert meta_ettr(best, w, u0, rate) == pytest.approx(want, abs=0.006), (u0, w, gpus)

    def test_100k_rsc2_needs_two_minute_interval_and_restart_for_0_9(self) -> None:
        rate = FailureModel(gpus=100_000, failures_per_1000_node_days=2.34).rate_per_s
        for w in (1.0, 5.0):
            assert meta_ettr(2 * MIN, w, 2 * MIN, rate) >= 0.9
            assert meta_ettr(2 * MIN, w, 5 * MIN, rate) < 0.9
            assert meta_ettr(10 * MIN, w, 2 * MIN, rate) < 0.9

    def test_linear_model_floors_at_zero(self) -> None:
        assert meta_ettr(3600, 300, 3600, 1e-3) == 0.0


class TestIntervals:
    """Young, Daly eq. 37 and the exponential model's optimum agree where they should."""

    def test_young_and_meta_optimum_are_the_same(self) -> None:
        rate = RSC1.rate_per_s
        assert meta_optimal_interval(10, rate) == pytest.approx(young_interval(10, 1 / rate))
        assert young_interval(10, 6490.0) == pytest.approx(math.sqrt(2 * 10 * 6490))

    def test_daly_is_the_exact_optimum_and_below_young(self) -> None:
        for w, mtbf in [(10.0, 6490.0), (300.0, 6490.0), (60.0, 811.0)]:
            daly = daly_interval(w, mtbf)
            exact = best_exponential_interval(w, 300.0, 1 / mtbf)
            assert daly < young_interval(w, mtbf)
            assert daly == pytest.approx(exact, rel=0.01)

    def test_daly_when_checkpoint_exceeds_twice_mtbf(self) -> None:
        assert daly_interval(500.0, 200.0) == 200.0

    def test_exponential_model_limits(self) -> None:
        # No failures: only the checkpoint cost is lost.
        assert exponential_ettr(100, 10, 300, 0.0) == pytest.approx(100 / 110)
        # Tiny rate: the exponential and linear models agree to first order.
        small = 1e-7
        assert exponential_ettr(600, 10, 300, small) == pytest.approx(
            meta_ettr(600, 10, 300, small), rel=1e-4
        )

    def test_bad_inputs_name_the_field(self) -> None:
        with pytest.raises(InvalidInstance, match="cost_s"):
            young_interval(0, 100)
        with pytest.raises(InvalidInstance, match="interval_s"):
            meta_ettr(-1, 1, 1, 1e-5)
        with pytest.raises(InvalidInstance, match="interruptions"):
            rate_from_interruptions(-1, 8, 1)


class TestAdvice:
    """advise_interval reports every optimum and flags where the linear model breaks."""

    def test_advice_at_16k_rsc1(self) -> None:
        advice = advise_interval(RSC1, interval_s=60 * MIN, cost_s=10, restart_s=5 * MIN)
        assert advice.young_s == pytest.approx(advice.meta_s)
        assert advice.daly_s < advice.young_s
        assert advice.exponential_ettr_at_best > advice.exponential_ettr
        # λ(u0+Δt) ≈ 0.6 at 60-minute checkpoints: the linear model is not trusted there...
        assert advice.linearity == pytest.approx(RSC1.rate_per_s * 65 * MIN)
        assert not advice.meta_model_holds
        # ...but at the optimum (about 6 min) it is.
        near = advise_interval(RSC1, interval_s=advice.meta_s, cost_s=10, restart_s=5 * MIN)
        assert near.meta_model_holds

    def test_advice_needs_failures(self) -> None:
        with pytest.raises(InvalidInstance, match="failures_per_1000_node_days"):
            advise_interval(
                FailureModel(gpus=8, failures_per_1000_node_days=0),
                interval_s=60,
                cost_s=1,
                restart_s=1,
            )
