"""What a report shows, as plain pydantic models: gathered from Temporal, rendered without it.

One model per workflow type, each with the run's header. The rendering functions take
these models only, so they are unit-tested on hand-built data.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from orchestrator.contracts.load_test import LoadTestProgress, LoadTestResult, StepSummary
from orchestrator.contracts.rebalancer import RebalancerStatus
from orchestrator.contracts.runbook import TaskState
from orchestrator.contracts.training_moves import MoveRecord
from orchestrator.contracts.training_supervisor import FailureRecord, SupervisorStatus
from orchestrator.policy.health_metrics import HealthMetric

__all__ = [
    "REPORTED_TYPES",
    "LoadTestReport",
    "RebalancerReport",
    "Report",
    "RunHeader",
    "RunbookReportView",
    "SharePoint",
    "TrainingReport",
    "failures_during",
    "moves_during",
]

#: workflow type -> the report kind that shows it
REPORTED_TYPES: dict[str, str] = {
    "TrafficRebalanceWorkflow": "rebalancer",
    "LiveLoadTestWorkflow": "loadtest",
    "RunbookWorkflow": "runbook",
    "TrainingJobSupervisorWorkflow": "training",
}


class RunHeader(BaseModel):
    workflow_id: str
    run_id: str | None = None
    workflow_type: str
    #: Temporal's execution status: running, completed, failed, terminated, ...
    status: str
    start: datetime | None = None
    end: datetime | None = None
    #: where the data came from: the workflow's result, or a query of the running run
    source: Literal["result", "query"] = "result"

    @property
    def duration_s(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return (self.end - self.start).total_seconds()


class RebalancerReport(BaseModel):
    kind: Literal["rebalancer"] = "rebalancer"
    header: RunHeader
    status: RebalancerStatus
    #: the utilization the rebalancer aims every region at (its constraints)
    target_utilization: float | None = None


class LoadTestReport(BaseModel):
    kind: Literal["loadtest"] = "loadtest"
    header: RunHeader
    region: str
    service: str
    #: the finished test's result, or the running one's progress (one of the two)
    result: LoadTestResult | None = None
    progress: LoadTestProgress | None = None
    #: the banded metrics the test watched (their thresholds are drawn)
    metrics: list[HealthMetric] = Field(default_factory=list)

    @property
    def history(self) -> list[StepSummary]:
        if self.result is not None:
            return self.result.history
        return self.progress.history if self.progress is not None else []


class SharePoint(BaseModel):
    at: datetime
    share: float


class RunbookReportView(BaseModel):
    kind: Literal["runbook"] = "runbook"
    header: RunHeader
    runbook: str
    mode: str
    #: completed, failed, rolled_back, aborted; a running run's state (running, paused, ...)
    outcome: str
    region: str | None = None
    tasks: list[TaskState]
    critical_path: list[str]
    critical_path_s: float
    sequential_s: float
    events: list[str] = Field(default_factory=list)
    #: the time a running run's status describes (running tasks' bars end there)
    as_of: datetime | None = None
    #: the region's share of demand per rebalancer epoch during the run (empty: not known)
    region_shares: list[SharePoint] = Field(default_factory=list)
    #: the training jobs the run moved or saw recovered (runs with training tasks)
    training: list[TrainingReport] = Field(default_factory=list)


class TrainingReport(BaseModel):
    kind: Literal["training"] = "training"
    header: RunHeader
    status: SupervisorStatus
    #: when supervision began (it survives continue-as-new) and the step the job was at then
    started_at: datetime | None = None
    start_step: int = 0
    #: when the supervisor's own launch of the job had it stepping (None: it was running)
    launched_at: datetime | None = None
    #: the time the status describes: the run's close, or when it was queried
    as_of: datetime


RunbookReportView.model_rebuild()


def failures_during(
    status: SupervisorStatus, start: datetime, end: datetime
) -> list[FailureRecord]:
    """Failures open at some point of [start, end] (a power loss may come a little before
    the run an alert starts: it counts if the job was still down then)."""
    return [
        f
        for f in status.failures
        if f.kind != "launch"
        and f.onset_at <= end
        and (f.recovered_at is None or f.recovered_at >= start)
    ]


def moves_during(status: SupervisorStatus, start: datetime, end: datetime) -> list[MoveRecord]:
    """Planned moves requested within [start, end]."""
    return [m for m in status.moves if start <= m.requested_at <= end]


Report = Annotated[
    RebalancerReport | LoadTestReport | RunbookReportView | TrainingReport,
    Field(discriminator="kind"),
]
