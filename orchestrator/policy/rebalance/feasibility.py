"""Which constraint makes a Taiji instance infeasible, and how to relax it.

Constraints are checked as a ladder, each rung adding one family to the ones
below it::

    status -> capacity -> max_share -> pin_share -> ramp -> rtt_limit

The name an :class:`~orchestrator.exceptions.Infeasible` carries is the first
rung that fails: the instance with that family and every later one removed
(:func:`relax`) has a table, and with it added it has none. Up to ``ramp`` no
PoP is limited in where it may send traffic, so feasibility is an aggregate
test with no LP: every region's least load (its sticky sessions, or its pinned
share when larger) fits its cap, the least loads fit in the demand, and the
caps add up to the demand that active regions must carry (all of it but the
sticky sessions left on a drained region, which stay there). RTT limits make
it a bipartite question; there the LP decides, and the message names a group
of PoPs whose reachable regions are too small (a Hall violation) when one of
the simple shape is found.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from orchestrator.exceptions import Infeasible, InvalidInstance
from orchestrator.policy.rebalance.lp import Array, Compiled
from orchestrator.policy.rebalance.model import SolverInstance

__all__ = ["LADDER", "ConstraintName", "aggregate_check", "diagnose_rtt", "precheck", "relax"]

ConstraintName = Literal["capacity", "max_share", "pin_share", "ramp", "rtt_limit"]
LADDER: tuple[ConstraintName, ...] = ("capacity", "max_share", "pin_share", "ramp", "rtt_limit")

#: Relative slack on aggregate comparisons, so float noise never decides feasibility.
REL_TOL = 1e-9
#: A ramp this large constrains nothing.
NO_RAMP = 1e9
#: An active region whose load per unit of utilization is below this share of the total
#: demand is refused. A PoP's shares are floats that sum to 1, each known to ~2e-16, which
#: such a region feels as ~2e-16 / share of utilization: 2e-7 here, well inside the 1e-6
#: that ``check`` allows, and past it a region at its cap would fail the check.
MIN_REGION_SCALE = 1e-9


def precheck(c: Compiled, instance: SolverInstance) -> None:
    """Row-level contradictions no amount of capacity can fix.

    Sticky sessions on a drained or abnormal region are not one: they stay there
    until they end, and the rest of the traffic is rebalanced around them.
    """
    if not c.active.any():
        raise Infeasible("status", "every region is drained or abnormal; at least one must serve")
    # 1e-6 relative slack: a region at exactly the limit is accepted.
    tiny = np.nonzero(c.active & (c.k * c.total * MIN_REGION_SCALE > 1.0 + 1e-6))[0]
    if len(tiny):
        j = int(tiny[0])
        raise InvalidInstance(
            f"regions.{c.regions[j]}.capacity: {1.0 / c.k[j]:.3g} load per unit of utilization "
            f"is {1.0 / (c.k[j] * c.total):.2g} of the total demand {c.total:.3g}, under the "
            f"{MIN_REGION_SCALE:g} the solver can place accurately; check the units, or drain it"
        )
    pinned_off = np.nonzero((c.share_floor > 0) & ~c.active)[0]
    if len(pinned_off):
        j = int(pinned_off[0])
        raise Infeasible(
            "pin_share",
            f"region {c.regions[j]} is {instance.regions[j].status.value} and cannot be pinned "
            f"to {c.share_floor[j]:.2%} of the demand",
        )


def _caps_for(c: Compiled, level: ConstraintName) -> Array:
    rung = LADDER.index(level)
    return c.load_caps(
        target=True, share=rung >= LADDER.index("max_share"), ramp=rung >= LADDER.index("ramp")
    )


def aggregate_check(c: Compiled, instance: SolverInstance) -> None:
    """Capacity, share caps and ramp, ignoring RTT limits: exact without them."""
    total = c.total
    if total <= 0:
        return
    pinned = c.t @ c.floor
    floors = c.load_floors()
    tol = c.load_tol(REL_TOL)
    # Sessions left on a region that is not active stay there: the rest must fit the others.
    to_place = total - float(pinned[~c.active].sum())
    target = instance.constraints.target_utilization
    for level in LADDER[:-1]:
        caps = _caps_for(c, level)
        with_pins = LADDER.index(level) >= LADDER.index("pin_share")
        need = np.maximum(pinned, floors) if with_pins else pinned
        over = np.nonzero(c.active & (need > caps + tol))[0]
        if len(over):
            j = int(over[0])
            what = (
                f"the pinned share puts {need[j] / total:.2%} of the demand on region"
                if with_pins and floors[j] > pinned[j]
                else f"established sessions pin {pinned[j] / total:.2%} of the demand to region"
            )
            raise Infeasible(
                level,
                f"{what} {c.regions[j]}, above the {_limit_text(level, instance)} limit of "
                f"{caps[j] / total:.2%}",
            )
        if with_pins and need.sum() > total * (1 + REL_TOL):
            raise Infeasible(
                level,
                f"pinned shares and established sessions need {need.sum() / total:.2%} "
                f"of the demand; at most 100% can be placed",
            )
        room = float(caps[c.active].sum())
        if room >= to_place - REL_TOL * total:
            continue
        if level == "capacity":
            detail = (
                f"total demand is {to_place / room:.2f}x the capacity of active regions "
                f"at target {target:g}"
                if room > 0
                else f"active regions have no capacity left at target {target:g}"
            )
        elif level in ("max_share", "pin_share"):
            detail = f"share caps let the active regions take only {room / total:.2%} of demand"
        else:
            ramp = instance.constraints.max_utilization_increase
            detail = (
                f"at most +{ramp:g} utilization per region this epoch lets the active regions "
                f"take {room / total:.2%} of the demand; shift over several epochs or "
                f"raise max_utilization_increase"
            )
        raise Infeasible(level, detail)


def _limit_text(level: ConstraintName, instance: SolverInstance) -> str:
    if level == "capacity":
        return f"target {instance.constraints.target_utilization:g}"
    if level == "ramp":
        return f"+{instance.constraints.max_utilization_increase:g} per epoch"
    if level == "pin_share":
        return f"target {instance.constraints.target_utilization:g} and share cap"
    return "share cap"


def rtt_rows(c: Compiled, instance: SolverInstance) -> None:
    """A PoP with traffic to place and no active region within its RTT limit."""
    stranded = np.nonzero((c.movable > 1e-12) & ~c.allowed.any(axis=1))[0]
    if len(stranded):
        i = int(stranded[0])
        limit = instance.rtt_limit(instance.pops[i])
        raise Infeasible("rtt_limit", f"pop {c.pops[i]} has no active region within {limit:g} ms")


def diagnose_rtt(c: Compiled, caps: Array) -> Infeasible:
    """Explain why the full LP has no solution once the aggregate checks passed.

    Looks for PoPs that can reach only regions inside one allowed set S while
    their movable load exceeds the room left in S. Only sets some PoP actually
    has are tried, so a violation spanning several sets gets the general text.
    """
    total = c.total
    room = caps - c.t @ c.floor
    need = c.t * c.movable
    allowed = c.allowed
    worst: tuple[float, int] | None = None
    seen: set[bytes] = set()
    for i in np.nonzero(need > 0)[0]:
        key = allowed[i].tobytes()
        if key in seen:
            continue
        seen.add(key)
        inside = ~(allowed & ~allowed[i][None, :]).any(axis=1)
        excess = float(need[inside].sum() - room[allowed[i]].sum())
        if excess > REL_TOL * total and (worst is None or excess > worst[0]):
            worst = (excess, int(i))
    if worst is None:
        return Infeasible(
            "rtt_limit",
            "the regions within the PoPs' RTT limits cannot take their demand at the caps",
        )
    row = worst[1]
    inside = ~(allowed & ~allowed[row][None, :]).any(axis=1) & (need > 0)
    names = [c.pops[p] for p in np.nonzero(inside)[0]]
    regions = [c.regions[d] for d in np.nonzero(allowed[row])[0]]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return Infeasible(
        "rtt_limit",
        f"pops {shown} reach only {', '.join(regions)} within their RTT limits, "
        f"which can take {room[allowed[row]].sum() / total:.2%} of the demand but they send "
        f"{need[inside].sum() / total:.2%}",
    )


def relax(instance: SolverInstance, constraint: ConstraintName) -> SolverInstance:
    """The instance without ``constraint`` and every constraint after it on the ladder."""
    rung = LADDER.index(constraint)
    cons = instance.constraints
    cons_update: dict[str, object] = {"rtt_limit_ms": None}
    pops = [p.model_copy(update={"rtt_limit_ms": None}) for p in instance.pops]
    regions = list(instance.regions)
    if rung <= LADDER.index("ramp"):
        cons_update["max_utilization_increase"] = NO_RAMP
    if rung <= LADDER.index("pin_share"):
        regions = [r.model_copy(update={"min_share": None}) for r in regions]
    if rung <= LADDER.index("max_share"):
        cons_update["max_share"] = None
        regions = [r.model_copy(update={"max_share": None}) for r in regions]
    if rung <= LADDER.index("capacity"):
        cons_update["target_utilization"] = NO_RAMP
        regions = [r.model_copy(update={"capacity_fraction": None}) for r in regions]
    return instance.model_copy(
        update={
            "constraints": cons.model_copy(update=cons_update),
            "pops": pops,
            "regions": regions,
        }
    )
