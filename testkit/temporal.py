"""Temporal for a test or a benchmark run: a dev server, and workers with the project's
workflows on a fresh task queue."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orchestrator import registry
from orchestrator.temporal import SEARCH_ATTRIBUTES, binary_path, data_converter
from orchestrator.worker import HEARTBEAT_THROTTLE, sandbox_runner

__all__ = ["new_worker", "start_dev_server", "terminate_if_running"]


def new_worker(
    client: Client,
    activities: Sequence[Callable[..., Any]],
    workflows: Sequence[type] | None = None,
    task_queue: str | None = None,
) -> Worker:
    return Worker(
        client,
        task_queue=task_queue or f"test-{uuid.uuid4().hex[:12]}",
        workflows=list(workflows if workflows is not None else registry.workflows()),
        activities=list(activities),
        workflow_runner=sandbox_runner(),
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )


async def start_dev_server() -> WorkflowEnvironment:
    """A local dev server from the installed ``temporal`` binary (never a download), with
    the project's converter and search attributes, logging errors only."""
    return await WorkflowEnvironment.start_local(
        data_converter=data_converter,
        dev_server_existing_path=binary_path("temporal"),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_log_level="error",
    )


async def terminate_if_running(handle: WorkflowHandle[Any, Any], reason: str) -> None:
    """Terminate a run the caller is done with, unless it has already closed.

    Asking first and then terminating races a run that ends by itself in between (a drain
    refused by its capacity check fails on its own): the server then answers NOT_FOUND,
    "workflow execution already completed". That answer is the outcome wanted here."""
    try:
        await handle.terminate(reason)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
