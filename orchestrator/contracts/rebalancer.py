"""Inputs, state and answers of TrafficRebalanceWorkflow (one model per run, update and query)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from orchestrator.models import Fraction
from orchestrator.policy.rebalance.inputs import FleetView, Override
from orchestrator.policy.rebalance.model import Constraints

__all__ = [
    "ClearOverrideInput",
    "EpochRecord",
    "OverrideApplied",
    "OverrideTicket",
    "PendingOverride",
    "PauseInput",
    "RebalancerIncidents",
    "RebalancerInput",
    "RebalancerState",
    "RebalancerStatus",
    "ResumeInput",
    "RoutingWriter",
    "SetOverrideInput",
    "StopInput",
    "hold_memo",
    "holds_from_memo",
]

REBALANCER_ID = "rebalancer"
#: epochs kept in state for the status query; older ones are in the run history. Enough to
#: chart a drain's traffic share at lab epoch lengths (``orchestrator report``). A record is
#: ~350 bytes plus ~60 per region (measured): 120 of 50 regions are ~400 KB of the state
#: carried through continue-as-new, under Temporal's 2 MB payload limit
KEPT_EPOCHS = 120
#: settled override tickets kept for their owners to read (the ``override_ticket`` query).
#: An owner reads its ticket within seconds of the epoch that settles it; 200 is many epochs
#: of the busiest load measured (benchmarks/many_runs.py: about 3 settled per epoch)
KEPT_TICKETS = 200


#: the memo key under which the rebalancer keeps the holds it enforces, so that a new run
#: (after a failure, a terminate or ``rebalance stop``/``start``) recovers them
HOLDS_MEMO = "holds"
#: the memo key under which a run stopped by ``request_stop`` says who stopped it and why
STOPPED_MEMO = "stopped"


class EpochRecord(BaseModel):
    epoch: int
    at: datetime
    #: published, skipped, conflict
    outcome: str
    reason: str = ""
    #: why the ramp and dampening were set aside (the table broke a hold), else empty
    emergency: str = ""
    version: int | None = None
    max_utilization_before: float | None = None
    max_utilization_after: float | None = None
    utilization_spread_before: float | None = None
    traffic_moved_share: float | None = None
    churn: int | None = None
    urgent: bool = False
    #: region -> share of demand and predicted utilization under the table this epoch left
    #: (empty when skipped or in conflict), so a report can chart them per epoch
    shares: dict[str, float] = Field(default_factory=dict)
    utilization: dict[str, float] = Field(default_factory=dict)


class RebalancerIncidents(BaseModel):
    """What went wrong around the rebalancer, counted so that status (and alerts) show it."""

    #: epochs skipped because the fleet could not be reached (every retry failed)
    unreachable_epochs: int = 0
    #: epochs that found the fleet's routing version lower than the last one seen: the
    #: fleet lost its state (a restart, a restore from an old backup)
    routing_regressions: int = 0
    #: epochs that found the table breaking a hold and fixed it without the ramp
    emergency_steps: int = 0
    #: the last of these, in words, with the epoch it happened in
    last: str = ""


class OverrideTicket(BaseModel):
    """One override request (a set or a clear) and what became of it.

    Owners send requests as signals and read their ticket with the ``override_ticket``
    query: no Update is held open while an epoch settles the request.
    """

    ticket: str
    region: str
    owner: str
    #: set, clear
    kind: str
    #: pending (an epoch has yet to settle it), applied, failed; unknown: no such ticket
    #: (the signal has not been handled yet)
    outcome: str = "pending"
    #: the error type and message the owner raises for a failed ticket (a refusal at
    #: intake: UnsafeRequest, OverrideConflict; an epoch that could not honour it: Infeasible)
    error_type: str = ""
    error: str = ""
    #: set when applied: the epoch, the routing version and the region's share of demand
    epoch: int | None = None
    version: int | None = None
    region_share: float | None = None


class PendingOverride(BaseModel):
    """A set or clear waiting for an epoch, with what to put back if it cannot be honoured."""

    ticket: OverrideTicket
    #: the hold this request set (None for a clear)
    override: Override | None = None
    #: the region's hold before this request (put back when a set is withdrawn)
    previous: Override | None = None


class RebalancerState(BaseModel):
    """Everything that must survive continue-as-new."""

    epoch: int = 0
    overrides: dict[str, Override] = Field(default_factory=dict)
    paused_by: str | None = None
    pause_reason: str = ""
    view: FleetView | None = None
    last_good_version: int | None = None
    #: region -> predicted utilization and share under the last published table
    utilization: dict[str, float] = Field(default_factory=dict)
    shares: dict[str, float] = Field(default_factory=dict)
    fractions: dict[str, dict[str, float]] = Field(default_factory=dict)
    epochs: list[EpochRecord] = Field(default_factory=list)
    incidents: RebalancerIncidents = Field(default_factory=RebalancerIncidents)
    #: the routing version of the last epoch that read the fleet (to see it go backwards)
    seen_version: int | None = None
    #: whether this chain of runs has taken over the holds of the run before it
    recovered: bool = False
    #: what that take-over found (the run it read, the holds kept and dropped)
    recovery_note: str = ""
    #: override requests not yet settled, oldest first, and the last settled ones
    pending: list[PendingOverride] = Field(default_factory=list)
    settled: list[OverrideTicket] = Field(default_factory=list)


class RebalancerInput(BaseModel):
    #: seconds between epochs (Taiji: 5 minutes; seconds in the lab)
    epoch_s: float = Field(default=300.0, gt=0)
    window_s: float | None = Field(default=None, gt=0)
    service: str = "web"
    constraints: Constraints = Field(default_factory=Constraints)
    #: continue-as-new after this many epochs, well before history limits
    epochs_per_run: int = Field(default=200, ge=1)
    state: RebalancerState = Field(default_factory=RebalancerState)


class SetOverrideInput(BaseModel):
    region: str
    owner: str = Field(min_length=1)
    reason: str = ""
    max_share: Fraction | None = None
    pin_share: Fraction | None = None
    capacity_fraction: Fraction | None = None
    #: return only once a table honouring the override is published (the old Update only)
    wait_applied: bool = True
    #: names the request: a request sent again with the same ticket is the same request
    ticket: str | None = None


class ClearOverrideInput(BaseModel):
    region: str
    owner: str = Field(min_length=1)
    wait_applied: bool = True
    ticket: str | None = None
    #: publish this table (the one found before the override) if it is still valid,
    #: so a rolled-back drain or a finished load test leaves routing exactly as it was
    restore_fractions: dict[str, dict[str, float]] | None = None


class OverrideApplied(BaseModel):
    epoch: int
    version: int | None
    #: the region's share of all demand under the published table
    region_share: float | None


class PauseInput(BaseModel):
    by: str = Field(min_length=1)
    reason: str = ""


class ResumeInput(BaseModel):
    by: str = Field(min_length=1)


class StopInput(BaseModel):
    """``request_stop``: end the run after the epoch in progress (its publish included)."""

    by: str = Field(min_length=1)
    reason: str = ""


class RebalancerStatus(BaseModel):
    epoch: int
    paused_by: str | None
    pause_reason: str
    last_good_version: int | None
    overrides: list[Override]
    utilization: dict[str, float]
    shares: dict[str, float]
    fractions: dict[str, dict[str, float]]
    epochs: list[EpochRecord]
    #: region -> its share of all capacity among active regions (the "fair" share)
    capacity_shares: dict[str, float] = Field(default_factory=dict)
    #: whether the last epoch that read the fleet could trust what it read (an override
    #: is checked against this view; without one a new override is refused)
    trusted_view: bool = False
    #: the ramp: the most a region's predicted utilization may rise in one epoch
    max_utilization_increase: float | None = None
    epoch_s: float | None = None
    incidents: RebalancerIncidents = Field(default_factory=RebalancerIncidents)
    recovery_note: str = ""


def hold_memo(overrides: dict[str, Override]) -> list[dict[str, object]]:
    """The holds as the rebalancer's memo keeps them (JSON, sorted by region)."""
    return [overrides[region].model_dump(mode="json") for region in sorted(overrides)]


def holds_from_memo(value: object) -> list[Override]:
    """The holds a rebalancer run left in its memo; malformed entries raise ValueError."""
    if not isinstance(value, list):
        raise ValueError(f"memo {HOLDS_MEMO}: expected a list, got {type(value).__name__}")
    return [Override.model_validate(entry) for entry in value]


class RoutingWriter(BaseModel):
    """Who writes routing now, for a run that needs a table changed (a load test)."""

    #: whether a rebalancer runs (and answered its status query)
    running: bool
    status: RebalancerStatus | None = None
    #: without one, what became of it, in words
    detail: str = ""
    #: without one, the holds its last run kept (a drained region stays out)
    holds: list[Override] = Field(default_factory=list)
