"""Where a pool's load-test thresholds bind under Poisson arrivals (testkit/queueing.py)."""

from __future__ import annotations

from testkit.queueing import refused_share, threshold_capacity


class TestThresholdCapacity:
    """A bounded queue refuses Poisson arrivals before its nominal capacity; the capacity a
    load test should find is where the first threshold binds."""

    def test_the_shipped_eu_west_pool_errs_before_its_utilization_threshold(self) -> None:
        # 6 slots x 80 ms = 75 rps nominal, 12 queue places; thresholds 95% and 1%
        found = threshold_capacity(6, 12, 80.0, max_utilization=0.95, max_error_rate=0.01)
        assert 65.0 < found < 71.25
        assert refused_share(found * 0.98, 6, 12, 0.08, 100_000) < 0.01
        assert refused_share(found * 1.02, 6, 12, 0.08, 100_000) >= 0.01

    def test_a_deep_queue_binds_at_utilization(self) -> None:
        found = threshold_capacity(6, 600, 80.0, max_utilization=0.95, max_error_rate=0.01)
        assert found == 0.95 * 75.0

    def test_refusals_grow_with_the_load(self) -> None:
        shares = [refused_share(rps, 6, 12, 0.08, 50_000) for rps in (50, 65, 80, 100)]
        assert shares == sorted(shares) and shares[0] < 0.001 < shares[-1]
