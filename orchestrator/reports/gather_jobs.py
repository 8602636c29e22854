"""The training jobs a runbook run acted on, for its report (issue 25: one incident, one
report, traffic and training side by side).

A run with a ``training_move`` task reports every job whose supervisor, during the run,
either moved it on the run's request or recovered it from a failure: the supervisors
are found through visibility (their runs overlapping the run's window) and read as a
training report each, so the charts are the ones a job's own report draws.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from temporalio.client import Client

from orchestrator.reports.models import (
    Report,
    RunbookReportView,
    TrainingReport,
    failures_during,
    moves_during,
)

__all__ = ["jobs_of_run"]

SUPERVISOR_TYPE = "TrainingJobSupervisorWorkflow"
#: templates whose runs touch training jobs
TRAINING_TEMPLATES = frozenset({"training_move", "hosts_quarantine", "hosts_release"})


def _in_window(report: TrainingReport, start: datetime, end: datetime) -> bool:
    status = report.status
    return bool(failures_during(status, start, end) or moves_during(status, start, end))


async def jobs_of_run(
    client: Client,
    view: RunbookReportView,
    gather: Callable[[Client, str], Awaitable[Report]],
) -> list[TrainingReport]:
    """The training reports of the jobs ``view``'s run moved or saw recovered, by job."""
    if not any(t.template in TRAINING_TEMPLATES for t in view.tasks):
        return []
    start = view.header.start
    end = view.header.end or view.as_of
    if start is None or end is None:
        return []
    ids: set[str] = set()
    async for run in client.list_workflows(f"WorkflowType = '{SUPERVISOR_TYPE}'"):
        if run.start_time <= end and (run.close_time is None or run.close_time >= start):
            ids.add(run.id)
    found = []
    for workflow_id in sorted(ids):
        report = await gather(client, workflow_id)
        if isinstance(report, TrainingReport) and _in_window(report, start, end):
            found.append(report)
    return found
