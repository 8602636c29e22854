"""Start and read a job's supervisor from any entry point: the CLI, the demo, benchmarks, tests.

    handle = await start_supervisor(client, "llm-demo", task_queue="orchestrator")
    status = await supervisor_status(client, "llm-demo")
    status = await wait_for_supervisor(client, "llm-demo", lambda s: len(s.failures) >= 2)

The supervisor launches a job the fleet has never started (or that was stopped),
so against the lab "start a lab job and supervise it" is just :func:`start_supervisor`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)

from orchestrator.contracts.training_supervisor import (
    SUPERVISOR_WORKFLOW,
    SupervisorInput,
    SupervisorStatus,
    supervisor_id,
)
from orchestrator.temporal import JOB_ID

__all__ = ["start_supervisor", "supervisor_status", "wait_for_supervisor"]


async def start_supervisor(
    client: Client,
    job: str,
    *,
    task_queue: str,
    options: SupervisorInput | None = None,
    search_attributes: bool = True,
) -> WorkflowHandle[Any, SupervisorStatus]:
    """Start ``training-<job>`` (or return the running one: one supervisor per job).

    ``search_attributes=False`` for a server without the JobId attribute registered
    (the time-skipping test server).
    """
    inp = options.model_copy(update={"job": job}) if options else SupervisorInput(job=job)
    attrs = TypedSearchAttributes([SearchAttributePair(JOB_ID, job)]) if search_attributes else None
    return await client.start_workflow(
        SUPERVISOR_WORKFLOW,
        inp,
        result_type=SupervisorStatus,
        id=supervisor_id(job),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        search_attributes=attrs,
    )


async def supervisor_status(client: Client, job: str) -> SupervisorStatus:
    handle = client.get_workflow_handle(supervisor_id(job))
    status: SupervisorStatus = await handle.query("status", result_type=SupervisorStatus)
    return status


async def wait_for_supervisor(
    client: Client,
    job: str,
    predicate: Callable[[SupervisorStatus], bool],
    *,
    timeout_s: float = 120.0,
    poll_s: float = 0.2,
) -> SupervisorStatus:
    """Query until ``predicate`` holds; TimeoutError with the last status otherwise."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: SupervisorStatus | None = None
    while loop.time() < deadline:
        try:
            last = await supervisor_status(client, job)
        except Exception:  # not started yet, or mid continue-as-new: ask again
            last = last
        if last is not None and predicate(last):
            return last
        await asyncio.sleep(poll_s)
    raise TimeoutError(f"supervisor of {job} did not reach the state in {timeout_s:g}s: {last}")
