"""Bad input against a real dev server and worker: nothing starts, and what starts fails fast.

- Every workflow type started with input that does not fit its model fails at once
  with a non-retryable ``ApplicationError(type="InvalidRequest")`` naming the field
  (before the fix it retried its first workflow task forever), and the worker keeps
  running: a valid workflow completes afterwards.
- Updates with bad input are rejected as ``InvalidRequest``, signals with bad input
  are dropped, and the run goes on to complete.
- A sample of the webhook campaign's bad requests, sent to the trigger app over the
  real Temporal starter, starts no workflow: afterwards the dev server holds exactly
  the runs the answers reported.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from orchestrator.contracts.rebalancer import OverrideTicket, RebalancerInput, RebalancerStatus
from orchestrator.contracts.runbook import RunbookReport
from orchestrator.exceptions import NON_RETRYABLE_ERROR_TYPES
from orchestrator.policy.snapshot import FleetSnapshot
from orchestrator.triggers.starter import TemporalRunStarter
from testkit.fuzz.campaign import JUNK, TARGETED, input_model, sample, trigger_requests
from testkit.fuzz.probes_http import auth_headers, body_bytes
from testkit.temporal import terminate_if_running
from testkit.triggers import asgi_client, make_app
from tests.triggers.conftest import TemporalStack, finish
from tests.triggers.payloads import runbook
from tests.workflows.conftest import Stack
from workflows.fleet_snapshot import FleetSnapshotInput


async def _failure(client: Client, workflow: str, arg: Any, queue: str) -> ApplicationError:
    # A case that validated would start a real run: each must be invalid to begin with.
    with pytest.raises(ValidationError):
        TypeAdapter(input_model(workflow)).validate_python(arg)
    handle = await client.start_workflow(
        workflow, arg, id=f"fuzz-{uuid.uuid4().hex[:10]}", task_queue=queue
    )
    try:
        with pytest.raises(WorkflowFailureError) as caught:
            await asyncio.wait_for(handle.result(), timeout=60)
    finally:
        await terminate_if_running(handle, "fuzz test cleanup")
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    return cause


class TestWorkflowInputs:
    """Each workflow type fails fast on bad input with a named non-retryable error;
    the worker survives and runs a valid workflow afterwards."""

    async def test_bad_start_input_fails_fast_and_the_worker_lives_on(self, stack: Stack) -> None:
        for workflow, targeted in TARGETED.items():
            for arg in [*JUNK, *targeted]:
                error = await _failure(stack.client, workflow, arg, stack.task_queue)
                assert error.non_retryable, (workflow, arg, error)
                assert error.type in NON_RETRYABLE_ERROR_TYPES, (workflow, arg, error)
                assert "\n" not in str(error) and ": " in str(error), str(error)
        snapshot = await stack.client.execute_workflow(
            "FleetSnapshotWorkflow",
            FleetSnapshotInput(),
            id=f"fuzz-ok-{uuid.uuid4().hex[:8]}",
            task_queue=stack.task_queue,
            result_type=FleetSnapshot,
        )
        assert snapshot.regions, "a valid workflow completes after the bad ones"


class TestWebhooksOverTemporal:
    """Refused webhook and manual-run requests start no workflow on a real dev server."""

    async def test_refused_requests_start_nothing(self, dev_env: WorkflowEnvironment) -> None:
        name = f"fuzz-drain-{uuid.uuid4().hex[:8]}"
        queue = f"fuzz-{uuid.uuid4().hex[:8]}"  # no worker: started runs just wait
        starter = TemporalRunStarter(dev_env.client, queue)
        reported = 0
        async with asgi_client(make_app([runbook(name)], starter)) as http:
            for path, auth, body in sample(trigger_requests(), 40, seed=9):
                raw = body_bytes(body)
                path = path.replace("/runbooks/drain/", f"/runbooks/{name}/")
                response = await http.post(
                    path,
                    content=raw,
                    headers={"Content-Type": "application/json", **auth_headers(auth, raw)},
                )
                assert response.status_code < 500, (path, response.text)
                if response.status_code in (200, 201):
                    answer = response.json()
                    if "results" in answer:
                        reported += sum(r["outcome"] == "started" for r in answer["results"])
                    else:
                        reported += bool(answer["started"])
            control = await http.post(
                f"/v1/runbooks/{name}/runs",
                json={"parameters": {"region": "eu-west"}},
                headers=auth_headers("bearer", b""),
            )
        assert control.status_code == 201, control.text
        query = f'Runbook = "{name}"'
        runs: list[Any] = []
        for _ in range(100):  # visibility is eventually consistent: wait for the control run
            runs = [w async for w in dev_env.client.list_workflows(query)]
            if len(runs) >= reported + 1:
                break
            await asyncio.sleep(0.1)
        for run in runs:
            await terminate_if_running(dev_env.client.get_workflow_handle(run.id), "fuzz cleanup")
        assert len(runs) == reported + 1


class TestControlInputs:
    """Updates with bad input (runbook controls, rebalancer overrides) are rejected as
    ``InvalidRequest`` and signals with bad input are dropped; the run keeps going (a
    runbook still completes on a valid approval, the rebalancer keeps running)."""

    async def test_bad_updates_and_signals_leave_the_run_intact(
        self, temporal_stack: TemporalStack
    ) -> None:
        name = f"fuzz-ctl-{uuid.uuid4().hex[:8]}"
        client = temporal_stack.client
        async with asgi_client(make_app([runbook(name)], temporal_stack.starter)) as http:
            answer = await http.post(
                f"/v1/runbooks/{name}/runs",
                json={"parameters": {"region": "eu-west"}},
                headers=auth_headers("bearer", b""),
            )
        assert answer.status_code == 201, answer.text
        workflow_id = answer.json()["workflow_id"]
        handle = client.get_workflow_handle(workflow_id, result_type=RunbookReport)
        for update, arg in (
            ("approve", {"task": 5, "by": "oncall"}),
            ("approve", None),
            ("pause", "now"),
            ("skip", {"task": "sign-off"}),
            ("abort_run", [1]),
        ):
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await handle.execute_update(update, arg)
            cause = caught.value.cause
            assert isinstance(cause, ApplicationError), (update, arg, cause)
            assert cause.type == "InvalidRequest" and "\n" not in str(cause), str(cause)
        await handle.signal("alert_resolved", {"fingerprint": ["not", "a", "string"]})
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        await finish(client, workflow_id)
        report = await asyncio.wait_for(handle.result(), timeout=60)
        assert report.outcome == "completed"

    async def test_bad_override_requests_are_refused_and_the_rebalancer_runs_on(
        self, stack: Stack
    ) -> None:
        handle = await stack.client.start_workflow(
            "TrafficRebalanceWorkflow",
            RebalancerInput(epoch_s=3600),
            id=f"fuzz-rebalancer-{uuid.uuid4().hex[:8]}",
            task_queue=stack.task_queue,
        )
        try:
            for update, arg in (
                ("set_override", {"region": 5, "owner": "drain-x"}),
                ("set_override", {"region": "eu-west", "owner": ""}),
                ("clear_override", None),
                ("pause", "now"),
            ):
                with pytest.raises(WorkflowUpdateFailedError) as caught:
                    await handle.execute_update(update, arg)
                cause = caught.value.cause
                assert isinstance(cause, ApplicationError), (update, arg, cause)
                assert cause.type == "InvalidRequest", (update, arg, str(cause))
            # The signals drains and load tests use: a malformed one is dropped, one
            # without a ticket is ignored (no owner could read its outcome).
            for signal, arg in (
                ("request_override", {"region": 5, "owner": "drain-x", "ticket": "t1"}),
                ("request_override", {"region": "eu-west", "owner": "d", "max_share": 0.0}),
                ("release_override", None),
            ):
                await handle.signal(signal, arg)
            found = await handle.query("override_ticket", "t1", result_type=OverrideTicket)
            assert found.outcome == "unknown"
            status = await handle.query("status", result_type=RebalancerStatus)
            assert status.overrides == []
            assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        finally:
            await handle.terminate("fuzz test over")
