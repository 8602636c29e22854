"""A runbook run's report, whether the run completed or failed with the report attached.

A run that does not complete fails its workflow execution (so Temporal's own status tells
the truth) with its :class:`~orchestrator.contracts.runbook.RunbookReport` in the failure's
details; these helpers build that failure in the workflow and read it back in a caller.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from orchestrator.contracts.runbook import RUN_NOT_COMPLETED, RunbookReport

__all__ = ["report_of", "run_failure", "runbook_result"]


def run_failure(report: RunbookReport, why: str) -> ApplicationError:
    """The error a run that did not complete ends with; its report rides in the details."""
    return ApplicationError(
        f"{report.runbook} {report.outcome}: {why}",
        report.model_dump(mode="json"),
        type=RUN_NOT_COMPLETED,
        non_retryable=True,
    )


def report_of(exc: BaseException | None) -> RunbookReport | None:
    """The report a failed run carries (see :func:`run_failure`), wherever it sits in the
    cause chain of a client's or a parent workflow's error; None if it carries none."""
    while exc is not None:
        if isinstance(exc, ApplicationError) and exc.type == RUN_NOT_COMPLETED and exc.details:
            try:
                return RunbookReport.model_validate(exc.details[0])
            except ValidationError:
                return None
        exc = exc.__cause__ if exc.__cause__ is not None else getattr(exc, "cause", None)
    return None


async def runbook_result(handle: WorkflowHandle[Any, Any]) -> RunbookReport:
    """A run's report, whether it completed or failed with its report attached."""
    try:
        result = await handle.result()
    except WorkflowFailureError as exc:
        report = report_of(exc)
        if report is None:
            raise
        return report
    return RunbookReport.model_validate(result) if isinstance(result, dict) else result
