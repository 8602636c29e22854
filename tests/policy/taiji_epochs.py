"""Helpers for tests that run the Taiji solver epoch after epoch on fixed demand."""

from __future__ import annotations

from orchestrator.policy.rebalance.taiji import SolverInstance, SolverResult, solve


def next_epoch(inst: SolverInstance, result: SolverResult) -> SolverInstance:
    """Publish ``result`` and measure it with the linear load model; demand stays fixed."""
    after = {r.name: max(r.utilization_after, 0.0) for r in result.regions}
    return inst.model_copy(
        update={
            "regions": [r.model_copy(update={"utilization": after[r.name]}) for r in inst.regions],
            "pops": [p.model_copy(update={"fractions": result.fractions[p.name]}) for p in inst.pops],
        }
    )  # fmt: skip


def long_run_optimum(inst: SolverInstance) -> float:
    """The optimum with the per-epoch ramp lifted: where epochs on fixed demand should end."""
    cons = inst.constraints.model_copy(
        update={"max_utilization_increase": 1e9, "damping": 1.0, "min_shift": 0.0}
    )
    return solve(inst.model_copy(update={"constraints": cons})).optimal_max_utilization


def never_worse(result: SolverResult, tol: float = 1e-9) -> bool:
    """The published max is at most the larger of the current max and the optimum."""
    bound = max(result.max_utilization_before, result.optimal_max_utilization)
    return result.max_utilization <= bound + tol
