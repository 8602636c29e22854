"""Behaviour of the Taiji solver on small instances whose answer is known by hand."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.exceptions import Infeasible, PolicyError
from orchestrator.policy.rebalance.taiji import SolverInstance, check, solve, violations


def region(name: str, capacity: float = 100.0, utilization: float = 0.5, **kw: Any) -> dict:
    return {"name": name, "capacity": capacity, "utilization": utilization, **kw}


def pop(name: str, demand: float, fractions: dict, rtt: dict, **kw: Any) -> dict:
    return {"name": name, "demand": demand, "fractions": fractions, "rtt_ms": rtt, **kw}


def instance(regions: list, pops: list, **constraints: Any) -> SolverInstance:
    return SolverInstance.model_validate(
        {"regions": regions, "pops": pops, "constraints": constraints}
    )


def util(result: Any, name: str) -> float:
    return next(r.utilization_after for r in result.regions if r.name == name)


def two_regions(**constraints: Any) -> SolverInstance:
    # a carries 80 load at 0.8, b 20 at 0.2; both pops are closer to a.
    return instance(
        [region("a", utilization=0.8), region("b", utilization=0.2)],
        [
            pop("p1", 50, {"a": 1.0}, {"a": 10, "b": 50}),
            pop("p2", 50, {"a": 0.6, "b": 0.4}, {"a": 10, "b": 20}),
        ],
        **constraints,
    )


class TestObjectives:
    """Max utilization is minimized first; among those tables, latency (demand x RTT^2)."""

    def test_balances_utilization(self) -> None:
        result = solve(two_regions(max_utilization_increase=1.0, damping=1.0, min_shift=0.0))
        assert result.optimal_max_utilization == pytest.approx(0.5, abs=1e-6)
        assert util(result, "a") == pytest.approx(0.5, abs=1e-6)
        assert util(result, "b") == pytest.approx(0.5, abs=1e-6)

    def test_moves_the_pop_that_pays_least_rtt(self) -> None:
        # p2 is 20 ms from b, p1 is 50 ms: p2's traffic goes to b first.
        result = solve(two_regions(max_utilization_increase=1.0, damping=1.0, min_shift=0.0))
        assert result.fractions["p1"] == {"a": pytest.approx(1.0)}
        assert result.fractions["p2"]["b"] == pytest.approx(1.0)

    def test_plenty_of_capacity_routes_to_nearest(self) -> None:
        inst = instance(
            [region("a", 1000, 0.05), region("b", 1000, 0.05)],
            [
                pop("near-a", 50, {"b": 1.0}, {"a": 5, "b": 90}),
                pop("near-b", 50, {"a": 1.0}, {"a": 80, "b": 4}),
            ],
            damping=1.0,
        )
        result = solve(inst)
        assert result.fractions == {"near-a": {"a": 1.0}, "near-b": {"b": 1.0}}
        assert result.latency_cost < result.latency_cost_before


class TestConstraints:
    """Ramp, drained regions, sticky floors and RTT limits hold in the published table."""

    def test_ramp_limits_the_rise_per_epoch(self) -> None:
        result = solve(two_regions(max_utilization_increase=0.04, damping=1.0, min_shift=0.0))
        assert util(result, "b") == pytest.approx(0.24, abs=1e-6)
        assert util(result, "a") == pytest.approx(0.76, abs=1e-6)

    def test_drained_region_gets_nothing_even_with_dampening(self) -> None:
        inst = instance(
            [region("a", utilization=0.3), region("b", utilization=0.3, status="drained")],
            [pop("p", 60, {"a": 0.5, "b": 0.5}, {"a": 10, "b": 10})],
            max_utilization_increase=1.0,
            damping=0.5,
        )
        result = solve(inst)
        assert result.fractions["p"] == {"a": 1.0}
        assert util(result, "b") == 0.0

    def test_sticky_sessions_stay(self) -> None:
        inst = two_regions(max_utilization_increase=1.0, damping=1.0)
        inst.pops[0].sticky = {"a": 0.9}
        result = solve(inst)
        assert result.fractions["p1"]["a"] >= 0.9 - 1e-9
        assert violations(inst, result) == []

    def test_rtt_limit_keeps_new_traffic_near(self) -> None:
        inst = two_regions(max_utilization_increase=1.0, damping=1.0, rtt_limit_ms=30)
        result = solve(inst)
        # p1 is 50 ms from b: it may not go there, so only p2 relieves a.
        assert result.fractions["p1"] == {"a": pytest.approx(1.0)}
        assert util(result, "a") == pytest.approx(0.5, abs=1e-6)

    def test_region_share_override_is_respected(self) -> None:
        inst = instance(
            [region("a", utilization=0.5), region("b", utilization=0.5, max_share=0.3)],
            [pop("p", 100, {"a": 0.5, "b": 0.5}, {"a": 10, "b": 10})],
            damping=1.0,
            max_utilization_increase=1.0,
        )
        result = solve(inst)
        share_b = next(r.share_after for r in result.regions if r.name == "b")
        assert share_b == pytest.approx(0.3, abs=1e-6)


class TestDampening:
    """The table moves ``damping`` of the way to the optimum; tiny moves are skipped unless
    skipping would break a cap or raise the max (tests/policy/test_taiji_damping.py)."""

    def test_moves_eighty_percent_of_the_way(self) -> None:
        full = solve(two_regions(max_utilization_increase=1.0, damping=1.0, min_shift=0.0))
        damped = solve(two_regions(max_utilization_increase=1.0, damping=0.8, min_shift=0.0))
        for name, current in (("p1", {"a": 1.0}), ("p2", {"a": 0.6, "b": 0.4})):
            for r in ("a", "b"):
                want = current.get(r, 0.0) + 0.8 * (
                    full.fractions[name].get(r, 0.0) - current.get(r, 0.0)
                )
                assert damped.fractions[name].get(r, 0.0) == pytest.approx(want, abs=1e-9)

    def test_skips_latency_only_moves_under_min_shift(self) -> None:
        # c sets the max and only q can reach it; p's 0.4% move would only save latency.
        inst = instance(
            [region("a", 1000, 0.0995), region("b", 1000, 0.0005), region("c", 100, 0.6)],
            [
                pop("p", 100, {"a": 0.995, "b": 0.005}, {"a": 5, "b": 50, "c": 90},
                    rtt_limit_ms=60),
                pop("q", 60, {"c": 1.0}, {"a": 90, "b": 90, "c": 5}, rtt_limit_ms=60),
            ],
        )  # fmt: skip
        result = solve(inst)
        assert result.skipped_pops == ["p"]
        assert result.fractions["p"] == {"a": 0.995, "b": 0.005}
        assert result.pops[0].moved == 0.0

    def test_never_skips_a_move_a_cap_needs(self) -> None:
        # a is over the 0.9 target by 0.005: the fix moves ~0.4% of p, under min_shift.
        inst = instance(
            [region("a", 1000, 0.905), region("b", 1000, 0.5)],
            [pop("p", 1405, {"a": 905 / 1405, "b": 500 / 1405}, {"a": 10, "b": 10})],
            target_utilization=0.9,
            max_utilization_increase=0.006,
        )
        result = solve(inst)
        assert result.skipped_pops == []
        assert util(result, "a") <= 0.9 + 1e-9
        assert 0 < result.pops[0].moved < 0.01


class TestInfeasible:
    """No feasible table raises Infeasible naming the binding constraint."""

    def test_capacity(self) -> None:
        inst = instance(
            [region("a", 100, 1.3)],
            [pop("p", 130, {"a": 1.0}, {"a": 5})],
            target_utilization=0.75,
            max_utilization_increase=1.0,
        )
        with pytest.raises(Infeasible, match=r"capacity: total demand is 1\.73x") as err:
            solve(inst)
        assert err.value.constraint == "capacity"

    def test_rtt_limit(self) -> None:
        inst = instance(
            [region("a"), region("b", status="drained")],
            [pop("x", 10, {"b": 1.0}, {"a": 90, "b": 5}, rtt_limit_ms=40)],
            max_utilization_increase=1.0,
        )
        with pytest.raises(Infeasible, match="pop x has no active region within 40 ms"):
            solve(inst)

    def test_ramp(self) -> None:
        inst = instance(
            [region("a", utilization=0.5), region("b", utilization=0.5, status="drained")],
            [pop("p", 100, {"a": 0.5, "b": 0.5}, {"a": 5, "b": 5})],
        )
        with pytest.raises(Infeasible, match=r"ramp: at most \+0\.04") as err:
            solve(inst)
        assert err.value.constraint == "ramp"

    def test_every_region_off(self) -> None:
        inst = instance(
            [region("a", status="abnormal"), region("b", status="drained")],
            [pop("p", 10, {"a": 1.0}, {"a": 5, "b": 5})],
        )
        with pytest.raises(Infeasible, match="status: every region is drained or abnormal"):
            solve(inst)


class TestCheck:
    """check() recomputes every invariant from the instance and refuses a broken table."""

    def test_accepts_solver_output(self) -> None:
        inst = two_regions(max_utilization_increase=1.0)
        check(inst, solve(inst))

    def test_refuses_traffic_to_drained_region(self) -> None:
        inst = instance(
            [region("a", utilization=0.3), region("b", utilization=0.3, status="drained")],
            [pop("p", 60, {"a": 0.5, "b": 0.5}, {"a": 10, "b": 10})],
            max_utilization_increase=1.0,
        )
        result = solve(inst)
        result.fractions["p"] = {"a": 0.5, "b": 0.5}
        with pytest.raises(PolicyError, match=r"fractions\.p\.b: region is not active"):
            check(inst, result)

    def test_refuses_overload_and_bad_sums(self) -> None:
        inst = two_regions(max_utilization_increase=1.0, target_utilization=0.6)
        result = solve(inst)
        result.fractions = {"p1": {"a": 1.0}, "p2": {"a": 0.7}}
        problems = violations(inst, result)
        assert any(p.startswith("fractions.p2: sums to") for p in problems)
        assert any(p.startswith("utilization.a:") for p in problems)


class TestBucketsInResult:
    """With current buckets the result maps each PoP's new split onto them with minimal churn."""

    def test_churn_is_minimal_and_buckets_follow_fractions(self) -> None:
        inst = two_regions(max_utilization_increase=1.0, damping=1.0, min_shift=0.0)
        inst.pops[1].buckets = ["a"] * 6 + ["b"] * 4
        result = solve(inst)
        p2 = result.pops[1]
        assert p2.buckets == ["b"] * 10
        assert p2.churn == p2.min_churn == 6
        assert result.churn == 6
        assert result.pops[0].buckets is None
