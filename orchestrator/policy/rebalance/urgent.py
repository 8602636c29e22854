"""An urgent epoch: an override is waiting, or the table in force breaks a hold.

The override is the operator's decision, so it applies at once: no damping, no minimum
shift, and the per-epoch ramp may be lifted. When the table in force breaks a hold (a
new cap or pin, or a hold the fleet's table lost), only as far as applying it needs;
a release (nothing broken) still goes straight to the optimum.

With the ramp lifted outright, the epoch also rebalanced every other region to the
min-max optimum of one noisy health window, all at once: in a paced drain through
HAProxy (benchmarks/drain_haproxy.py, 1,200 rps), step 3 of 4 took ~100 rps off us-east
and put ~90 rps on eu-central where the schedule planned ~20, cold; eu-central's server
sat at its connection limit for 4 s and its queue overflowed (277 503s). So the ramp is
lifted in steps, and the first that admits a table wins: a receiver takes at most the
new load the override needs, to within a doubling.
"""

from __future__ import annotations

from orchestrator.exceptions import PolicyError
from orchestrator.policy.rebalance.model import Constraints, SolverInstance, SolverResult
from orchestrator.policy.rebalance.taiji import check, solve

__all__ = ["RAMP_STEPS", "UNBOUNDED_RAMP", "solve_urgent", "urgent_constraints"]

#: a utilization increase no region can reach in one epoch: no ramp at all
UNBOUNDED_RAMP = 10.0
#: the ramps tried, as multiples of the configured one, before none at all
RAMP_STEPS = (1, 2, 4, 8, 16)


def urgent_constraints(constraints: Constraints, ramp: float = UNBOUNDED_RAMP) -> Constraints:
    """``constraints`` for an urgent epoch: at once (no damping or minimum shift), with
    at most ``ramp`` of utilization increase per region."""
    return constraints.model_copy(
        update={"max_utilization_increase": ramp, "damping": 1.0, "min_shift": 0.0}
    )


def solve_urgent(instance: SolverInstance, configured: Constraints) -> SolverResult:
    """The checked table of an urgent epoch with the smallest ramp of :data:`RAMP_STEPS`
    (times ``configured.max_utilization_increase``) that admits one, else with none.

    A ramp too small for the hold is mostly refused by the solver's aggregate check,
    before any LP, so the steps cost little more than one solve (the LP's seconds at
    1,000 PoPs are what an override waits for). Raises what
    :func:`~orchestrator.policy.rebalance.taiji.solve` raises without a ramp: the hold
    fits no table at all."""
    for step in RAMP_STEPS:
        ramp = configured.max_utilization_increase * step
        if ramp >= UNBOUNDED_RAMP:
            break
        bounded = instance.model_copy(update={"constraints": urgent_constraints(configured, ramp)})
        try:
            result = solve(bounded)
            check(bounded, result)
        except PolicyError:  # infeasible under this ramp (or HiGHS at its tolerances)
            continue
        return result
    unbounded = instance.model_copy(update={"constraints": urgent_constraints(configured)})
    result = solve(unbounded)
    check(unbounded, result)
    return result
