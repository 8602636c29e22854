"""Ending a test's runs (testkit/temporal.py), on a real dev server."""

from __future__ import annotations

import uuid

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from testkit.temporal import terminate_if_running


async def idle_run(env: WorkflowEnvironment) -> WorkflowHandle[object, object]:
    """A run on a queue no worker polls: it stays running until it is terminated."""
    return await env.client.start_workflow(
        "RunbookWorkflow",
        {},
        id=f"idle-{uuid.uuid4().hex[:8]}",
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}",
    )


class TestTerminateIfRunning:
    """A test ends its runs whether or not they closed by themselves in the meantime."""

    async def test_a_running_run_is_terminated(self, dev_env: WorkflowEnvironment) -> None:
        handle = await idle_run(dev_env)
        await terminate_if_running(handle, "test over")
        assert (await handle.describe()).status == WorkflowExecutionStatus.TERMINATED

    async def test_a_run_that_already_closed_is_left_as_it_ended(
        self, dev_env: WorkflowEnvironment
    ) -> None:
        # the race it exists for: the run closes between the caller's look and its terminate
        handle = await idle_run(dev_env)
        await handle.terminate("closed first")
        await terminate_if_running(handle, "test over")
        description = await handle.describe()
        assert description.status == WorkflowExecutionStatus.TERMINATED
