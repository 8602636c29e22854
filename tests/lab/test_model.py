"""Model mode: the same health fields, computed from demand, routing and capacity."""

from __future__ import annotations

import pytest

from orchestrator.lab.generate import generate_config
from orchestrator.lab.runtime import LabRuntime
from orchestrator.models import RoutingWrite, ServiceWeightChange
from tests.fixtures.lab import LabFactory
from tests.lab.configs import small_config


def _model(total_rps: float, **overrides: object) -> LabRuntime:
    return LabRuntime(small_config(demand={"total_rps": total_rps}, **overrides), "model")


def _service(runtime: LabRuntime, region: str, service: str):  # type: ignore[no-untyped-def]
    report = runtime.health(10)
    return next(s for s in report.services if s.region == region and s.service == service)


class TestModelPhysics:
    """Utilization is load over capacity; latency rises with load; errors start past capacity."""

    def test_utilization_is_load_over_capacity(self) -> None:
        # web capacity in a: 2 slots / 40 ms = 50 rps; 75% of 40 rps = 30 rps of web
        web = _service(_model(40), "a", "web")
        assert web.rps == pytest.approx(30.0)
        assert web.utilization == pytest.approx(0.6)
        assert web.error_rate == 0.0
        assert web.samples == 300

    def test_latency_rises_with_load_and_errors_start_past_capacity(self) -> None:
        low, high, over = (_service(_model(rps), "a", "web") for rps in (20, 60, 200))
        assert low.p99_ms is not None and high.p99_ms is not None
        assert low.p99_ms < high.p99_ms
        assert low.error_rate == high.error_rate == 0.0
        assert over.utilization == 1.0
        assert over.error_rate == pytest.approx(1 - 50 / 150)

    def test_routing_moves_the_load(self) -> None:
        runtime = _model(40)
        runtime.state.write_routing(
            RoutingWrite(fractions={"p": {"a": 0.5, "b": 0.5}}),
            if_match=1,
            key="split",
            include_buckets=False,
        )
        report = runtime.health(10)
        assert report.region("a").rps == pytest.approx(20.0)
        assert report.region("b").rps == pytest.approx(20.0)

    def test_pool_weight_zero_forwards_the_service(self) -> None:
        runtime = _model(40)
        runtime.state.set_service_weight(
            ServiceWeightChange(region="a", service="web", weight=0.0), key="w"
        )
        assert _service(runtime, "a", "web").samples == 0
        assert _service(runtime, "b", "web").rps == pytest.approx(30.0)

    def test_outage_is_all_errors(self) -> None:
        runtime = _model(40)
        runtime.state.faults = runtime.state.faults.model_copy(update={"region_outage": ["a"]})
        region = runtime.health(10).region("a")
        assert region.error_rate == 1.0
        assert region.p99_ms is None

    def test_unrouted_region_reports_missing_data(self) -> None:
        region = _model(40).health(10).region("b")
        assert region.samples == 0 and region.rps is None and region.utilization is None


class TestBigTopology:
    """A 1,000 PoP x 50 region fleet answers health over HTTP without realising buckets."""

    async def test_big_model_health_over_http(self, start_lab: LabFactory) -> None:
        config = generate_config(pops=1000, regions=50)
        lab = await start_lab(config, mode="model")
        fleet = lab.fleet()
        health = await fleet.health()
        routing = await fleet.routing()
        assert len(health.pops) == 1000 and len(health.regions) == 50
        assert len(health.services) == 250
        assert routing.buckets is None  # too big to include by default
        assert all(r.utilization is not None and r.utilization < 1 for r in health.regions)
        assert lab.runtime is not None
        assert lab.runtime.state.routing._buckets == {}
