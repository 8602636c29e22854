"""Taiji-style traffic rebalancing: PoP demand in, a damped routing table out.

``solve(instance) -> SolverResult`` is pure (no I/O, no clock) and deterministic.

Method, and why
---------------
Taiji's objectives are lexicographic: first the lowest maximum predicted
utilization, then the lowest ``sum x' * t_e * RTT^2``. Every constraint is
linear in the new fractions ``x'`` (the load model ``u'_d = u_d * L'_d / L_d``
is linear in load), so both stages are linear programs and we solve them
exactly with HiGHS instead of Taiji's "best single move" local search, which
only approaches the optimum in discrete steps and took 2.81 s at Meta's scale.

1. *min max utilization* (``taiji_lp.min_max_utilization``): PoPs that may use
   the same regions are interchangeable for this question, so they are merged;
   without RTT limits the LP is regions-sized whatever the number of PoPs.
2. *min latency* (``taiji_lp.min_latency``): a sparse transportation LP over
   the allowed (PoP, region) pairs with every region capped at the stage-1
   optimum plus 1e-9 relative (looser only if HiGHS needs it), built with ``scipy.sparse``
   and solved by column generation (``taiji_colgen``): from each PoP's nearest
   regions, adding the pairs the duals price below zero until none is left, which
   proves the full LP's optimum over a fraction of its 500,000 columns at 5,000 x 100.
3. *least move* (``taiji_stay.least_move``): stage 2 often has many optimal tables
   (PoPs at the same RTT from two regions), and HiGHS's vertex ignores the table in
   place; with latency held at stage 2's optimum, a third LP keeps as much current
   traffic where it is as it can (on an epoch of the HAProxy rig's tie, 2 PoPs 1 ms
   from both regions: 35% of the demand moved, 44% of one PoP's buckets, for a
   6.3-point share change; now 6.3%, all from one PoP, 13% of its buckets).

Stages rather than one weighted LP because a weight is either too small
(latency bleeds into the max) or so large it hurts HiGHS's tolerances; the
benchmark compares both (benchmarks/taiji.py).

Then the optimum is damped toward the current table (``taiji_damping``): PoPs
breaking a per-PoP rule move all the way, the others ``damping`` of the way,
then further toward the optimum as far as every cap, pin and the bound
``max utilization <= max(current max, optimum)`` need; moves under
``min_shift`` are skipped only where that costs no region its bound, so a
published table is never worse than both the current one and the optimum, and
repeated epochs converge to the optimum rather than freeze short of it.

Sticky sessions on a region that is no longer active stay there (they end on
their own); the rest of the fleet is rebalanced around them.

Finally :func:`check` re-verifies every invariant from the instance alone; a
table that fails it is never returned. Infeasible instances raise
:class:`~orchestrator.exceptions.Infeasible` naming the binding constraint (see
``taiji_feasibility``).
"""

from __future__ import annotations

import numpy as np

from orchestrator.exceptions import PolicyError
from orchestrator.models import RegionStatus
from orchestrator.policy.rebalance.buckets import assign_buckets, churn, min_churn
from orchestrator.policy.rebalance.damping import CHECK_TOL, publish, row_ok
from orchestrator.policy.rebalance.feasibility import (
    aggregate_check,
    diagnose_rtt,
    precheck,
    rtt_rows,
)
from orchestrator.policy.rebalance.lp import (
    Array,
    Compiled,
    Mask,
    compile_instance,
    min_latency,
    min_max_utilization,
)
from orchestrator.policy.rebalance.model import (
    Constraints,
    PopInput,
    PopOutcome,
    RegionInput,
    RegionOutcome,
    SolverInstance,
    SolverResult,
)

__all__ = [
    "Constraints",
    "PopInput",
    "RegionInput",
    "SolverInstance",
    "SolverResult",
    "check",
    "fraction_violations",
    "solve",
    "violations",
]


def solve(instance: SolverInstance, *, full_lp: bool = False) -> SolverResult:
    """The new routing table for one epoch; raises ``Infeasible`` when none exists.

    ``full_lp`` solves stage 2 over every (PoP, region) pair instead of by column
    generation: the same optimum, slower; kept so the benchmark can compare the two.
    """
    c = compile_instance(instance)
    precheck(c, instance)
    aggregate_check(c, instance)
    rtt_rows(c, instance)
    caps = c.load_caps()
    u_star = min_max_utilization(c, caps)
    if u_star is None:
        raise diagnose_rtt(c, caps)
    optimum = None
    for slack in (1e-9, 1e-6, 1e-4):
        optimum = min_latency(c, caps, u_star + slack * max(1.0, abs(u_star)), full=full_lp)
        if optimum is not None:
            break
    if optimum is None:
        raise PolicyError("HiGHS found no latency-optimal table although stage 1 found one")
    _place_idle_pops(c, optimum)
    table, skipped = publish(c, instance.constraints, optimum, caps)
    # The optimum's own max, not stage 1's value: the two agree to the LP's tolerance, and
    # this one is a table that exists, so "never worse than the optimum" is checkable.
    result = _result(instance, c, table, skipped, c.max_utilization(optimum))
    problems = violations(instance, result)
    if problems:
        raise PolicyError("the solver's table breaks an invariant: " + "; ".join(problems[:3]))
    return result


def _place_idle_pops(c: Compiled, table: Array) -> None:
    """PoPs the LP left out: no demand, or nothing movable. Their split moves no load."""
    placed = table.sum(axis=1)
    ok = row_ok(c)
    for i in np.nonzero(placed < 1.0 - 1e-12)[0]:
        if ok[i]:
            table[i] = c.x[i]
            continue
        rest = 1.0 - placed[i]
        options = np.nonzero(c.allowed[i])[0]
        if len(options) == 0:
            # Only floors are left (precheck refused a movable share with nowhere to go).
            table[i] = c.floor[i] / max(float(c.floor[i].sum()), 1e-300)
            continue
        nearest = options[np.argmin(c.rtt[i, options])]
        table[i, nearest] += rest


def _latency(c: Compiled, table: Array) -> float:
    return float((c.t[:, None] * table * c.rtt**2).sum())


def _result(
    instance: SolverInstance, c: Compiled, table: Array, skipped: Mask, u_star: float
) -> SolverResult:
    total = c.total
    before, after = c.predicted(c.x), c.predicted(table)
    util_caps = np.minimum(c.target_cap, c.ramp_cap)
    share_before = c.t @ c.x / total if total > 0 else np.zeros(len(c.regions))
    share_after = c.t @ table / total if total > 0 else np.zeros(len(c.regions))
    regions = [
        RegionOutcome(
            name=r.name,
            status=r.status,
            utilization_before=float(c.u[j]),
            utilization_after=float(after[j]),
            utilization_cap=float(util_caps[j]) if r.status is RegionStatus.ACTIVE else 0.0,
            share_before=float(share_before[j]),
            share_after=float(share_after[j]),
        )
        for j, r in enumerate(instance.regions)
    ]
    pops: list[PopOutcome] = []
    fractions: dict[str, dict[str, float]] = {}
    churn_total = min_total = 0
    with_buckets = False
    moved = 0.5 * np.abs(table - c.x).sum(axis=1)
    for i, pop in enumerate(instance.pops):
        row = {c.regions[j]: float(table[i, j]) for j in np.nonzero(table[i] > 0)[0]}
        fractions[pop.name] = row
        outcome = PopOutcome(
            name=pop.name, fractions=row, moved=float(moved[i]), skipped=bool(skipped[i])
        )
        if pop.buckets is not None:
            with_buckets = True
            new = assign_buckets(row, len(pop.buckets), pop.buckets)
            outcome.buckets = new
            outcome.churn = churn(pop.buckets, new)
            outcome.min_churn = min_churn(pop.buckets, row)
            churn_total += outcome.churn
            min_total += outcome.min_churn
        pops.append(outcome)
    active_after = after[c.active]
    return SolverResult(
        fractions=fractions,
        regions=regions,
        pops=pops,
        optimal_max_utilization=u_star,
        max_utilization=float(active_after.max()),
        max_utilization_before=float(before[c.active].max()),
        latency_cost=_latency(c, table),
        latency_cost_before=_latency(c, c.x),
        traffic_moved=float(c.t @ moved),
        traffic_moved_share=float(c.t @ moved / total) if total > 0 else 0.0,
        skipped_pops=[c.pops[i] for i in np.nonzero(skipped)[0]],
        churn=churn_total if with_buckets else None,
        min_churn=min_total if with_buckets else None,
    )


def violations(instance: SolverInstance, result: SolverResult) -> list[str]:
    """Every invariant ``result`` breaks for ``instance``, recomputed from the instance alone.

    Checks: every PoP present with shares in [0, 1] summing to 1; regions that
    are not active at 0 and at least one active region serving; sticky floors
    kept; nothing new beyond an RTT limit; predicted utilization within the
    target (scaled by any capacity fraction) and the per-epoch ramp; shares
    within their caps and at least their pins; buckets, when present, the right length and only on
    regions with traffic.
    """
    problems = fraction_violations(instance, result.fractions)
    outcomes = {o.name: o for o in result.pops}
    for pop in instance.pops:
        outcome = outcomes.get(pop.name)
        if outcome is None or outcome.buckets is None or pop.buckets is None:
            continue
        if len(outcome.buckets) != len(pop.buckets):
            problems.append(
                f"buckets.{pop.name}: {len(outcome.buckets)} buckets, not {len(pop.buckets)}"
            )
        served = {r for r, s in result.fractions[pop.name].items() if s > 0}
        stray = sorted(set(outcome.buckets) - served)
        if stray:
            problems.append(f"buckets.{pop.name}: buckets on {stray[0]}, which gets no share")
    return problems


def fraction_violations(
    instance: SolverInstance, fractions: dict[str, dict[str, float]]
) -> list[str]:
    """Every invariant a ``pop -> region -> fraction`` table breaks for ``instance``."""
    c = compile_instance(instance)
    col = {name: j for j, name in enumerate(c.regions)}
    problems: list[str] = []
    table = np.zeros_like(c.x)
    if set(fractions) != set(c.pops):
        missing = sorted(set(c.pops) ^ set(fractions))
        return [f"fractions: PoPs {missing[:3]} missing or unknown"]
    for row, name in enumerate(c.pops):
        for region, share in fractions[name].items():
            if region not in col:
                problems.append(f"fractions.{name}: unknown region {region}")
                continue
            if not -CHECK_TOL <= share <= 1 + CHECK_TOL:
                problems.append(f"fractions.{name}.{region}: {share} outside [0, 1]")
            table[row, col[region]] = share
    sums = table.sum(axis=1)
    for i in np.nonzero(np.abs(sums - 1.0) > CHECK_TOL)[0]:
        problems.append(f"fractions.{c.pops[i]}: sums to {sums[i]:.9f}")
    off = (table > c.floor + CHECK_TOL) & ~c.active[None, :]
    for i, j in zip(*np.nonzero(off), strict=True):
        problems.append(f"fractions.{c.pops[i]}.{c.regions[j]}: region is not active")
    # (Unless every PoP's traffic is sticky sessions on regions that are not active.)
    if (c.movable > CHECK_TOL).any() and not (table[:, c.active] > CHECK_TOL).any():
        problems.append("fractions: no active region serves any traffic")
    for i, j in zip(*np.nonzero(table < c.floor - CHECK_TOL), strict=True):
        problems.append(f"fractions.{c.pops[i]}.{c.regions[j]}: below its sticky floor")
    far = (table > c.floor + CHECK_TOL) & ~c.within
    for i, j in zip(*np.nonzero(far), strict=True):
        problems.append(f"fractions.{c.pops[i]}.{c.regions[j]}: beyond the RTT limit")
    util = c.predicted(table)
    for j in np.nonzero(c.active & (util > c.target_cap + CHECK_TOL))[0]:
        problems.append(f"utilization.{c.regions[j]}: {util[j]:.6f} over {c.target_cap[j]:.6f}")
    for j in np.nonzero(c.active & (util > c.ramp_cap + CHECK_TOL))[0]:
        problems.append(f"ramp.{c.regions[j]}: {util[j]:.6f} rises above {c.ramp_cap[j]:.6f}")
    if c.total > 0:
        shares = c.t @ table / c.total
        # A region that is not active keeps only its sticky sessions, whatever its cap.
        share_cap = np.where(
            c.active, c.share_cap, np.maximum(c.share_cap, c.t @ c.floor / c.total)
        )
        for j in np.nonzero(shares > share_cap + CHECK_TOL)[0]:
            problems.append(f"max_share.{c.regions[j]}: {shares[j]:.6f} over {c.share_cap[j]}")
        for j in np.nonzero(shares < c.share_floor - CHECK_TOL)[0]:
            problems.append(
                f"pin_share.{c.regions[j]}: {shares[j]:.6f} under {c.share_floor[j]:.6f}"
            )
    return problems


def check(instance: SolverInstance, result: SolverResult) -> None:
    """Raise ``PolicyError`` listing what ``result`` breaks; the last gate before publishing."""
    problems = violations(instance, result)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise PolicyError("invariant broken: " + "; ".join(problems[:5]) + more)
