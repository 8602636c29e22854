"""The supervisor moves the PyTorch job off a straggler's host and out of a dark building.

Real Temporal, a real lab, 4 hosts each running a torchrun agent and one DDP rank.
A straggler first: the last rank's host computes four times slower, so the whole job
steps at its pace (the others wait in all-reduce) and nothing fails; the supervisor
tells it from the per-host compute times, quarantines that host and restarts the job
without it. Then the job's building loses power (every host in it): the supervisor
moves the job to the other building. The job reaches its last step with the
parameters of an uninterrupted run, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.training import start_supervisor, wait_for_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.training import JobState
from orchestrator.contracts.training_supervisor import FailureKind, SupervisorState
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import WorkerFactory
from tests.workflows.test_training_supervisor import recovered
from tests.workflows.test_training_supervisor_torch import (
    OPTIONS,
    SEED,
    STEPS,
    uninterrupted_digest,
)
from tests.workflows.training_support import (
    JOB,
    end_earlier_supervisor,
    inject,
    job_view,
    training_config,
    wait_job,
)


class TestTorchJobMovesOffStragglerAndDarkBuilding:
    async def test_straggler_then_power_loss(
        self,
        dev_env: WorkflowEnvironment,
        start_lab: LabFactory,
        make_worker: WorkerFactory,
        tmp_path: Path,
    ) -> None:
        config = training_config(
            kind="torch",
            hosts=4,
            total_steps=STEPS,
            checkpoint_every=5,
            step_ms=250.0,
            seed=SEED,
            heartbeat_s=1.0,
        )
        assert config.training is not None
        config.training.hosts_per_building = 6
        lab = await start_lab(config, faults=True)
        fleet = lab.fleet(timeout=10.0)
        settings = Settings(fleet_url=lab.url)
        ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=dev_env.client)
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=OPTIONS
            )
            hosts = []
            for n, kind in enumerate(["straggler", "power-loss"], start=1):
                job = await wait_job(
                    fleet,
                    lambda j, n=n: (
                        j.state is JobState.RUNNING
                        and j.runs == n
                        and (j.checkpoint_step or 0) >= j.resumed_from + 5
                    ),
                    timeout_s=240,
                )
                hosts.append(job.hosts)
                building = job.hosts[0].rsplit("-h", 1)[0]
                body = {
                    # the lab slows the last rank's host; the others wait for it
                    "straggler": {"job": JOB, "factor": 4.0},
                    "power-loss": {"building": building},
                }[kind]
                await inject(lab, kind, **body)
                await wait_for_supervisor(dev_env.client, JOB, recovered(n), timeout_s=300)
            final = await handle.result()

        assert final.state is SupervisorState.FINISHED
        straggler, dark = final.failures
        assert [straggler.kind, dark.kind] == [FailureKind.STRAGGLER, FailureKind.BUILDING]
        slow_host = hosts[0][-1]
        assert straggler.quarantined == [slow_host]
        assert slow_host not in straggler.hosts_after
        building = hosts[1][0].rsplit("-h", 1)[0]
        assert all(not h.startswith(f"{building}-") for h in dark.hosts_after)
        job = await job_view(fleet)
        assert job.state is JobState.FINISHED and job.step == STEPS and job.runs == 3
        assert job.params_digest == uninterrupted_digest(tmp_path / "reference")
