"""The supervisor against the lab's model mode (no processes), across continue-as-new."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.training import (
    start_supervisor,
    supervisor_status,
    wait_for_supervisor,
)
from orchestrator.config import Settings
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    SupervisorInput,
    SupervisorState,
)
from testkit.lab import LabClock
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import WorkerFactory
from tests.workflows.training_support import (
    JOB,
    end_earlier_supervisor,
    inject,
    training_config,
    wait_job,
)


class TestModelModeAcrossContinueAsNew:
    """With one recovery per run the supervisor continues-as-new after each failure and
    still reports every failure, with its MTTD, MTTR and lost steps, and an ETTR."""

    async def test_two_failures_two_runs(
        self, dev_env: WorkflowEnvironment, start_lab: LabFactory, make_worker: WorkerFactory
    ) -> None:
        clock = LabClock()
        lab = await start_lab(
            training_config(step_ms=10.0, total_steps=900),
            mode="model",
            faults=True,
            clock=clock,
        )
        fleet = lab.fleet()
        ctx = registry.ActivityContext(
            settings=Settings(fleet_url=lab.url), fleet=fleet, client=dev_env.client
        )
        options = SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1, failures_per_run=1)
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=options
            )
            first_run = (await handle.describe()).run_id
            job = await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= 100)
            await inject(lab, "gpu-error", host=job.hosts[0])
            await wait_for_supervisor(
                dev_env.client, JOB, lambda s: len(s.failures) == 1 and s.failures[0].confirmed
            )
            job = await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= j.resumed_from + 60)
            await inject(lab, "host-down", host=job.hosts[0])
            await wait_for_supervisor(
                dev_env.client, JOB, lambda s: len(s.failures) == 2 and s.failures[1].confirmed
            )
            status = await supervisor_status(dev_env.client, JOB)
            # all it came for is seen: skip the lab past the job's last step
            clock.skip(900 * 10.0 / 1000.0)
            final = await handle.result()  # follows the continue-as-new chain
            last_run = (await dev_env.client.get_workflow_handle(handle.id).describe()).run_id

        assert last_run != first_run
        assert [f.kind for f in final.failures] == [FailureKind.GPU, FailureKind.HOST_DOWN]
        assert final.state is SupervisorState.FINISHED
        assert len(status.mttd_s) == 2 and all(m >= 0 for m in status.mttd_s)
        assert all(lost is not None and lost >= 0 for lost in final.lost_steps)
        assert final.ettr is not None and 0 < final.ettr < 1
