"""Stage 3 of the Taiji solver: of the latency-optimal tables, the one that moves least.

Stage 2's LP often has many optimal tables: PoPs with the same RTT to two regions
(the HAProxy lab's rig: every PoP 1 ms from both), or any swap of traffic between
PoPs that costs no latency. HiGHS then returns a vertex, and which vertex has
nothing to do with the table in place: measured on two such PoPs with noisy
low-utilization demand, an epoch moved 74.5% of both PoPs' buckets for a 5-point
change of the regions' shares, because the optimum sent one PoP wholly east and
the other wholly west where both had been split.

So a third LP keeps stage 2's constraints, holds latency at stage 2's optimum, and
maximizes the traffic that stays where it is: each (PoP, region) column in use
now gets a twin "kept" column bounded by its current movable share, and the
objective rewards the twins by the PoP's demand. A PoP's moved share is its
movable share minus what it keeps, so this is the least move among the optimal
tables, the lexicographic third objective, without weighing it against latency.

It is solved like stage 2, by column generation (``taiji_colgen``) from stage 2's
columns and the ones in use now, so it is the least move over every allowed pair.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from orchestrator.policy.rebalance.colgen import LatencyLP

__all__ = ["least_move"]

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.intp]

#: Latency may exceed stage 2's optimum by this, relative: only float error.
LATENCY_SLACK = 1e-12
#: Stage 3's table replaces stage 2's only if it keeps more than this share of the traffic.
MIN_GAIN = 1e-6
#: A column's current movable share below this is not traffic to keep.
KEEP_EPS = 1e-12


def least_move(lp: LatencyLP, optimum: Array, keep: Array, weight: Array, *, full: bool) -> Array:
    """The latency-optimal ``z`` that keeps most of ``keep``; ``optimum`` if HiGHS fails.

    ``keep`` is each column's current movable share and ``weight`` its PoP's demand
    (any positive scale); ``optimum`` is stage 2's solution. ``full``: every column at
    once, as for stage 2; else column generation from stage 2's columns and the current
    ones only (no nearest regions: the optimum is feasible over them already, and pricing
    adds what else helps).
    """
    from orchestrator.policy.rebalance.colgen import solve_colgen, solve_full

    held = np.nonzero(keep > KEEP_EPS)[0]
    if len(held) == 0:
        return optimum
    stage3 = _stage3(lp, optimum, keep, weight, held)
    solution = solve_full(stage3) if full else solve_colgen(stage3, k=0)
    if solution is None:
        return optimum
    n = len(lp.cost)
    z = solution[:n].copy()
    np.add.at(z, held, solution[n:])
    kept_before = weight @ np.minimum(np.maximum(optimum, 0.0), keep)
    kept_after = weight @ np.minimum(np.maximum(z, 0.0), keep)
    # Within HiGHS's tolerances stage 3 "keeps" slivers the caps' slack allows (2e-9 of a
    # PoP); those move nothing real, and a sliver can still round to a whole bucket.
    if kept_after - kept_before <= MIN_GAIN * float(weight @ keep):
        return optimum
    return z


def _stage3(lp: LatencyLP, optimum: Array, keep: Array, weight: Array, held: Index) -> LatencyLP:
    """Stage 2's LP plus a kept twin per held column (``twin <= keep`` as a row, so the
    column generation of stage 2 solves it unchanged) and latency held at the optimum."""
    import scipy.sparse as sp

    n, m = len(lp.cost), len(held)
    best = float(lp.cost @ optimum)
    # The latency row in units of the optimum, so HiGHS's absolute row tolerance means
    # the same (1e-7 of the optimum at most) whatever the costs' scale.
    unit = max(best, 1e-12 * float(np.abs(lp.cost).max()), 1e-300)
    latency = sp.csr_matrix(np.concatenate([lp.cost, lp.cost[held]])[None, :] / unit)
    bound = sp.hstack([sp.csr_matrix((m, n)), sp.eye(m, format="csr")])
    a_ub = sp.vstack([sp.hstack([lp.a_ub, lp.a_ub[:, held]]), latency, bound], format="csc")
    b_ub = np.concatenate([lp.b_ub, [best / unit * (1 + LATENCY_SLACK)], keep[held]])
    cost = np.concatenate([np.zeros(n), -weight[held] / max(float(weight.max()), 1e-300)])
    # Stage 2's columns start in the set, so its optimum is feasible from the first solve.
    start = lp.current | (optimum > KEEP_EPS)
    return LatencyLP(
        cost=cost,
        a_ub=a_ub,
        b_ub=b_ub,
        a_eq=sp.hstack([lp.a_eq, lp.a_eq[:, held]], format="csc"),
        b_eq=lp.b_eq,
        row=np.concatenate([lp.row, lp.row[held]]),
        rtt=np.concatenate([lp.rtt, lp.rtt[held]]),
        current=np.concatenate([start, np.ones(m, dtype=bool)]),
    )
