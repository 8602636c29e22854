"""A planned move across continue-as-new, on the model-mode lab with the retry watch mode:
the move's request id still answers in the next run, and a failure after the move is
recovered and counted as usual (the move is not)."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.training import start_supervisor, wait_for_supervisor
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
    WatchMode,
)
from testkit.lab import LabClock
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


class TestMoveAcrossContinueAsNew:
    """Moved, then hit by a GPU error whose recovery ends the run (one recovery per run):
    the same request id sent to the next run answers the first move and moves nothing."""

    async def test_request_id_answers_after_continue_as_new(
        self, dev_env: WorkflowEnvironment, start_lab: LabFactory, make_worker: WorkerFactory
    ) -> None:
        clock = LabClock()
        lab = await start_lab(
            training_config(step_ms=10.0, total_steps=1500),
            mode="model",
            faults=True,
            clock=clock,
        )
        fleet = lab.fleet()
        ctx = registry.ActivityContext(
            settings=Settings(fleet_url=lab.url), fleet=fleet, client=dev_env.client
        )
        options = SupervisorInput(
            job=JOB,
            hang_after_s=1.5,
            poll_s=0.1,
            failures_per_run=1,
            watch_mode=WatchMode.RETRY,
        )
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=options
            )
            first_run = (await handle.describe()).run_id
            job = await wait_job(fleet, lambda j: j.state is JobState.RUNNING and j.step >= 50)
            where = {h.name: h.building for h in (await fleet.training_cluster()).hosts}
            request = MoveJobRequest(
                avoid_buildings=[where[job.hosts[0]]], reason="maintenance", request_id="m1"
            )
            moved = await handle.execute_update(
                MOVE_JOB_UPDATE, request, id="m1", result_type=MoveJobResult
            )
            after_move = await job_view(fleet)
            await inject(lab, "gpu-error", host=after_move.hosts[0])
            await wait_for_supervisor(
                dev_env.client, JOB, lambda s: len(s.failures) == 1 and s.failures[0].confirmed
            )
            latest = dev_env.client.get_workflow_handle(handle.id)
            await wait_for_supervisor(dev_env.client, JOB, lambda s: len(s.moves) == 1)
            runs = (await job_view(fleet)).runs
            again = await latest.execute_update(
                MOVE_JOB_UPDATE, request, id="m1-next-run", result_type=MoveJobResult
            )
            assert (await latest.describe()).run_id != first_run
            assert again == moved and (await job_view(fleet)).runs == runs
            # all it came for is seen: skip the lab past the job's last step
            clock.skip(1500 * 10.0 / 1000.0)
            final = await handle.result()

        assert moved.outcome is MoveOutcome.MOVED and moved.lost_steps == 0
        assert moved.checkpoint_step == moved.stopped_at_step
        assert [f.kind for f in final.failures] == [FailureKind.GPU]
        assert [m.request_id for m in final.moves] == ["m1"]
        assert final.state is SupervisorState.FINISHED
