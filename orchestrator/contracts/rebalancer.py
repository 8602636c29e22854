"""Inputs, state and answers of TrafficRebalanceWorkflow (one model per run, update and query)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from orchestrator.models import Fraction
from orchestrator.policy.rebalance_inputs import FleetView, Override
from orchestrator.policy.taiji_model import Constraints

__all__ = [
    "ClearOverrideInput",
    "EpochRecord",
    "OverrideApplied",
    "PauseInput",
    "RebalancerInput",
    "RebalancerState",
    "RebalancerStatus",
    "ResumeInput",
    "SetOverrideInput",
]

REBALANCER_ID = "rebalancer"
#: epochs kept in state for the status query; older ones are in the run history. Enough to
#: chart a drain's traffic share at lab epoch lengths (``orchestrator report``). A record is
#: ~350 bytes plus ~60 per region (measured): 120 of 50 regions are ~400 KB of the state
#: carried through continue-as-new, under Temporal's 2 MB payload limit
KEPT_EPOCHS = 120


class EpochRecord(BaseModel):
    epoch: int
    at: datetime
    #: published, skipped, conflict
    outcome: str
    reason: str = ""
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
    #: return only once a table honouring the override is published
    wait_applied: bool = True


class ClearOverrideInput(BaseModel):
    region: str
    owner: str = Field(min_length=1)
    wait_applied: bool = True
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
