"""Stage 2 of the Taiji solver by column generation: the same optimum, a smaller LP.

The latency LP has one column per allowed (PoP, region) pair: 500,000 at 5,000
PoPs x 100 regions, and HiGHS spends most of a solve on them although an optimal
table sends each PoP to a few nearby regions. So the LP is solved over a subset
of columns: to start with, each PoP's ``k`` nearest allowed regions by RTT and the
regions it uses now. The restricted LP's duals price every column left out
(reduced cost ``c_j - A_j^T y``); the columns with a negative reduced cost join,
and the LP is solved again, until none is left. Then no column outside the
subset can lower the objective: the restricted optimum is the full LP's optimum
(the simplex optimality condition), proven, not approximated.

A restricted LP can be infeasible where the full one is not (the stage-1
optimum leaves no slack, and the nearest regions may not reach it). Then a
phase 1 runs first: every region row gets an artificial slack, the LP minimizes
their sum, and columns are priced on its duals until the slacks reach zero,
which gives a feasible column set for phase 2. If phase 1 cannot reach zero
the full LP is infeasible too (the same optimality argument).

Anything HiGHS does not solve cleanly falls back to the full LP, so this is never
less able than it: only faster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = ["K_NEAREST", "LatencyLP", "solve_colgen", "solve_full"]

Array = npt.NDArray[np.float64]
Index = npt.NDArray[np.intp]

#: Regions per PoP in the first restricted LP (plus the regions it uses now).
K_NEAREST = 6
#: Reduced cost, relative to the largest cost, below which a column joins.
RC_TOL = 1e-9
#: Phase-1 slack sum (in row units) taken as zero.
PHASE1_TOL = 1e-10
#: Columns a PoP may gain per pricing round.
PER_ROW = 2
#: Pricing rounds before giving up and solving the full LP (never reached in practice).
MAX_ROUNDS = 100


@dataclass(frozen=True)
class LatencyLP:
    """``min cost @ z  s.t.  a_ub z <= b_ub, a_eq z = b_eq, z >= 0`` over every allowed pair.

    ``row`` is each column's equality row (its PoP among the solving ones), ``rtt``
    its RTT and ``current`` whether the PoP sends that region traffic now: the
    two decide the first column subset.
    """

    cost: Array
    a_ub: sp.csc_matrix
    b_ub: Array
    a_eq: sp.csc_matrix
    b_eq: Array
    row: Index
    rtt: Array
    current: npt.NDArray[np.bool_]


def solve_full(lp: LatencyLP) -> Array | None:
    """The LP over every column (the reference, and the fallback)."""
    from scipy.optimize import linprog

    res = linprog(
        lp.cost,
        A_ub=lp.a_ub,
        b_ub=lp.b_ub,
        A_eq=lp.a_eq,
        b_eq=lp.b_eq,
        bounds=(0, None),
        method="highs",
    )
    return res.x if res.status == 0 else None


def initial_columns(lp: LatencyLP, k: int) -> Index:
    """Per equality row, the ``k`` columns of least RTT, plus the columns in use now."""
    order = np.lexsort((lp.rtt, lp.row))  # by row, then RTT
    rows = lp.row[order]
    starts = np.searchsorted(rows, rows, side="left")
    rank = np.arange(len(order)) - starts
    chosen = np.zeros(len(order), dtype=bool)
    chosen[order[rank < k]] = True
    chosen |= lp.current
    return np.nonzero(chosen)[0]


def solve_colgen(lp: LatencyLP, k: int = K_NEAREST) -> Array | None:
    """The full LP's optimum by column generation; None when the full LP is infeasible."""
    n = len(lp.cost)
    if n == 0:
        return np.zeros(0)
    scale = float(np.abs(lp.cost).max()) or 1.0
    cost = lp.cost / scale  # tolerances then mean the same at every size
    cols = initial_columns(lp, k)
    in_set = np.zeros(n, dtype=bool)
    in_set[cols] = True
    res = _restricted(cost, lp, cols, artificial=False)
    if res is None:
        return solve_full(lp)
    if res.status == 2:  # infeasible over these columns: phase 1 finds columns that are not
        found = _phase1(lp, in_set)
        if found is None:
            return solve_full(lp)
        if not found:
            return None
        res = _restricted(cost, lp, np.nonzero(in_set)[0], artificial=False)
    for _ in range(MAX_ROUNDS):
        if res is None or res.status != 0:
            return solve_full(lp)
        rc = _reduced_costs(cost, lp, res)
        enter = _entering(lp, rc, in_set)
        if len(enter) == 0:
            z = np.zeros(n)
            z[np.nonzero(in_set)[0]] = res.x
            return z
        in_set[enter] = True
        res = _restricted(cost, lp, np.nonzero(in_set)[0], artificial=False)
    return solve_full(lp)


def _phase1(lp: LatencyLP, in_set: npt.NDArray[np.bool_]) -> bool | None:
    """Grow ``in_set`` until the restricted LP is feasible.

    True when it is, False when no column can make it so (the full LP is
    infeasible), None when HiGHS failed (the caller solves the full LP).
    """
    zero = np.zeros(len(lp.cost))
    for _ in range(MAX_ROUNDS):
        res = _restricted(zero, lp, np.nonzero(in_set)[0], artificial=True)
        if res is None or res.status != 0:
            return None
        if res.fun <= PHASE1_TOL:
            return True
        rc = _reduced_costs(zero, lp, res)
        enter = _entering(lp, rc, in_set)
        if len(enter) == 0:
            return False
        in_set[enter] = True
    return None


def _entering(lp: LatencyLP, rc: Array, in_set: npt.NDArray[np.bool_]) -> Index:
    """Columns priced below zero, at most ``PER_ROW`` per PoP (the most negative).

    Taking every negative column at once can add most of the LP in one round
    (measured: 93,000 of 500,000 columns after a phase 1 from ``k`` = 2, making the
    next solves slower than the full LP); a few per PoP is what a PoP can use.
    """
    enter = np.nonzero((rc < -RC_TOL) & ~in_set)[0]
    if len(enter) == 0:
        return enter
    order = enter[np.lexsort((rc[enter], lp.row[enter]))]  # by row, then reduced cost
    rows = lp.row[order]
    rank = np.arange(len(order)) - np.searchsorted(rows, rows, side="left")
    return order[rank < PER_ROW]


class _Solved:
    """What pricing needs from a restricted solve: status, x, objective, duals."""

    def __init__(self, status: int, x: Array, fun: float, y_ub: Array, y_eq: Array) -> None:
        self.status, self.x, self.fun, self.y_ub, self.y_eq = status, x, fun, y_ub, y_eq


def _restricted(cost: Array, lp: LatencyLP, cols: Index, *, artificial: bool) -> _Solved | None:
    """The LP over ``cols``; with ``artificial``, every ``<=`` row gets a slack of cost 1."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    a_ub = lp.a_ub[:, cols]
    a_eq = lp.a_eq[:, cols]
    c = cost[cols]
    n_ub = a_ub.shape[0]
    if artificial:
        a_ub = sp.hstack([a_ub, -sp.eye(n_ub, format="csc")], format="csc")
        a_eq = sp.hstack([a_eq, sp.csc_matrix((a_eq.shape[0], n_ub))], format="csc")
        c = np.concatenate([c, np.ones(n_ub)])
    res = linprog(
        c,
        A_ub=a_ub if n_ub else None,
        b_ub=lp.b_ub if n_ub else None,
        A_eq=a_eq,
        b_eq=lp.b_eq,
        bounds=(0, None),
        method="highs",
    )
    if res.status == 2:
        return _Solved(2, np.zeros(0), np.inf, np.zeros(0), np.zeros(0))
    if res.status != 0:
        return None
    y_ub = res.ineqlin.marginals if n_ub else np.zeros(0)
    return _Solved(0, res.x[: len(cols)], float(res.fun), y_ub, res.eqlin.marginals)


def _reduced_costs(cost: Array, lp: LatencyLP, res: _Solved) -> Array:
    """``c - A_ub^T y_ub - A_eq^T y_eq`` for every column (HiGHS's marginals are the duals)."""
    rc = cost - lp.a_eq.T @ res.y_eq
    if len(res.y_ub):
        rc = rc - lp.a_ub.T @ res.y_ub
    return np.asarray(rc, dtype=float)
