"""Kraken step policies (adaptive and fixed baseline), capacity estimate and theoretical capacity."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial

import pytest
from pydantic import ValidationError

from orchestrator.exceptions import InvalidInstance
from orchestrator.models import HealthReport, Pop, Region, RegionHealth, Service, Topology
from orchestrator.policy.health_metrics import Band, default_lab_metrics, evaluate_health
from orchestrator.policy.loadtest.kraken import (
    FixedPolicyConfig,
    StepAction,
    StepPolicyConfig,
    StepRecord,
    capacity_ratio,
    estimate_capacity,
    kraken_fixed_step,
    next_step,
    theoretical_capacity,
)
from orchestrator.policy.loadtest.sim import Policy

REF = 1000.0
METRICS = default_lab_metrics("east", p99_slo_ms=100)
NOW = datetime(2024, 5, 1, tzinfo=UTC)


def _step(
    load: float,
    *,
    p99: float | None = 40.0,
    err: float | None = 0.0005,
    util: float | None = None,
    samples: int = 10_000,
) -> StepRecord:
    """A step whose window reports the given values; utilization defaults to load / REF."""
    values = {
        "p99_ms": p99,
        "error_rate": err,
        "utilization": load / REF if util is None else util,
    }
    report = HealthReport(
        window_s=240,
        observed_at=NOW,
        regions=[RegionHealth(region="east", samples=samples, **values)],
    )
    return StepRecord(load=load, readings=evaluate_health(METRICS, report).readings)


def _dark(load: float) -> StepRecord:
    report = HealthReport(window_s=240, observed_at=NOW)
    return StepRecord(load=load, readings=evaluate_health(METRICS, report).readings)


CONFIG = StepPolicyConfig(reference_load=REF)
#: straight trends believed (as the lab's settings do)
TRUSTING = StepPolicyConfig(reference_load=REF, trust=0.9)


class TestAdaptiveSteps:
    """Far from every threshold the step is large; it shrinks as a threshold nears."""

    def test_far_from_thresholds_takes_the_bold_step(self) -> None:
        decision = next_step([_step(300)], CONFIG)
        assert decision.action is StepAction.INCREASE
        assert decision.band is Band.BOLD
        assert decision.load == pytest.approx(300 + CONFIG.bold_step * REF)

    def test_near_a_threshold_the_step_is_small_while_the_trend_bends(self) -> None:
        # Utilization bends upwards (0.60, 0.72, 0.83 at 600, 700, 790): the trends
        # disagree, so the CAUTIOUS band's cap holds.
        history = [_step(600, util=0.6), _step(700, util=0.72), _step(790, util=0.83)]
        assert history[-1].band is Band.CAUTIOUS
        decision = next_step(history, CONFIG)
        assert decision.action is StepAction.INCREASE
        step = decision.load - 790
        assert 0 < step <= CONFIG.cautious_step * REF
        assert decision.metric == "east:utilization"

    def test_a_straight_trend_lands_just_below_its_crossing(self) -> None:
        # Utilization is load / REF: every trend agrees on 900, so the step goes past the
        # CAUTIOUS cap to ``landing`` below the crossing, in one window instead of several.
        history = [_step(600), _step(700), _step(790)]
        decision = next_step(history, TRUSTING)
        assert decision.action is StepAction.INCREASE
        assert decision.predicted_limit == pytest.approx(900)
        assert decision.load == pytest.approx(900 - TRUSTING.landing * REF)
        assert decision.load - 790 > TRUSTING.cautious_step * REF

    def test_without_trust_the_band_cap_holds_on_a_straight_trend(self) -> None:
        history = [_step(600), _step(700), _step(790)]
        decision = next_step(history, CONFIG)
        assert decision.action is StepAction.INCREASE
        assert decision.predicted_limit == pytest.approx(900)
        assert 0 < decision.load - 790 <= CONFIG.cautious_step * REF

    def test_another_metric_near_its_threshold_caps_a_trusted_step(self) -> None:
        # Utilization is straight, but p99 is MODERATE (60-80 ms of a 100 ms SLO) and may
        # bend: its band's cap bounds the step however straight utilization is.
        history = [_step(400, p99=62.0), _step(500, p99=64.0)]
        decision = next_step(history, TRUSTING)
        assert decision.action is StepAction.INCREASE
        assert decision.load - 500 <= TRUSTING.moderate_step * REF + 1e-9

    def test_step_aims_below_the_extrapolated_crossing(self) -> None:
        # p99 bends upwards; the parabola through the steps predicts the SLO crossing.
        history = [_step(500, p99=42), _step(600, p99=48), _step(700, p99=62)]
        decision = next_step(history, CONFIG)
        assert decision.predicted_limit is not None
        assert decision.metric == "east:p99_ms"
        assert 700 < decision.load < decision.predicted_limit

    def test_steps_shrink_monotonically_on_a_linear_metric(self) -> None:
        history = [_step(400)]
        sizes = []
        for _ in range(10):
            decision = next_step(history, CONFIG)
            if decision.terminal:
                break
            sizes.append(decision.load - history[-1].load)
            history.append(_step(decision.load))
        assert len(sizes) >= 2
        assert sizes == sorted(sizes, reverse=True)
        assert history[-1].load < 900

    def test_converges_below_the_threshold_and_stops(self) -> None:
        history = [_step(800), _step(850), _step(885)]
        decision = next_step(history, CONFIG)
        assert decision.action is StepAction.STOP
        assert decision.load == 885
        assert "converged" in decision.reason
        assert decision.predicted_limit == pytest.approx(900)

    def test_bracket_finish_steps_onto_the_crossing(self) -> None:
        config = StepPolicyConfig(reference_load=REF, finish="bracket")
        decision = next_step([_step(800), _step(850), _step(885)], config)
        assert decision.action is StepAction.INCREASE
        assert decision.load == pytest.approx(900)

    def test_min_step_floors_tiny_steps(self) -> None:
        config = StepPolicyConfig(reference_load=REF, finish="bracket", min_step=0.03)
        decision = next_step([_step(800), _step(850), _step(895)], config)
        assert decision.load == pytest.approx(895 + 30)


class TestUnhealthySteps:
    """NOMORE stops the test at the last healthy load; BACKOFF retreats at once."""

    @pytest.mark.parametrize(
        "policy",
        [partial(next_step, config=CONFIG), partial(kraken_fixed_step, config=FixedPolicyConfig(reference_load=REF))],
        ids=["adaptive", "fixed"],
    )  # fmt: skip
    def test_nomore_stops_at_last_healthy_load(self, policy: Policy) -> None:
        history = [_step(500), _step(700), _step(820, p99=105)]
        decision = policy(history)
        assert decision.action is StepAction.STOP
        assert decision.terminal
        assert decision.load == 700
        assert decision.band is Band.NOMORE
        assert decision.metric == "east:p99_ms"

    @pytest.mark.parametrize(
        "policy",
        [partial(next_step, config=CONFIG), partial(kraken_fixed_step, config=FixedPolicyConfig(reference_load=REF))],
        ids=["adaptive", "fixed"],
    )  # fmt: skip
    def test_backoff_retreats_to_last_healthy_load(self, policy: Policy) -> None:
        history = [_step(500), _step(700), _step(820, err=0.05)]
        decision = policy(history)
        assert decision.action is StepAction.RETREAT
        assert decision.load == 700
        assert decision.metric == "east:error_rate"

    def test_backoff_without_any_healthy_step_retreats_to_baseline(self) -> None:
        config = StepPolicyConfig(reference_load=REF, baseline_load=250)
        decision = next_step([_step(500, p99=500)], config)
        assert decision.action is StepAction.RETREAT
        assert decision.load == 250

    def test_missing_data_retreats(self) -> None:
        decision = next_step([_step(500), _dark(650)], CONFIG)
        assert decision.action is StepAction.RETREAT
        assert decision.load == 500
        assert "missing" in decision.reason

    def test_too_few_samples_retreats(self) -> None:
        metrics = default_lab_metrics("east", expected_sample_rate=100, window_s=240)
        report = HealthReport(
            window_s=240,
            observed_at=NOW,
            regions=[RegionHealth(region="east", samples=50, p99_ms=40, error_rate=0, utilization=0.5)],
        )  # fmt: skip
        step = StepRecord(load=500, readings=evaluate_health(metrics, report).readings)
        assert next_step([_step(400), step], CONFIG).action is StepAction.RETREAT


class TestHoldAndBounds:
    """A two-band jump is confirmed for one window; max_load caps and then ends the test."""

    def test_band_jump_holds_once(self) -> None:
        config = StepPolicyConfig(reference_load=REF, confirm_jumps=True)
        history = [_step(400), _step(650, p99=85)]
        first = next_step(history, config)
        assert first.action is StepAction.HOLD
        assert first.load == 650
        history.append(_step(650, p99=84))
        assert next_step(history, config).action is StepAction.INCREASE

    def test_jumps_are_not_held_by_default(self) -> None:
        assert next_step([_step(400), _step(650, p99=85)], CONFIG).action is StepAction.INCREASE

    def test_max_load_caps_the_step(self) -> None:
        config = StepPolicyConfig(reference_load=REF, max_load=450)
        decision = next_step([_step(300)], config)
        assert decision.action is StepAction.INCREASE
        assert decision.load == 450

    def test_healthy_at_max_load_stops(self) -> None:
        config = StepPolicyConfig(reference_load=REF, max_load=450)
        decision = next_step([_step(300), _step(450)], config)
        assert decision.action is StepAction.STOP
        assert decision.load == 450
        assert "max_load" in decision.reason

    def test_empty_history_is_refused(self) -> None:
        with pytest.raises(InvalidInstance, match="history"):
            next_step([], CONFIG)

    def test_step_sizes_must_be_ordered(self) -> None:
        with pytest.raises(ValidationError) as info:
            StepPolicyConfig(reference_load=REF, min_step=0.2)
        assert "min_step" in str(info.value) and "cautious_step" in str(info.value)

    def test_reference_load_must_be_positive(self) -> None:
        with pytest.raises(ValidationError, match="reference_load"):
            StepPolicyConfig(reference_load=0)


class TestFixedBaseline:
    """Kraken's policy: 15% steps, 1% once any metric is within 10% of its threshold."""

    config = FixedPolicyConfig(reference_load=REF)

    def test_big_step_far_from_thresholds(self) -> None:
        decision = kraken_fixed_step([_step(400)], self.config)
        assert decision.action is StepAction.INCREASE
        assert decision.load == pytest.approx(550)

    def test_small_step_within_ten_percent(self) -> None:
        # utilization 0.82 is within 10% of 0.9 even though p99 is far from its SLO.
        decision = kraken_fixed_step([_step(820)], self.config)
        assert decision.load == pytest.approx(830)
        assert decision.metric == "east:utilization"

    def test_just_outside_ten_percent_is_still_big(self) -> None:
        decision = kraken_fixed_step([_step(800, util=0.80)], self.config)
        assert decision.load == pytest.approx(950)

    def test_fixed_policy_is_capped(self) -> None:
        config = FixedPolicyConfig(reference_load=REF, max_load=500)
        assert kraken_fixed_step([_step(400)], config).load == 500


class TestCapacityEstimate:
    """The crossing is interpolated inside its bracket and the bottleneck metric named."""

    def test_interpolates_between_last_healthy_and_first_unhealthy(self) -> None:
        estimate = estimate_capacity([_step(600), _step(800), _step(920)])
        assert estimate.method == "interpolated"
        assert estimate.load == pytest.approx(900)
        assert estimate.bottleneck == "east:utilization"
        assert estimate.bottleneck_key == "utilization"
        assert (estimate.last_healthy_load, estimate.first_unhealthy_load) == (800, 920)

    def test_names_the_metric_that_crosses_first(self) -> None:
        history = [_step(600, p99=50), _step(800, p99=90), _step(880, p99=140)]
        estimate = estimate_capacity(history)
        assert estimate.bottleneck == "east:p99_ms"
        assert 800 < estimate.load < 880
        assert estimate.per_metric["east:p99_ms"] == estimate.load
        per_util = estimate.per_metric["east:utilization"]
        assert per_util is not None and per_util > estimate.load

    def test_extrapolates_just_past_the_last_step(self) -> None:
        estimate = estimate_capacity([_step(800), _step(850), _step(885)])
        assert estimate.method == "extrapolated"
        assert estimate.load == pytest.approx(900)

    def test_far_extrapolation_is_only_a_lower_bound(self) -> None:
        estimate = estimate_capacity([_step(300), _step(400)])
        assert estimate.method == "lower_bound"
        assert estimate.load == 400

    def test_metric_going_dark_gives_a_lower_bound_naming_it(self) -> None:
        estimate = estimate_capacity([_step(500), _step(700), _dark(850)])
        assert estimate.method == "lower_bound"
        assert estimate.load == 700
        assert estimate.bottleneck is not None
        assert estimate.first_unhealthy_load == 850

    def test_windows_at_one_load_are_averaged(self) -> None:
        history = [_step(800, util=0.78), _step(800, util=0.82), _step(1000, util=1.0)]
        assert estimate_capacity(history).load == pytest.approx(900)

    def test_empty_history_is_refused(self) -> None:
        with pytest.raises(ValueError, match="history"):
            estimate_capacity([])


class TestTheoreticalCapacity:
    """The topology's promised capacity for the region (and service) under test."""

    topology = Topology(
        regions=[
            Region(name="east", capacity_rps={"web": 1200.0}),
            Region(name="west", capacity_rps={"web": 800.0, "kv": 300.0}),
        ],
        pops=[Pop(name="p1", demand_weight=1, rtt_ms={"east": 10, "west": 30})],
        services=[Service(name="web", kind="stateless"), Service(name="kv", kind="stateful")],
    )

    def test_single_service_region(self) -> None:
        assert theoretical_capacity(self.topology, "east") == 1200.0

    def test_named_service(self) -> None:
        assert theoretical_capacity(self.topology, "west", "kv") == 300.0

    def test_ambiguous_region_asks_for_the_service(self) -> None:
        with pytest.raises(InvalidInstance, match="service: region 'west' lists 2"):
            theoretical_capacity(self.topology, "west")

    def test_unknown_region_and_service(self) -> None:
        with pytest.raises(InvalidInstance, match="region: 'north'"):
            theoretical_capacity(self.topology, "north")
        with pytest.raises(InvalidInstance, match="no capacity_rps for 'db'"):
            theoretical_capacity(self.topology, "east", "db")

    def test_ratio(self) -> None:
        assert capacity_ratio(1080.0, 1200.0) == pytest.approx(0.9)
        with pytest.raises(InvalidInstance, match="theoretical"):
            capacity_ratio(1.0, 0.0)


PROBING = StepPolicyConfig(reference_load=REF, probe_wider_than=0.04)


class TestProbeAfterTheFirstNomore:
    """After a wide step onto NOMORE, one probe inside the bracket, below the chord; then stop."""

    def test_a_wide_bracket_is_probed_below_the_chord_crossing(self) -> None:
        history = [_step(700), _step(930)]
        assert history[-1].band is Band.NOMORE
        decision = next_step(history, PROBING)
        assert decision.action is StepAction.PROBE
        assert decision.moves and not decision.terminal
        assert decision.predicted_limit == pytest.approx(900)
        assert 700 < decision.load < 900

    def test_the_probe_sits_its_margin_below_the_chord(self) -> None:
        history = [_step(860), _step(930)]
        default = next_step(history, PROBING)
        assert default.predicted_limit == pytest.approx(900)
        assert default.load == pytest.approx(900 - PROBING.resolution / 4 * REF)
        noisy = PROBING.model_copy(update={"probe_margin": 0.015})
        assert next_step(history, noisy).load == pytest.approx(900 - 0.015 * REF)

    def test_the_window_after_a_healthy_probe_ends_the_test_there(self) -> None:
        history = [_step(700), _step(930)]
        probe = next_step(history, PROBING)
        history.append(_step(probe.load))
        decision = next_step(history, PROBING)
        assert decision.action is StepAction.STOP
        assert decision.load == pytest.approx(probe.load)
        estimate = estimate_capacity(history)
        assert estimate.method == "interpolated"
        assert estimate.load == pytest.approx(900, rel=0.01)

    def test_a_probe_that_crosses_too_ends_at_once_below_both(self) -> None:
        history = [_step(700), _step(930), _step(880, util=0.93)]
        decision = next_step(history, PROBING)
        assert decision.terminal
        assert decision.load == pytest.approx(700)

    def test_a_narrow_bracket_is_not_probed(self) -> None:
        history = [_step(880), _step(905)]
        decision = next_step(history, PROBING)
        assert decision.action is StepAction.STOP
        assert decision.load == pytest.approx(880)

    def test_backoff_retreats_and_never_probes(self) -> None:
        history = [_step(700), _step(980, util=0.97)]
        assert history[-1].band is Band.BACKOFF
        decision = next_step(history, PROBING)
        assert decision.action is StepAction.RETREAT

    def test_probing_is_off_by_default(self) -> None:
        decision = next_step([_step(700), _step(930)], CONFIG)
        assert decision.action is StepAction.STOP
