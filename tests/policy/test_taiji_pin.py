"""A pinned share (``min_share``) in the Taiji solver: a floor, exact with an equal cap."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.exceptions import Infeasible
from orchestrator.lab.config import load_config
from orchestrator.models import HealthReport, RegionHealth, RoutingTable, ServiceHealth
from orchestrator.policy.rebalance.feasibility import relax
from orchestrator.policy.rebalance.inputs import Override, build_instance
from orchestrator.policy.rebalance.model import Constraints
from orchestrator.policy.rebalance.taiji import SolverInstance, check, solve

URGENT = {"max_utilization_increase": 10.0, "damping": 1.0, "min_shift": 0.0}


def region(name: str, capacity: float = 100.0, utilization: float = 0.3, **kw: Any) -> dict:
    return {"name": name, "capacity": capacity, "utilization": utilization, **kw}


def three_regions(**pins: dict[str, float]) -> list[dict]:
    return [region(name, **pins.get(name, {})) for name in ("a", "b", "c")]


def pops() -> list[dict]:
    # 90 load, evenly split: every region carries 30 at utilization 0.3.
    third = {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}
    return [
        {"name": "p1", "demand": 45, "fractions": third, "rtt_ms": {"a": 5, "b": 40, "c": 80}},
        {"name": "p2", "demand": 45, "fractions": third, "rtt_ms": {"a": 60, "b": 5, "c": 20}},
    ]


def instance(regions: list[dict], **constraints: Any) -> SolverInstance:
    return SolverInstance.model_validate(
        {"regions": regions, "pops": pops(), "constraints": constraints}
    )


def share(result: Any, name: str) -> float:
    return next(r.share_after for r in result.regions if r.name == name)


class TestPinIsHonoured:
    """A region with min_share gets at least that share; with max_share equal, exactly it."""

    def test_floor_raises_the_share_above_the_balanced_one(self) -> None:
        result = solve(instance(three_regions(a={"min_share": 0.6}), **URGENT))
        assert share(result, "a") >= 0.6 - 1e-9
        # Left free, the solver balances at 1/3 each: the pin is what moved it.
        free = solve(instance(three_regions(), **URGENT))
        assert share(free, "a") == pytest.approx(1 / 3, abs=1e-6)

    def test_pin_with_equal_cap_is_exact(self) -> None:
        pin = {"min_share": 0.55, "max_share": 0.55}
        result = solve(instance(three_regions(b=pin), **URGENT))
        assert share(result, "b") == pytest.approx(0.55, abs=1e-9)
        check(instance(three_regions(b=pin), **URGENT), result)

    def test_pin_below_the_current_share_moves_traffic_away(self) -> None:
        pin = {"min_share": 0.1, "max_share": 0.1}
        result = solve(instance(three_regions(c=pin), **URGENT))
        assert share(result, "c") == pytest.approx(0.1, abs=1e-9)
        # The rest is balanced over a and b.
        assert share(result, "a") == pytest.approx(0.45, abs=1e-6)

    def test_damped_epoch_still_meets_the_pin(self) -> None:
        # Normal epochs damp the move to 80% and skip small ones; the pin must hold anyway.
        pin = {"min_share": 0.5, "max_share": 0.5}
        inst = instance(
            three_regions(a=pin), max_utilization_increase=1.0, damping=0.8, min_shift=0.05
        )
        result = solve(inst)
        assert share(result, "a") == pytest.approx(0.5, abs=1e-9)
        check(inst, result)

    def test_unpinned_regions_still_optimise_latency(self) -> None:
        # With a held at 1/3, p1 (5 ms from a) fills a and p2 goes to its nearest, b.
        pin = {"min_share": 1 / 3, "max_share": 1 / 3}
        result = solve(instance(three_regions(a=pin), **URGENT))
        assert share(result, "a") == pytest.approx(1 / 3, abs=1e-9)
        assert result.fractions["p1"]["a"] > 0.6
        assert result.fractions["p2"].get("a", 0.0) == pytest.approx(0.0, abs=1e-9)


class TestPinInfeasible:
    """A pin that cannot be met raises Infeasible naming pin_share, and relaxing it helps."""

    def test_pin_over_the_region_capacity(self) -> None:
        # 0.9 of 90 load is 81 > 0.75 target x 100 capacity.
        inst = instance(three_regions(a={"min_share": 0.9}), target_utilization=0.75, **URGENT)
        with pytest.raises(Infeasible) as exc:
            solve(inst)
        assert exc.value.constraint == "pin_share"
        assert "region a" in exc.value.detail
        assert share(solve(relax(inst, "pin_share")), "a") <= 0.75 * 100 / 90 + 1e-9

    def test_pins_adding_up_to_more_than_everything(self) -> None:
        inst = instance(three_regions(a={"min_share": 0.6}, b={"min_share": 0.6}), **URGENT)
        with pytest.raises(Infeasible) as exc:
            solve(inst)
        assert exc.value.constraint == "pin_share"
        assert "120.00%" in exc.value.detail

    def test_pin_above_its_own_cap(self) -> None:
        inst = instance(three_regions(a={"min_share": 0.5, "max_share": 0.4}), **URGENT)
        with pytest.raises(Infeasible) as exc:
            solve(inst)
        assert exc.value.constraint == "pin_share"

    def test_pin_on_a_drained_region(self) -> None:
        regions = three_regions()
        regions[2] = region("c", utilization=0.0, status="drained", min_share=0.2)
        pinned = [{**p, "fractions": {"a": 0.5, "b": 0.5}} for p in pops()]
        inst = SolverInstance.model_validate(
            {"regions": regions, "pops": pinned, "constraints": URGENT}
        )
        with pytest.raises(Infeasible) as exc:
            solve(inst)
        assert exc.value.constraint == "pin_share"
        assert "drained" in exc.value.detail

    def test_pin_within_the_rtt_limit_reachable_regions(self) -> None:
        # Only p1 may reach c (p2 is 20 ms from c, beyond a 10 ms limit after the move);
        # a pin of c needing more than p1's traffic is infeasible and the LP says so.
        regions = three_regions(c={"min_share": 0.7})
        inst = SolverInstance.model_validate(
            {
                "regions": regions,
                "pops": [
                    {**pops()[0], "rtt_ms": {"a": 5, "b": 40, "c": 8}},
                    {**pops()[1], "fractions": {"a": 0.5, "b": 0.5}},
                ],
                "constraints": {**URGENT, "rtt_limit_ms": 10},
            }
        )
        with pytest.raises(Infeasible):
            solve(inst)


class TestRebalancerMapsPinToBothBounds:
    """The rebalancer's pin_share override becomes min_share and max_share of the region."""

    def test_build_instance_pins_exactly(self) -> None:
        config = load_config()
        topology = config.topology()
        fractions = config.initial_fractions()
        routing = RoutingTable(version=1, fractions=fractions)
        regions = [
            RegionHealth(region=r, rps=60, utilization=0.5, samples=600)
            for r in topology.region_names
        ]
        services = [
            ServiceHealth(region=r, service="web", rps=60, utilization=0.5, samples=600)
            for r in topology.region_names
        ]
        health = HealthReport(
            window_s=10, observed_at=datetime.now(UTC), regions=regions, services=services
        )
        override = Override(region="eu-west", owner="loadtest:x", pin_share=0.42)
        inst, _ = build_instance(topology, routing, health, [override], Constraints(**URGENT))
        pinned = next(r for r in inst.regions if r.name == "eu-west")
        assert pinned.min_share == pinned.max_share == 0.42
        result = solve(inst)
        assert share(result, "eu-west") == pytest.approx(0.42, abs=1e-9)
