"""An urgent epoch applies a new hold at once, moving no more load than it needs."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.exceptions import Infeasible
from orchestrator.policy.rebalance.model import Constraints, SolverInstance, SolverResult
from orchestrator.policy.rebalance.taiji import solve
from orchestrator.policy.rebalance.urgent import solve_urgent, urgent_constraints

CONFIGURED = Constraints()  # a ramp of 0.04 per epoch


def noisy_fleet(**d: Any) -> SolverInstance:
    """Four regions carrying 30 each of 120, as one noisy window reads them: ``a`` looks
    hot (0.45), ``c`` cold (0.15). ``d``'s overrides come from ``d``."""
    utilization = {"a": 0.45, "b": 0.30, "c": 0.15, "d": 0.30}
    quarter = dict.fromkeys(utilization, 0.25)
    return SolverInstance.model_validate(
        {
            "regions": [
                {"name": name, "capacity": 100.0, "utilization": u, **(d if name == "d" else {})}
                for name, u in utilization.items()
            ],
            "pops": [
                {"name": p, "demand": 60, "fractions": quarter, "rtt_ms": dict.fromkeys("abcd", 5)}
                for p in ("p1", "p2")
            ],
            "constraints": urgent_constraints(CONFIGURED).model_dump(),
        }
    )


def rises(result: SolverResult) -> dict[str, float]:
    return {r.name: r.utilization_after - r.utilization_before for r in result.regions}


def share(result: SolverResult, name: str) -> float:
    return next(r.share_after for r in result.regions if r.name == name)


class TestSolveUrgent:
    """A drain step's cap is met in one epoch, but the epoch does not also rebalance the
    rest of the fleet to one window's noise: each region's rise stays within the smallest
    ramp that admits the cap. Without a ramp, the same epoch piled load onto the region
    that looked cold."""

    def test_a_drain_step_moves_only_what_the_cap_needs(self) -> None:
        step = noisy_fleet(max_share=0.15)
        unbounded = solve(step)
        assert max(rises(unbounded).values()) > 2 * CONFIGURED.max_utilization_increase
        bounded = solve_urgent(step, CONFIGURED)
        assert share(bounded, "d") == pytest.approx(0.15, abs=1e-6)
        assert max(rises(bounded).values()) <= CONFIGURED.max_utilization_increase + 1e-6

    def test_the_ramp_doubles_until_the_hold_fits(self) -> None:
        # d emptied at once: 30 of load onto regions that may each rise 0.04 (4 load) does
        # not fit, nor with 0.08; 0.16 does
        drained = solve_urgent(noisy_fleet(max_share=0.0), CONFIGURED)
        assert share(drained, "d") == pytest.approx(0.0, abs=1e-6)
        worst = max(rises(drained).values())
        assert 2 * CONFIGURED.max_utilization_increase < worst <= 4 * 0.04 + 1e-6

    def test_a_hold_that_fits_no_table_is_refused_as_before(self) -> None:
        with pytest.raises(Infeasible):
            solve_urgent(noisy_fleet(min_share=0.9, max_share=0.9), CONFIGURED)
