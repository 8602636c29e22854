"""A runbook moves the training half of a building (issue 25) on a live lab: its jobs move
through their supervisors with 0 lost steps, the building's hosts are quarantined, and the
restore releases them. Fencing a host a job still runs on is refused, and so is a move that
would leave a job without room (GpuCapacityShort), before any job is asked."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.clients.training import start_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.runbook import RunbookReport, RunbookRunInput, TaskPhase
from orchestrator.contracts.training import JobState
from orchestrator.contracts.training_supervisor import SupervisorInput
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import Runbook
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import WorkerFactory
from tests.workflows.training_support import (
    JOB,
    end_earlier_supervisor,
    job_view,
    training_config,
    wait_job,
)
from workflows.runbook import RunbookWorkflow

OPTIONS = SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1, confirm_timeout_s=60)
STEPS = 700

FENCE = """
name: fence-only
kind: drain
parameters:
  building: {type: string}
tasks:
  - id: fence
    template: hosts_quarantine
    args: {building: "${params.building}", reason: maintenance}
    restore: auto
"""

MOVE = """
name: building-move
kind: drain
parameters:
  building: {type: string}
tasks:
  - id: move-jobs
    template: training_move
    args: {building: "${params.building}"}
  - id: fence
    template: hosts_quarantine
    depends_on: [move-jobs]
    args: {building: "${params.building}", reason: maintenance}
    restore: auto
"""

RESTORE = """
name: building-back
kind: restore
parameters:
  building: {type: string}
tasks:
  - id: release
    template: hosts_release
    args: {building: "${params.building}"}
"""


async def run(client: Client, queue: str, text: str, **params: Any) -> RunbookReport:
    rb = bind(Runbook.model_validate(yaml.safe_load(text)), params)
    handle = await client.start_workflow(
        RunbookWorkflow.run,
        RunbookRunInput(runbook=rb, requested_by="test"),
        id=f"{rb.name}-{uuid.uuid4().hex[:6]}",
        task_queue=queue,
    )
    report: RunbookReport = await runbook_result(handle)
    return report


def task(report: RunbookReport, task_id: str) -> Any:
    return next(t for t in report.tasks if t.id == task_id)


class TestBuildingRunbook:
    """Fence first: refused, naming the busy host and its job, nothing quarantined. Move then
    fence: the job runs outside the building from the step it reached (0 lost), every host of
    the building is quarantined; the restore releases them all; the job finishes."""

    async def test_move_fence_and_restore(
        self,
        dev_env: WorkflowEnvironment,
        start_lab: LabFactory,
        make_worker: WorkerFactory,
        tmp_path: Path,
    ) -> None:
        lab = await start_lab(training_config(total_steps=STEPS), faults=True)
        fleet = lab.fleet(timeout=10.0)
        settings = Settings(fleet_url=lab.url, state_dir=tmp_path)
        ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=dev_env.client)
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            supervisor = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=OPTIONS
            )
            job = await wait_job(fleet, lambda j: j.state is JobState.RUNNING and j.step >= 30)
            cluster = await fleet.training_cluster()
            where = {h.name: h.building for h in cluster.hosts}
            building = where[job.hosts[0]]
            in_building = sorted(n for n, b in where.items() if b == building)

            refused = await run(dev_env.client, worker.task_queue, FENCE, building=building)
            assert refused.outcome != "completed"
            assert task(refused, "fence").phase is TaskPhase.ROLLED_BACK
            said = " ".join(refused.events)
            assert "HostsBusy" in said or "still running a training job" in said, said
            assert JOB in said
            assert (await fleet.training_cluster()).quarantine == []

            region_hosts = [h.name for h in cluster.hosts if h.region == job.spec.region]
            short = MOVE.replace(
                '{building: "${params.building}"}',
                '{building: "${params.building}", hosts: '
                + json.dumps([h for h in region_hosts if where[h] != building])
                + "}",
                1,
            )
            cramped = await run(dev_env.client, worker.task_queue, short, building=building)
            said = " ".join(cramped.events)
            assert cramped.outcome != "completed" and "GpuCapacityShort" in said, said
            assert f"{JOB} (us-east, 2 hosts): waits" in said
            assert (await job_view(fleet)).runs == job.runs  # nobody was asked to move

            moved = await run(dev_env.client, worker.task_queue, MOVE, building=building)
            assert moved.outcome == "completed", moved.events
            assert "0 lost" in task(moved, "move-jobs").message
            now_on = await job_view(fleet)
            assert now_on.state is JobState.RUNNING
            assert all(where[h] != building for h in now_on.hosts)
            fenced = (await fleet.training_cluster()).quarantine
            assert sorted(r.host for r in fenced) == in_building

            back = await run(dev_env.client, worker.task_queue, RESTORE, building=building)
            assert back.outcome == "completed", back.events
            after = await fleet.training_cluster()
            assert not [r for r in after.quarantine if r.active(after.now)]
            final = await supervisor.result()

        assert final.failures == [] and len(final.moves) == 1
        move = final.moves[0].result
        assert move.lost_steps == 0 and move.checkpoint_step == move.stopped_at_step
        done = await job_view(fleet)
        assert done.state is JobState.FINISHED and done.step == STEPS
