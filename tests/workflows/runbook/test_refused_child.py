"""A nested drain refused by its capacity check changed nothing, so the drill running it
has nothing of it to undo: its rollback starts no restore, and it does not end
``rollback_failed`` (seen in test_many_runs, when the restore found no record to read).

On the time-skipping server with scripted activities: the capacity check refuses, and
``drain_record`` is the real one (it reads the child run), counted.
"""

from __future__ import annotations

import uuid
from typing import cast

import pytest
import yaml
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from orchestrator import registry
from orchestrator.activities.drain import DrainActivities, DrainCheckInput, DrainRecordInput
from orchestrator.activities.runbook import DurationsInput
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import DrainRecord, RunbookRunInput, TaskPhase
from orchestrator.fleet.protocol import Fleet
from orchestrator.policy.drain.capacity import DrainForecast
from orchestrator.runbook.spec import Runbook
from orchestrator.temporal import data_converter
from orchestrator.worker import sandbox_runner
from tests.fixtures.temporal import new_worker
from tests.workflows.runbook.conftest import runbook
from workflows.runbook import RunbookWorkflow
from workflows.runbook_children import REFUSED_CHILD_PATCH

DRILL = """
name: drill
kind: drill
restore_runbook: undrain
parameters:
  region: {type: region}
tasks:
  - id: drain
    template: runbook
    args: {runbook: drain, mode: drill, parameters: {region: "${params.region}"}}
    restore:
      template: runbook
      args: {runbook: undrain, parameters: {region: "${params.region}"}}
  - id: restore
    template: runbook
    depends_on: [drain]
    undoes: drain
    args: {runbook: undrain, parameters: {region: "${params.region}"}}
"""

DRAIN = """
name: drain
kind: drain
restore_runbook: undrain
parameters:
  region: {type: region}
tasks:
  - id: web-off
    template: service_weight
    args: {region: "${params.region}", service: web, weight: 0}
    restore: auto
"""

UNDRAIN = """
name: undrain
kind: restore
parameters:
  region: {type: region}
tasks:
  - id: web-on
    template: service_weight
    args: {region: "${params.region}", service: web, weight: 1}
"""

#: the capacity check's refusal, as DrainRefused words it
REFUSAL = (
    "refusing to drain eu-west: us-east would run web at 0.91 (> target 0.80; 910 of 1000 rps)"
    "; predicted utilization after the drain: us-east 0.91, us-west 0.62"
)


class Scripted:
    """The activities a refused nested drain reaches, and how often the restore read."""

    def __init__(self, env: WorkflowEnvironment) -> None:
        self.drains = DrainActivities(cast(Fleet, None), env.client)
        self.records_read: list[str] = []

    @activity.defn(name="check_drain_capacity")
    async def check_capacity(self, inp: DrainCheckInput) -> DrainForecast:
        raise ApplicationError(REFUSAL, type="UnsafeRequest", non_retryable=True)

    @activity.defn(name="drain_record")
    async def drain_record(self, inp: DrainRecordInput) -> DrainRecord:
        self.records_read.append(inp.workflow_id)
        return await self.drains.drain_record(inp)

    @activity.defn(name="task_durations")
    async def durations(self, inp: DurationsInput) -> dict[str, list[float]]:
        return {}


def nested() -> dict[str, Runbook]:
    return {
        "drain": Runbook.model_validate(yaml.safe_load(DRAIN)),
        "undrain": Runbook.model_validate(yaml.safe_load(UNDRAIN)),
    }


class TestRefusedNestedDrain:
    """The drill's drain task fails with the refusal and its rollback undoes nothing."""

    async def test_rollback_skips_the_refused_child(self, time_env: WorkflowEnvironment) -> None:
        scripted = Scripted(time_env)
        activities = [scripted.check_capacity, scripted.drain_record, scripted.durations]
        async with new_worker(time_env.client, activities) as worker:
            handle = await time_env.client.start_workflow(
                RunbookWorkflow.run,
                RunbookRunInput(
                    runbook=runbook(DRILL, region="eu-west"), requested_by="test", nested=nested()
                ),
                id=f"drill-{uuid.uuid4().hex[:6]}",
                task_queue=worker.task_queue,
            )
            report = await runbook_result(handle)

        drain = next(t for t in report.tasks if t.id == "drain")
        assert report.outcome == "rolled_back", report.events
        assert drain.phase == TaskPhase.FAILED and REFUSAL in drain.message, drain
        assert "refused by its capacity check, changed nothing" in drain.message
        assert drain.undo is None
        # No restore ran: nothing read a record of the refused child, no restore child exists.
        assert scripted.records_read == []
        restore = time_env.client.get_workflow_handle(f"{handle.id}/drain/restore")
        with pytest.raises(RPCError) as missing:
            await restore.describe()
        assert missing.value.status == RPCStatusCode.NOT_FOUND
        # The child itself failed with the refusal, not a report: it reached no task.
        with pytest.raises(WorkflowFailureError) as refused:
            await time_env.client.get_workflow_handle(f"{handle.id}/drain").result()
        assert isinstance(refused.value.cause, ApplicationError)
        assert refused.value.cause.type == "UnsafeRequest"

        # The new behaviour is behind its patch, and the history replays on this code.
        history = await handle.fetch_history()
        markers = [
            e
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and REFUSED_CHILD_PATCH.encode() in e.SerializeToString()
        ]
        assert markers, "no patch marker for the refused child"
        replayer = Replayer(
            workflows=registry.workflows(),
            data_converter=data_converter,
            workflow_runner=sandbox_runner(),
        )
        await replayer.replay_workflow(history)
