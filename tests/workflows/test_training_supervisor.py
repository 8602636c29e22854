"""TrainingJobSupervisorWorkflow against a live lab: real trainers, real faults, real Temporal."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.training import start_supervisor, wait_for_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.training import JobState
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    SupervisorInput,
    SupervisorState,
    SupervisorStatus,
)
from orchestrator.lab.training.sgd import params_digest, train_uninterrupted
from orchestrator.policy.training.models import RejectReason
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import WorkerFactory
from tests.workflows.training_support import (
    HEARTBEAT_S,
    JOB,
    end_earlier_supervisor,
    inject,
    job_view,
    training_config,
    wait_job,
)


def recovered(n: int) -> Callable[[SupervisorStatus], bool]:
    """Failure ``n`` has been recovered and confirmed."""
    return lambda s: len(s.failures) >= n and s.failures[n - 1].confirmed


OPTIONS = SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1, confirm_timeout_s=60)


class TestJobSurvivesFiveFailures:
    """A job hit by a GPU error, a dead host, a hang, a corrupt checkpoint and a building
    power loss is recovered each time, never resumes from the corrupt checkpoint, is
    detected within two heartbeat intervals, and ends bit-identical to an uninterrupted run."""

    async def test_five_failures(
        self,
        dev_env: WorkflowEnvironment,
        start_lab: LabFactory,
        make_worker: WorkerFactory,
        tmp_path: object,
    ) -> None:
        lab = await start_lab(training_config(), faults=True)
        fleet = lab.fleet(timeout=10.0)
        settings = Settings(fleet_url=lab.url)
        ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=dev_env.client)
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=OPTIONS
            )
            corrupted: int | None = None
            faults = []
            for n, kind in enumerate(
                ["gpu-error", "host-down", "hang", "corrupt-checkpoint", "power-loss"], start=1
            ):
                job = await wait_job(
                    fleet,
                    lambda j: (
                        j.state is JobState.RUNNING
                        and j.checkpoint_step is not None
                        and j.checkpoint_step >= j.resumed_from + 40
                    ),
                )
                host = job.hosts[0]
                building = next(
                    h.building for h in (await fleet.training_cluster()).hosts if h.name == host
                )
                body = {
                    "gpu-error": {"host": host},
                    "host-down": {"host": host},
                    "hang": {"job": JOB},
                    "corrupt-checkpoint": {"job": JOB},
                    "power-loss": {"building": building},
                }[kind]
                fault = await inject(lab, kind, **body)
                if kind == "corrupt-checkpoint":
                    corrupted = fault["step"]
                faults.append((fault, building, host))
                await wait_for_supervisor(dev_env.client, JOB, recovered(n), timeout_s=60)
            final = await handle.result()

        assert final.state is SupervisorState.FINISHED
        assert [f.kind for f in final.failures] == [
            FailureKind.GPU,
            FailureKind.HOST_DOWN,
            FailureKind.HANG,
            FailureKind.CRASH,
            FailureKind.BUILDING,
        ]
        job = await job_view(fleet)
        assert job.state is JobState.FINISHED and job.step == 400
        assert job.params_digest == params_digest(train_uninterrupted(11, 400))

        for (fault, _building, _host), failure in zip(faults, final.failures, strict=True):
            onset = datetime.fromtimestamp(fault["at"], UTC)
            assert (failure.detected_at - onset).total_seconds() <= 2 * HEARTBEAT_S
            assert failure.recovered_at is not None and failure.recovered_at > onset

        assert corrupted is not None
        corrupt_failure = final.failures[3]
        assert any(
            r.step == corrupted and r.reason is RejectReason.CORRUPT
            for r in corrupt_failure.rejected_checkpoints
        )
        starts = [e for e in await fleet.audit() if e.kind == "training-start"]
        assert len(starts) == 1 + 5
        assert corrupted not in [e.request.get("checkpoint_step") for e in starts[4:]]
        assert job.runs == 6

        cluster = await fleet.training_cluster()
        gpu_host = faults[0][2]
        assert gpu_host in {r.host for r in cluster.quarantine}
        lost_building = faults[4][1]
        by_name = {h.name: h for h in cluster.hosts}
        assert all(by_name[h].building != lost_building for h in final.failures[4].hosts_after)
