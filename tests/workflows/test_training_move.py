"""The ``move_job`` Update of TrainingJobSupervisorWorkflow on a live lab (issue 25): a
planned move checkpoints on demand and restarts elsewhere, losing no step."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.training import start_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.training import JobState
from orchestrator.contracts.training_moves import (
    MOVE_JOB_UPDATE,
    MoveJobRequest,
    MoveJobResult,
    MoveOutcome,
)
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    SupervisorInput,
    SupervisorState,
)
from orchestrator.lab.training.sgd import params_digest, train_uninterrupted
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import WorkerFactory
from tests.workflows.training_support import (
    JOB,
    end_earlier_supervisor,
    inject,
    job_view,
    training_config,
    wait_job,
)
from workflows.training_supervisor import TrainingJobSupervisorWorkflow

OPTIONS = SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1, confirm_timeout_s=60)
STEPS = 700


class TestPlannedMove:
    """Moved off its building, a job is checkpointed at the step it reached and restarted
    outside it from there: 0 lost steps, no failure recorded, and it ends bit-identical to an
    uninterrupted run. The same request id again moves nothing; a building the job is not in
    is ``not_needed``; with no room outside it is ``waiting`` and the job is left alone; a bad
    request is refused naming the field, and the supervisor goes on."""

    async def test_move_off_a_building(
        self,
        dev_env: WorkflowEnvironment,
        start_lab: LabFactory,
        make_worker: WorkerFactory,
    ) -> None:
        lab = await start_lab(training_config(total_steps=STEPS), faults=True)
        fleet = lab.fleet(timeout=10.0)
        ctx = registry.ActivityContext(
            settings=Settings(fleet_url=lab.url), fleet=fleet, client=dev_env.client
        )
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=OPTIONS
            )
            job = await wait_job(fleet, lambda j: j.state is JobState.RUNNING and j.step >= 30)
            cluster = await fleet.training_cluster()
            where = {h.name: h.building for h in cluster.hosts}
            building = where[job.hosts[0]]
            elsewhere = sorted(
                {b for b in where.values() if b not in {where[h] for h in job.hosts}}
            )

            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(
                    MOVE_JOB_UPDATE,
                    MoveJobRequest(avoid_buildings=[building], reason="maintenance"),
                    result_type=MoveJobResult,
                )
            cause = refused.value.cause
            assert isinstance(cause, ApplicationError) and cause.type == "InvalidRequest"
            assert "request_id" in str(cause)

            idle = await handle.execute_update(
                MOVE_JOB_UPDATE,
                MoveJobRequest(avoid_buildings=[elsewhere[0]], reason="not ours", request_id="r0"),
                result_type=MoveJobResult,
            )
            assert idle.outcome is MoveOutcome.NOT_NEEDED and idle.to_hosts == []

            nowhere = await handle.execute_update(
                MOVE_JOB_UPDATE,
                MoveJobRequest(
                    avoid_buildings=sorted(set(where.values())), reason="all", request_id="r-all"
                ),
                result_type=MoveJobResult,
            )
            assert nowhere.outcome is MoveOutcome.WAITING and "needs 2 hosts" in nowhere.detail
            assert (await job_view(fleet)).runs == job.runs  # left running where it was

            request = MoveJobRequest(
                avoid_buildings=[building], reason="maintenance", request_id="r1"
            )
            moved = await handle.execute_update(
                MOVE_JOB_UPDATE, request, id="move-r1", result_type=MoveJobResult
            )
            runs = (await job_view(fleet)).runs
            again = await handle.execute_update(
                MOVE_JOB_UPDATE, request, id="move-r1-again", result_type=MoveJobResult
            )
            assert again == moved
            assert (await job_view(fleet)).runs == runs
            final = await handle.result()

        assert moved.outcome is MoveOutcome.MOVED
        assert moved.checkpoint_step is not None and moved.checkpoint_step >= 30
        assert moved.checkpoint_step == moved.stopped_at_step and moved.lost_steps == 0
        assert moved.from_hosts == job.hosts
        assert moved.to_hosts and all(where[h] != building for h in moved.to_hosts)
        assert final.state is SupervisorState.FINISHED
        assert final.failures == []  # the planned stop was no failure
        assert final.ettr == pytest.approx(1.0)  # and costs no ETTR the way a failure does
        assert final.totals.by_kind == {} and final.totals.lost_steps == 0
        assert [m.request_id for m in final.moves] == ["r0", "r-all", "r1"]
        done = await job_view(fleet)
        assert done.state is JobState.FINISHED and done.step == STEPS
        assert done.resumed_from == moved.checkpoint_step
        assert done.params_digest == params_digest(train_uninterrupted(11, STEPS))


class TestMoveOfAFailedJob:
    """A move off a building whose power is already gone, asked before the watch loop has
    seen the job die (a building-loss runbook beats the next poll), is the watch loop's
    recovery, not a planned stop: the failure is recorded with its lost steps and MTTR,
    and the move then answers ``not_needed``, naming what the recovery cost."""

    async def test_power_loss_then_move(
        self,
        dev_env: WorkflowEnvironment,
        start_lab: LabFactory,
        make_worker: WorkerFactory,
    ) -> None:
        lab = await start_lab(training_config(total_steps=STEPS), faults=True)
        fleet = lab.fleet(timeout=10.0)
        ctx = registry.ActivityContext(
            settings=Settings(fleet_url=lab.url), fleet=fleet, client=dev_env.client
        )
        # a slow watch: the move below nearly always reads the dead job first
        options = OPTIONS.model_copy(update={"poll_s": 5.0, "confirm_poll_s": 0.1})
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=options
            )
            job = await wait_job(
                fleet,
                lambda j: j.state is JobState.RUNNING and (j.checkpoint_step or 0) >= 40,
            )
            cluster = await fleet.training_cluster()
            building = next(h.building for h in cluster.hosts if h.name == job.hosts[0])
            await inject(lab, "power-loss", building=building)
            moved = await handle.execute_update(
                MOVE_JOB_UPDATE,
                MoveJobRequest(avoid_buildings=[building], reason="loss", request_id="r-loss"),
                result_type=MoveJobResult,
            )
            status = await handle.query(TrainingJobSupervisorWorkflow.status)
            final = await handle.result()

        assert moved.outcome is MoveOutcome.NOT_NEEDED, moved
        assert "recovered it from building" in moved.detail and "steps lost" in moved.detail
        assert [f.kind for f in status.failures] == [FailureKind.BUILDING]
        failure = status.failures[0]
        assert failure.mttr_s is not None and failure.lost_steps is not None
        assert [m.request_id for m in status.moves] == ["r-loss"]
        assert final.state is SupervisorState.FINISHED and len(final.failures) == 1
        done = await job_view(fleet)
        assert done.state is JobState.FINISHED and done.step == STEPS
        assert done.params_digest == params_digest(train_uninterrupted(11, STEPS))
