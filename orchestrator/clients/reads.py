"""Reading a workflow that may be running or finished."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from orchestrator.clients.runbook_runs import report_of

__all__ = ["result_or_query"]


async def result_or_query(
    client: Client, workflow_id: str, result_type: type[Any], query: str, query_type: type[Any]
) -> Any:
    """A running workflow's ``query`` answer, or a finished one's result."""
    handle = client.get_workflow_handle(workflow_id, result_type=result_type)
    described = await handle.describe()
    if described.status == WorkflowExecutionStatus.RUNNING:
        return await handle.query(query, result_type=query_type)
    try:
        return await handle.result()
    except WorkflowFailureError as exc:
        # A runbook run that did not complete failed with its report attached.
        report = report_of(exc)
        if report is None:
            raise
        return report
