"""The range a PromQL p99 may take around the lab's exact one."""

from __future__ import annotations

import pytest

from testkit.histograms import quantile_range_ms


class TestQuantileRange:
    """The exact value's bucket and both neighbours: no wider, so a wrong series or a unit
    mistake still fails the agreement tests."""

    def test_a_rank_carried_across_an_edge_is_inside(self) -> None:
        low, high = quantile_range_ms(509.8)  # bucket (500, 600]
        assert (low, high) == pytest.approx((400.0, 750.0))
        assert low <= 409.5 <= high  # the hogged run's PromQL read

    def test_two_buckets_off_is_outside(self) -> None:
        low, high = quantile_range_ms(509.8)
        assert not low <= 350.0 <= high
        assert not low <= 509.8 * 1000 <= high  # seconds taken for milliseconds

    def test_the_first_and_last_buckets(self) -> None:
        assert quantile_range_ms(0.5) == pytest.approx((0.0, 2.0))
        assert quantile_range_ms(60_000.0)[1] == float("inf")
