"""The drain benchmarks' shortest safe schedule, and why drain_haproxy's lab is colder."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from benchmarks import drain, drain_haproxy
from orchestrator.lab.config import LabConfig
from orchestrator.models import HealthReport, ServiceHealth

REGIONS = ["us-east", "us-west", "eu-west", "eu-central"]


def nominal(capacity: float, load: float) -> tuple[SimpleNamespace, HealthReport]:
    """Four regions of equal web capacity, each carrying ``load``."""
    topology = SimpleNamespace(
        regions=[SimpleNamespace(name=r, capacity_rps={"web": capacity}) for r in REGIONS]
    )
    health = HealthReport(
        window_s=10.0,
        observed_at=datetime(2026, 12, 7, tzinfo=UTC),
        services=[ServiceHealth(region=r, service="web", rps=load) for r in REGIONS],
    )
    return topology, health


class TestShortestSafeSchedule:
    """k_min = ceil((factor - 1) L / (target C - B - L)) for the worst receiver; a colder
    bucket needs more, smaller steps."""

    def test_drain_haproxy_nominal_loads(self) -> None:
        topology, health = nominal(500.0, 240.0)  # 48% each; a receiver gets 80 rps
        three = drain.shortest_safe_schedule(topology, health, "eu-west", cold_factor=3.0)
        four = drain.shortest_safe_schedule(topology, health, "eu-west", cold_factor=4.0)
        assert (three["k_min"], four["k_min"]) == (3, 5)  # 160/55 -> 3, 240/55 -> 5
        assert four["shortest_safe_s"] == 5 * drain.WARM_AFTER_S
        assert four["cold_factor"] == 4.0

    def test_default_factor_is_drain_py_lab(self) -> None:
        topology, health = nominal(500.0, 240.0)
        schedule = drain.shortest_safe_schedule(topology, health, "eu-west")
        assert schedule["cold_factor"] == drain.COLD_FACTOR == 3.0


class TestDrainHAProxyLab:
    """At drain_haproxy's cold factor the naive drain's surge is over a receiver's web
    capacity (at drain.py's 3x it was 96%, which HAProxy queues without a 5xx)."""

    def test_naive_surge_exceeds_capacity(self) -> None:
        config = LabConfig.model_validate(drain_haproxy.lab_config())
        web = config.regions[0].services["web"]
        capacity = web.slots / (web.service_time_ms / 1000.0)
        load = 0.8 * drain_haproxy.TRAFFIC_RPS / len(config.regions)
        moved = load / (len(config.regions) - 1)

        def surge(factor: float) -> float:
            return (load + factor * moved) / capacity

        assert config.cold.factor == drain_haproxy.COLD_FACTOR
        assert surge(drain.COLD_FACTOR) < 1.0 < surge(config.cold.factor)
