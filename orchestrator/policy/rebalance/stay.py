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

Only columns that an optimal dual of stage 2 prices at zero can carry traffic in
any latency-optimal table (complementary slackness), so stage 3 runs over those
alone: a handful beyond stage 2's own where latency does not tie, every tied one
where it does. The duals come from stage 2's LP over the optimum's and the current
columns, priced against all of them as in column generation (``taiji_colgen``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from orchestrator.policy.rebalance.colgen import (
    MAX_ROUNDS,
    RC_TOL,
    LatencyLP,
    _entering,
    _reduced_costs,
    _restricted,
)

__all__ = ["least_move"]

Array = npt.NDArray[np.float64]

#: Latency may exceed stage 2's optimum by this, relative: HiGHS's own tolerance. Stage 2's
#: optimum is itself off by ~1e-8 (row sums, a -8e-9 entry), and with a slack of 1e-9 a
#: tie broken only by that noise was missed (hypothesis: 2 PoPs swapped, 80% moved). The
#: slivers the slack lets stage 3 keep are what ``MIN_GAIN`` ignores.
LATENCY_SLACK = 1e-7
#: Stage 3's table replaces stage 2's only if it keeps more than this share of the traffic.
MIN_GAIN = 1e-6
#: A column's current movable share below this is not traffic to keep.
KEEP_EPS = 1e-12


def least_move(lp: LatencyLP, optimum: Array, keep: Array, weight: Array) -> Array:
    """The latency-optimal ``z`` that keeps most of ``keep``; ``optimum`` if HiGHS fails.

    ``keep`` is each column's current movable share and ``weight`` its PoP's demand
    (any positive scale); ``optimum`` is stage 2's solution.
    """
    import scipy.sparse as sp
    from scipy.optimize import linprog

    held = keep > KEEP_EPS
    if not held.any():
        return optimum
    usable = _optimal_columns(lp, optimum)
    if usable is None:
        return optimum
    cols = np.nonzero(usable)[0]
    twins = cols[held[cols]]
    if len(twins) == 0:
        return optimum
    both = np.concatenate([cols, twins])
    # HiGHS's optimum may dip below zero by its tolerance (-8e-9), which no table can match.
    best = float(lp.cost @ np.maximum(optimum, 0.0))
    # The latency row in units of the optimum, so HiGHS's absolute row tolerance means
    # the same (1e-7 of the optimum at most) whatever the costs' scale.
    unit = max(best, 1e-12 * float(np.abs(lp.cost).max()), 1e-300)
    latency = sp.csr_matrix(lp.cost[both][None, :] / unit)
    res = linprog(
        np.concatenate([np.zeros(len(cols)), -weight[twins] / max(float(weight.max()), 1e-300)]),
        A_ub=sp.vstack([lp.a_ub[:, both], latency], format="csc"),
        b_ub=np.concatenate([lp.b_ub, [best / unit * (1 + LATENCY_SLACK)]]),
        A_eq=lp.a_eq[:, both],
        b_eq=lp.b_eq,
        bounds=np.column_stack(
            [np.zeros(len(both)), np.concatenate([np.full(len(cols), np.inf), keep[twins]])]
        ),
        method="highs",
    )
    if res.status != 0:
        return optimum
    z = np.zeros_like(optimum)
    np.add.at(z, both, res.x)
    kept_before = weight @ np.minimum(np.maximum(optimum, 0.0), keep)
    kept_after = weight @ np.minimum(np.maximum(z, 0.0), keep)
    # Within HiGHS's tolerances stage 3 "keeps" slivers the caps' slack allows (2e-9 of a
    # PoP); those move nothing real, and a sliver can still round to a whole bucket.
    if kept_after - kept_before <= MIN_GAIN * float(weight @ keep):
        return optimum
    return z


def _optimal_columns(lp: LatencyLP, optimum: Array) -> npt.NDArray[np.bool_] | None:
    """The columns some latency-optimal table may use: those an optimal dual prices at
    zero (complementary slackness), found by column generation from the optimum's and
    the current columns until the duals price no column below zero. None if HiGHS fails."""
    cost = lp.cost / (float(np.abs(lp.cost).max()) or 1.0)
    in_set = lp.current | (optimum > KEEP_EPS)
    for _ in range(MAX_ROUNDS):
        res = _restricted(cost, lp, np.nonzero(in_set)[0], artificial=False)
        if res is None or res.status != 0:
            return None
        rc = _reduced_costs(cost, lp, res)
        enter = _entering(lp, rc, in_set)
        if len(enter) == 0:
            return np.asarray((rc <= RC_TOL) | (optimum > KEEP_EPS), dtype=bool)
        in_set[enter] = True
    return None
