"""From the optimum to the published table: damping, a bound on the max, skipped small moves.

Taiji aims for 80 % of the way to the optimum and skips shifts under 1 %, to
limit churn. Done blindly, either can publish a table worse than both the
current one and the optimum, or stop short of the optimum for good, so each
step here is held to the first objective:

1. *Damp*: a PoP whose current split breaks a per-PoP rule (traffic to a
   region that is not active, beyond its RTT limit) moves all the way; the
   others move ``damping`` of the way.
2. *Bound*: the damped table must meet every region cap and pin, and its max
   predicted utilization may not exceed ``max(current max, optimum's max)``.
   Mixing full and damped moves can break that (one PoP leaves a drained
   region in full and lands where another had only partly moved out). Every
   such bound is linear along the segment from the damped table to the
   optimum, and holds at the optimum, so the least step ``gamma`` toward it that
   meets them all is found in closed form (the max of linear utilizations is
   convex on the segment).
3. *Skip*: a PoP moving less than ``min_shift`` keeps its split, unless that
   would push some region above the bounded table's own max (or break a cap
   or pin), in which case the PoPs whose moves that region needs move after all.
   A skip therefore saves churn on latency-only moves but never costs the max,
   so epoch after epoch on the same demand the max keeps falling toward the
   long-run optimum instead of freezing short of it.
"""

from __future__ import annotations

import numpy as np

from orchestrator.policy.rebalance.lp import Array, Compiled, Mask
from orchestrator.policy.rebalance.model import Constraints

__all__ = ["CHECK_TOL", "publish", "row_ok"]

#: Tolerance of :func:`orchestrator.policy.rebalance.taiji.check` on fractions and utilizations.
CHECK_TOL = 1e-6


def row_ok(c: Compiled) -> Mask:
    """PoPs whose current split meets every per-PoP constraint (status, RTT limit).

    Sticky sessions on a region that is not active (drained while they were open)
    may stay there: only traffic beyond them breaks the status rule.
    """
    off_status = (c.x > c.floor + CHECK_TOL) & ~c.active[None, :]
    too_far = (c.x > c.floor + CHECK_TOL) & ~c.within
    return np.asarray(~(off_status | too_far).any(axis=1), dtype=bool)


def publish(c: Compiled, cons: Constraints, optimum: Array, caps: Array) -> tuple[Array, Mask]:
    """The table to publish and which PoPs kept their split (see the module docstring)."""
    ok = row_ok(c)
    floors = c.load_floors()
    tol = c.load_tol()
    bound = max(c.max_utilization(c.x), c.max_utilization(optimum))
    limit = _limit(c, caps, bound)
    beta = np.where(ok, cons.damping, 1.0)
    damped = _toward(c, c.x + beta[:, None] * (optimum - c.x), optimum, limit, floors, tol)
    limit = np.minimum(limit, _limit(c, caps, c.max_utilization(damped)))
    return _skip_small(c, cons.min_shift, ok, damped, limit, floors, tol)


def _limit(c: Compiled, caps: Array, max_util: float) -> Array:
    """Per region, the most load it may carry: its cap, and utilization ``max_util``."""
    return np.minimum(caps, c.util_to_load(np.full(len(c.regions), max_util)))


def _toward(
    c: Compiled, start: Array, end: Array, limit: Array, floors: Array, tol: Array
) -> Array:
    """``start + gamma * (end - start)`` with the least ``gamma`` in [0, 1] that meets
    every active region's ``limit`` and ``floors``; ``end`` meets them, and each is
    linear in ``gamma``, so each gives its own least ``gamma`` and the largest wins."""
    loads, full = c.t @ start, c.t @ end
    over = c.active & (loads > limit + tol)
    under = c.active & (loads < floors - tol)
    if not (over.any() or under.any()):
        return start
    change = np.concatenate([loads[over] - full[over], full[under] - loads[under]])
    miss = np.concatenate([loads[over] - limit[over], floors[under] - loads[under]])
    # A bound the end misses too (by the LP's tolerance) asks for all the way.
    ratio = np.divide(miss, change, out=np.full(len(change), np.inf), where=change > 0)
    gamma = min(1.0, float(ratio.max()) * (1 + 1e-9) + 1e-12)
    return start + gamma * (end - start)


def _skip_small(
    c: Compiled,
    min_shift: float,
    ok: Mask,
    damped: Array,
    limit: Array,
    floors: Array,
    tol: Array,
) -> tuple[Array, Mask]:
    moved = 0.5 * np.abs(damped - c.x).sum(axis=1)
    skipped = ok & (moved > 0) & (moved < min_shift)
    if not skipped.any():
        return damped, skipped
    table = np.where(skipped[:, None], c.x, damped)
    delta = c.t[:, None] * (damped - c.x)  # load each PoP's move brings to each region
    loads = c.t @ table
    # Each round un-skips at least one PoP (the damped table meets every bound, so a
    # region that misses one has a skipped PoP whose move helps it): it ends.
    while True:
        over = np.nonzero(c.active & (loads > limit + tol))[0]
        under = np.nonzero(c.active & (loads < floors - tol))[0]
        if len(over):
            d = int(over[np.argmax((loads[over] - limit[over]) / tol[over])])
            relief, excess = -delta[:, d], loads[d] - limit[d]
        elif len(under):
            d = int(under[np.argmax((floors[under] - loads[under]) / tol[under])])
            relief, excess = delta[:, d], floors[d] - loads[d]
        else:
            return table, skipped
        helps = np.nonzero(skipped & (relief > 0))[0]
        if len(helps) == 0:  # only float noise can get here: publish the damped table
            return damped, np.zeros_like(skipped)
        order = helps[np.argsort(-relief[helps], kind="stable")]
        count = int(np.searchsorted(np.cumsum(relief[order]), excess)) + 1
        chosen = order[:count]
        table[chosen] = damped[chosen]
        skipped[chosen] = False
        loads = loads + delta[chosen].sum(axis=0)
