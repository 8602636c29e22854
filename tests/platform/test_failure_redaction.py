"""A secret quoted by an exception inside an activity reaches neither the worker's logs
nor the failure Temporal stores in the workflow's history (and shows in its UI)."""

from __future__ import annotations

import logging
import uuid

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.fleet_reads import FleetReadActivities
from orchestrator.exceptions import FleetRejected
from orchestrator.logging import REDACTED, register_secret
from tests.fixtures.temporal import new_worker
from workflows.fleet_snapshot import FleetSnapshotInput, FleetSnapshotWorkflow

SECRET = "fleet-token-9c4e2a"


class _LeakyFleet:
    """Fails its first read with an error that quotes the token, as httpx's header error did."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def topology(self) -> None:
        raise self.error


def _errors() -> list[Exception]:
    quoted = f"Illegal header value b'Bearer {SECRET}\\n'"
    return [
        # A project error: reported as a non-retryable ApplicationError with a cause.
        FleetRejected(f"GET /v1/topology: {quoted}", reason=quoted),
        # Anything else: the SDK's own conversion, retried by the workflow's policy.
        RuntimeError(quoted),
    ]


class TestActivityFailureRedaction:
    """The worker's log lines and the stored failure show ``[redacted]``, never the token."""

    @pytest.mark.parametrize("error", _errors(), ids=lambda e: type(e).__name__)
    async def test_secret_never_leaves_the_worker(
        self,
        time_env: WorkflowEnvironment,
        caplog: pytest.LogCaptureFixture,
        error: Exception,
    ) -> None:
        register_secret(SECRET)
        caplog.set_level(logging.DEBUG)
        reads = FleetReadActivities(_LeakyFleet(error))  # type: ignore[arg-type]
        worker = new_worker(time_env.client, [reads.read_topology])
        async with worker:
            handle = await time_env.client.start_workflow(
                FleetSnapshotWorkflow.run,
                FleetSnapshotInput(),
                id=f"leak-{uuid.uuid4().hex[:8]}",
                task_queue=worker.task_queue,
            )
            with pytest.raises(WorkflowFailureError) as caught:
                await handle.result()
            history = (await handle.fetch_history()).to_json()

        causes = []
        exc: BaseException | None = caught.value
        while exc is not None:
            causes.append(str(exc))
            exc = exc.__cause__
        assert any("Illegal header value" in c for c in causes)
        assert all(SECRET not in c for c in causes)
        assert "ActivityTaskFailed" in history or "activityTaskFailed" in history
        assert SECRET not in history and REDACTED in history
        assert "Completing activity as failed" in caplog.text
        assert SECRET not in caplog.text
