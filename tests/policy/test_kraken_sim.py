"""The load-test simulator: responses to load, ground truth, and full policy runs."""

from __future__ import annotations

import random
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.policy.health_metrics import (
    Band,
    HealthMetric,
    default_lab_metrics,
    evaluate_health,
)
from orchestrator.policy.loadtest.kraken import (
    FixedPolicyConfig,
    StepAction,
    StepPolicyConfig,
    kraken_fixed_step,
    next_step,
)
from orchestrator.policy.loadtest.sim import (
    SimulatedRegion,
    run_load_test,
    true_crossings,
    true_limit,
)

METRICS_LOOSE_SLO = default_lab_metrics("sim", p99_slo_ms=300)
METRICS_TIGHT_SLO = default_lab_metrics("sim", p99_slo_ms=80)
ADAPTIVE = partial(next_step, config=StepPolicyConfig(reference_load=1000))
FIXED = partial(kraken_fixed_step, config=FixedPolicyConfig(reference_load=1000))


class TestRegionResponse:
    """Metrics rise with load: linear utilization, a bending p99, errors past the onset."""

    region = SimulatedRegion(capacity_rps=800, noise=0.0, error_onset=0.9)

    def test_utilization_is_load_over_capacity(self) -> None:
        assert self.region.true_values(400)["utilization"] == pytest.approx(0.5)
        assert self.region.true_values(2000)["utilization"] == 1.0

    def test_p99_bends_upwards(self) -> None:
        p99 = [self.region.true_values(x)["p99_ms"] for x in (200, 400, 600, 700)]
        rises = [b - a for a, b in zip(p99, p99[1:], strict=False)]
        assert rises == sorted(rises)
        assert self.region.true_values(900)["p99_ms"] == self.region.timeout_ms

    def test_errors_start_at_the_onset(self) -> None:
        assert self.region.true_values(700)["error_rate"] == self.region.base_error_rate
        assert self.region.true_values(800)["error_rate"] > 0.01

    def test_noise_is_seeded(self) -> None:
        noisy = SimulatedRegion(capacity_rps=800, noise=0.05)
        first = noisy.observe(500, random.Random(3)).region("sim")
        again = noisy.observe(500, random.Random(3)).region("sim")
        other = noisy.observe(500, random.Random(4)).region("sim")
        assert first == again
        assert first.p99_ms != other.p99_ms

    def test_thin_telemetry_reads_as_too_few_samples(self) -> None:
        thin = SimulatedRegion(capacity_rps=800, sample_fraction=0.2)
        report = thin.observe(400, random.Random(0))
        expected = {m.name: 400 * thin.window_s for m in METRICS_LOOSE_SLO}
        evaluation = evaluate_health(METRICS_LOOSE_SLO, report, expected_samples=expected)
        assert {r.status for r in evaluation.readings} == {"too_few_samples"}
        assert evaluation.band is Band.BACKOFF


class TestGroundTruth:
    """The true capacity is where the first metric, without noise, reaches NOMORE."""

    def test_utilization_bound(self) -> None:
        region = SimulatedRegion(capacity_rps=800, knee=6)
        load, metric = true_limit(region, METRICS_LOOSE_SLO)
        assert metric == "sim:utilization"
        assert load == pytest.approx(720, rel=1e-6)

    def test_latency_bound(self) -> None:
        region = SimulatedRegion(capacity_rps=800)
        load, metric = true_limit(region, METRICS_TIGHT_SLO)
        assert metric == "sim:p99_ms"
        assert region.true_values(load)["p99_ms"] == pytest.approx(80, rel=1e-6)

    def test_error_cliff_bound(self) -> None:
        region = SimulatedRegion(capacity_rps=800, error_onset=0.8)
        crossings = true_crossings(region, METRICS_LOOSE_SLO)
        load, metric = true_limit(region, METRICS_LOOSE_SLO)
        assert metric == "sim:error_rate"
        assert load == min(v for v in crossings.values() if v is not None)


class TestPolicyRuns:
    """Both policies run to a terminal decision; the adaptive one lands on the capacity."""

    @pytest.mark.parametrize("capacity", [650.0, 800.0, 1000.0])
    @pytest.mark.parametrize("metrics", [METRICS_LOOSE_SLO, METRICS_TIGHT_SLO], ids=["util", "p99"])
    def test_adaptive_finds_capacity_without_noise(
        self, capacity: float, metrics: list[HealthMetric]
    ) -> None:
        region = SimulatedRegion(capacity_rps=capacity, noise=0.0, knee=6)
        run = run_load_test(region, metrics, ADAPTIVE, start_load=350, seed=1)
        assert abs(run.error) < 0.02
        assert run.windows_over <= 1
        assert run.bottleneck_ok
        assert run.decisions[-1].terminal
        assert all(not d.terminal for d in run.decisions[:-1])

    def test_runs_are_reproducible(self) -> None:
        region = SimulatedRegion(capacity_rps=800, noise=0.05)
        first = run_load_test(region, METRICS_TIGHT_SLO, ADAPTIVE, start_load=400, seed=9)
        again = run_load_test(region, METRICS_TIGHT_SLO, ADAPTIVE, start_load=400, seed=9)
        assert first.loads == again.loads
        assert first.estimate == again.estimate

    def test_fixed_policy_creeps_in_small_steps_near_a_linear_limit(self) -> None:
        region = SimulatedRegion(capacity_rps=1000, noise=0.0, knee=6)
        run = run_load_test(region, METRICS_LOOSE_SLO, FIXED, start_load=370, seed=1)
        increments = [round(b - a) for a, b in zip(run.loads, run.loads[1:], strict=False)]
        assert increments[0] == 150
        # 370, 520, 670, 820: utilization 0.82 is within 10% of 0.9, then 1% steps to 900.
        assert increments[:3] == [150, 150, 150]
        assert set(increments[3:]) == {10}
        assert run.final_action == StepAction.STOP.value
        assert abs(run.error) < 0.01

    def test_a_cliff_past_the_step_retreats(self) -> None:
        # Errors start at 70% of capacity with nothing rising before: the bold step lands past
        # the cliff, and the policy leaves at once for the last healthy load.
        region = SimulatedRegion(capacity_rps=1000, noise=0.0, error_onset=0.7, knee=8)
        run = run_load_test(region, METRICS_LOOSE_SLO, ADAPTIVE, start_load=500, seed=1)
        assert run.final_action == StepAction.RETREAT.value
        assert run.decisions[-1].load == run.loads[-2]
        assert run.windows_over == 1
        assert run.estimate.bottleneck == "sim:error_rate"


#: the lab's settings (benchmarks/kraken.py): a straight trend lands 1.5% below its crossing
LAB_ADAPTIVE = partial(
    next_step,
    config=StepPolicyConfig(
        reference_load=1000,
        resolution=0.03,
        cautious_step=0.08,
        trust=0.9,
        landing=0.015,
        probe_wider_than=0.06,
    ),
)


class TestFewerStepsOnAStraightLimit:
    """Where the limit is a metric linear in load (utilization, as in the lab), the adaptive
    policy needs at most one step more than Kraken's fixed one and fewer on average, within
    3%, crossing the threshold at most once, while the metric's noise is at most 2%. "Never
    more" does not hold: of 6,000 random straight limits (noise 0, 1% and 2%) 7 took one step
    more (e.g. 4 against 3 at capacity 620, start 296: fixed 150 rps steps happened to land
    just under the limit), none took two. At 5% noise even this fails: hypothesis found a
    3.009% error (capacity 605, start 50)."""

    @settings(max_examples=40, deadline=None)
    @given(
        capacity=st.floats(min_value=600, max_value=1050),
        start=st.floats(min_value=50, max_value=350),
        noise=st.sampled_from([0.0, 0.01, 0.02]),
        seed=st.integers(min_value=0, max_value=10_000),
    )
    def test_adaptive_beats_fixed(
        self, capacity: float, start: float, noise: float, seed: int
    ) -> None:
        region = SimulatedRegion(capacity_rps=capacity, noise=noise, knee=8)
        ours = run_load_test(region, METRICS_LOOSE_SLO, LAB_ADAPTIVE, start_load=start, seed=seed)
        theirs = run_load_test(region, METRICS_LOOSE_SLO, FIXED, start_load=start, seed=seed)
        assert ours.steps <= theirs.steps + 1
        assert abs(ours.error) <= 0.03
        assert ours.windows_over <= 1

    def test_fewer_steps_on_average(self) -> None:
        rng = random.Random(6)
        ours, theirs = 0, 0
        for seed in range(30):
            region = SimulatedRegion(capacity_rps=rng.uniform(600, 1050), noise=0.02, knee=8)
            start = rng.uniform(50, 350)
            ours += run_load_test(
                region, METRICS_LOOSE_SLO, LAB_ADAPTIVE, start_load=start, seed=seed
            ).steps
            theirs += run_load_test(
                region, METRICS_LOOSE_SLO, FIXED, start_load=start, seed=seed
            ).steps
        assert ours < 0.8 * theirs
