"""The Taiji solver's input and output: one instance in, one result out, both pydantic.

An instance is everything one epoch of the rebalancer knows: per PoP its demand,
current fractions, RTT to every region and the share pinned by established
sticky sessions; per region its capacity, measured utilization, status and any
operator override; and the constraints. Validation refuses an inconsistent
instance with a message that names the field (``pops.edge-3.fractions: ...``),
so the solver itself only ever sees consistent numbers.

Load units are the caller's (rps, sessions): PoP ``demand`` and region
``capacity`` must use the same unit. The JSON form is documented in
``docs/rebalance-instance.md``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from orchestrator.models import Fraction, RegionStatus, StrictModel

__all__ = [
    "SUM_TOLERANCE",
    "Constraints",
    "PopInput",
    "PopOutcome",
    "RegionInput",
    "RegionOutcome",
    "SolverInstance",
    "SolverResult",
]

#: Fractions of one PoP must sum to 1 within this; floors may exceed current by this.
SUM_TOLERANCE = 1e-6

#: Bounds far beyond any real fleet: past them a number is a unit mistake, and the
#: latency cost (load x RTT^2) would overflow a float. Infinity and NaN are refused.
MAX_LOAD = 1e12
MAX_RTT_MS = 1e6
MAX_UTILIZATION = 1e6

Load = Annotated[float, Field(ge=0.0, le=MAX_LOAD, allow_inf_nan=False)]
Rtt = Annotated[float, Field(ge=0.0, le=MAX_RTT_MS, allow_inf_nan=False)]
RttLimit = Annotated[float, Field(gt=0.0, le=MAX_RTT_MS, allow_inf_nan=False)]


class RegionInput(StrictModel):
    """A region as the solver sees it."""

    name: str = Field(min_length=1)
    #: load (same unit as PoP demand) the region serves at utilization 1
    capacity: Load
    #: measured utilization now (1.0 = at capacity); 0 with load on the region counts as no
    #: reading, and the solver uses load / capacity instead
    utilization: Annotated[float, Field(ge=0.0, le=MAX_UTILIZATION, allow_inf_nan=False)]
    status: RegionStatus = RegionStatus.ACTIVE
    #: override: at most this share of the total demand may go here
    max_share: Fraction | None = None
    #: override: at least this share of the total demand goes here (a load test's pin is
    #: ``min_share == max_share``); refused as ``Infeasible("pin_share", ...)`` if it cannot be
    min_share: Fraction | None = None
    #: override: only this fraction of the region's capacity may be used
    capacity_fraction: Fraction | None = None


class PopInput(StrictModel):
    """An edge PoP: where users arrive, and how its traffic is split now."""

    name: str = Field(min_length=1)
    #: load arriving at this PoP (same unit as region capacity)
    demand: Load
    #: region -> round-trip time in ms; every region must be listed
    rtt_ms: dict[str, Rtt]
    #: region -> current share of this PoP's traffic; sums to 1
    fractions: dict[str, Fraction]
    #: region -> share held by established sticky sessions; it cannot move this epoch, and it
    #: stays even on a drained or abnormal region (which gets nothing else)
    sticky: dict[str, Fraction] = Field(default_factory=dict)
    #: this PoP may send new traffic only to regions within this RTT
    rtt_limit_ms: RttLimit | None = None
    #: current bucket -> region list; when given, the result maps the new fractions onto it
    buckets: list[str] | None = None


class Constraints(StrictModel):
    """Limits every new table must respect, and the dampening of each move."""

    #: per epoch, a region's predicted utilization may rise at most this much
    max_utilization_increase: float = Field(default=0.04, gt=0.0, allow_inf_nan=False)
    #: no region's predicted utilization may exceed this
    target_utilization: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    #: no region may receive more than this share of the total demand
    max_share: Fraction | None = None
    #: default RTT limit for PoPs that do not set their own
    rtt_limit_ms: RttLimit | None = None
    #: a PoP whose traffic would move less than this share keeps its current split, unless a
    #: cap or pin needs the move or keeping it would raise a region above the damped max
    min_shift: float = Field(default=0.01, ge=0.0, lt=1.0)
    #: move this share of the way from the current table to the optimum
    damping: float = Field(default=0.8, gt=0.0, le=1.0)


class SolverInstance(StrictModel):
    """One epoch's input to :func:`orchestrator.policy.rebalance.taiji.solve`."""

    regions: list[RegionInput] = Field(min_length=1)
    pops: list[PopInput] = Field(min_length=1)
    constraints: Constraints = Field(default_factory=Constraints)

    @model_validator(mode="after")
    def _consistent(self) -> SolverInstance:
        names = [r.name for r in self.regions]
        _unique("regions", names)
        _unique("pops", [p.name for p in self.pops])
        known = set(names)
        for region in self.regions:
            if region.status is RegionStatus.ACTIVE and region.capacity <= 0:
                raise ValueError(
                    f"regions.{region.name}.capacity: an active region needs a positive capacity"
                )
        for pop in self.pops:
            _check_pop(pop, known)
        return self

    def region_names(self) -> list[str]:
        return [r.name for r in self.regions]

    def rtt_limit(self, pop: PopInput) -> float | None:
        """The RTT limit that applies to ``pop``: its own, else the instance default."""
        return pop.rtt_limit_ms if pop.rtt_limit_ms is not None else self.constraints.rtt_limit_ms


def _unique(field: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{field}: duplicate name {name!r}")
        seen.add(name)


def _check_pop(pop: PopInput, known: set[str]) -> None:
    where = f"pops.{pop.name}"
    for field, mapping in (("rtt_ms", pop.rtt_ms), ("fractions", pop.fractions)):
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ValueError(f"{where}.{field}: unknown region {unknown[0]!r}")
    missing = sorted(known - set(pop.rtt_ms))
    if missing:
        raise ValueError(f"{where}.rtt_ms: no RTT for region {missing[0]!r}")
    total = sum(pop.fractions.values())
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ValueError(f"{where}.fractions: shares sum to {total:.6f}, not 1")
    for region, floor in pop.sticky.items():
        if region not in known:
            raise ValueError(f"{where}.sticky: unknown region {region!r}")
        if floor > pop.fractions.get(region, 0.0) + SUM_TOLERANCE:
            raise ValueError(
                f"{where}.sticky.{region}: {floor:.6f} exceeds the current fraction "
                f"{pop.fractions.get(region, 0.0):.6f} (sticky sessions are current traffic)"
            )
    if pop.buckets is not None:
        if not pop.buckets:
            raise ValueError(f"{where}.buckets: must not be empty")
        unknown = sorted(set(pop.buckets) - known)
        if unknown:
            raise ValueError(f"{where}.buckets: unknown region {unknown[0]!r}")


class RegionOutcome(StrictModel):
    """One region before and after the move."""

    name: str
    status: RegionStatus
    #: utilization now: the measured one, or load / capacity where a loaded region reads 0
    utilization_before: float
    #: predicted utilization under the new table (Taiji's u'_d)
    utilization_after: float
    #: the highest utilization the constraints allowed this epoch
    utilization_cap: float
    #: share of the total demand routed here, now and after
    share_before: float
    share_after: float


class PopOutcome(StrictModel):
    """One PoP's new split and what moving to it costs."""

    name: str
    #: region -> new fraction (regions at 0 omitted); sums to 1
    fractions: dict[str, float]
    #: share of this PoP's traffic that changes region
    moved: float
    #: True when the move was under ``min_shift`` and the PoP kept its split
    skipped: bool = False
    #: new bucket -> region list, when current buckets were given
    buckets: list[str] | None = None
    #: buckets that changed region, and the fewest any realisation of the new split needs
    churn: int | None = None
    min_churn: int | None = None


class SolverResult(StrictModel):
    """The new routing table and everything an operator wants to know about it."""

    #: pop -> region -> fraction (regions at 0 omitted); each PoP sums to 1
    fractions: dict[str, dict[str, float]]
    regions: list[RegionOutcome]
    pops: list[PopOutcome]
    #: the lowest achievable max utilization over active regions: the max of the optimal
    #: (undamped) table, equal to the LP's optimum within its tolerance
    optimal_max_utilization: float
    #: the max predicted utilization over active regions of the published (damped) table;
    #: never above max(max_utilization_before, optimal_max_utilization)
    max_utilization: float
    max_utilization_before: float
    #: sum over PoPs and regions of fraction * demand * RTT^2 (ms^2 x load units)
    latency_cost: float
    latency_cost_before: float
    #: load that changes region, and the same as a share of the total demand
    traffic_moved: float
    traffic_moved_share: float
    #: PoPs whose move was under ``min_shift`` and that kept their split
    skipped_pops: list[str] = Field(default_factory=list)
    #: total buckets moved and the minimum possible, when current buckets were given
    churn: int | None = None
    min_churn: int | None = None
