"""The contract of DrillWorkflow: what a drill schedule starts and what a drill reports.

A schedule carries a :class:`DrillInput` with the (unbound) runbooks in it, so a
drill runs the runbook as it was when the schedule was created, and the worker
needs no access to the runbook files.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator.policy.drain.drill import DAYS, BlockedWindow
from orchestrator.runbook.spec import Runbook

__all__ = [
    "DRILL_WORKFLOW",
    "DAYS",
    "BlockedWindow",
    "BlockingInput",
    "DrillInput",
    "DrillResult",
    "HistoryInput",
]

DRILL_WORKFLOW = "DrillWorkflow"


class DrillInput(BaseModel):
    """A drain drill: pick a region, check nothing blocks it, run ``runbook`` as a drill."""

    runbook: Runbook
    #: run after ``runbook`` completes, with the same region (e.g. region-restore)
    restore: Runbook | None = None
    #: regions to choose from; empty: every active region of the fleet
    regions: list[str] = Field(default_factory=list)
    #: further parameters for both runbooks (the region is filled in by the drill)
    parameters: dict[str, Any] = Field(default_factory=dict)
    blocked_windows: list[BlockedWindow] = Field(default_factory=list)
    #: Alertmanager base URL whose firing alerts block a drill; None: not asked
    alertmanager_url: str | None = None
    #: an alert blocks when all these labels match (Alertmanager's ``=`` matchers)
    blocking_labels: dict[str, str] = Field(default_factory=lambda: {"severity": "critical"})
    requested_by: str = Field(default="schedule", min_length=1)


class BlockingInput(BaseModel):
    alertmanager_url: str | None = None
    blocking_labels: dict[str, str] = Field(default_factory=dict)
    #: only drains on this task queue (this deployment's) count
    task_queue: str
    #: the asking drill's own children do not block it
    exclude_prefix: str = ""


class HistoryInput(BaseModel):
    regions: list[str] = Field(min_length=1)
    task_queue: str


class DrillResult(BaseModel):
    outcome: Literal["ran", "skipped"]
    #: why it was skipped, or how the run ended
    reason: str = ""
    region: str | None = None
    #: region -> start of its last drain or drill before this one (None: never)
    last_drained: dict[str, datetime | None] = Field(default_factory=dict)
    workflow_id: str | None = None
    runbook_outcome: str | None = None
    restore_workflow_id: str | None = None
    restore_outcome: str | None = None
    decided_at: datetime
