"""TrainingJobSupervisorWorkflow supervises the PyTorch job: a killed rank, a hung rank.

Real Temporal, a real lab, 4 hosts each running a torchrun agent and one DDP rank.
A rank is SIGKILLed, then one is SIGSTOPped, through the lab's fault API; the supervisor
sees the crash, then the hang, restarts the job each time from its newest verified DCP
checkpoint, and the job reaches its last step
with the parameters of an uninterrupted run, bit for bit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.training import start_supervisor, wait_for_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.training import JobState
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    SupervisorInput,
    SupervisorState,
)
from orchestrator.lab.training.torchjob.args import parse_args
from orchestrator.lab.training.torchjob.launch import TorchJob
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import WorkerFactory
from tests.workflows.test_training_supervisor import recovered
from tests.workflows.training_support import (
    JOB,
    end_earlier_supervisor,
    inject,
    job_view,
    training_config,
    wait_job,
)

#: a run's first heartbeat can take tens of seconds (four agents and four ranks import
#: torch on a shared 2-core machine): the supervisor's start-up grace covers it; after
#: that, missing heartbeats are a hang
OPTIONS = SupervisorInput(job=JOB, hang_after_s=2.5, poll_s=0.2, confirm_timeout_s=240)
STEPS = 40
SEED = 11


def uninterrupted_digest(workdir: Path) -> str:
    """The same job (seed, hosts, steps) run straight through, outside the lab."""
    job = TorchJob.start(
        parse_args(
            [
                "--job=reference",
                f"--workdir={workdir}",
                "--hosts=r0,r1,r2,r3",
                f"--total-steps={STEPS}",
                "--checkpoint-every=5",
                f"--seed={SEED}",
            ]
        )
    )
    try:
        assert job.wait(300) == [0, 0, 0, 0], job.log_tail("r0")
    finally:
        job.kill()
    progress = job.progress()
    assert progress is not None
    return progress.params_digest


class TestTorchJobRankKilled:
    """A SIGKILLed rank takes the DDP job down, a SIGSTOPped one stalls it; the supervisor
    detects each (the hang within two hang thresholds), restarts the job from its newest
    verified checkpoint, and it finishes its last step bit-identical to an uninterrupted run."""

    async def test_rank_kill_is_recovered(
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
            await wait_job(
                fleet,
                lambda j: j.state is JobState.RUNNING and (j.checkpoint_step or 0) >= 5,
                timeout_s=240,
            )
            await inject(lab, "rank-kill", job=JOB, rank=2)
            await wait_for_supervisor(dev_env.client, JOB, recovered(1), timeout_s=300)
            await wait_job(
                fleet,
                lambda j: (
                    j.state is JobState.RUNNING
                    and j.runs == 2
                    and (j.checkpoint_step or 0) >= j.resumed_from + 5
                ),
                timeout_s=240,
            )
            # A hung rank: SIGSTOPped, so every other rank blocks in all-reduce and no
            # process exits; only rank 0's missing heartbeats reveal it.
            hang = await inject(lab, "hang", job=JOB)
            await wait_for_supervisor(dev_env.client, JOB, recovered(2), timeout_s=300)
            final = await handle.result()

        assert final.state is SupervisorState.FINISHED
        assert [f.kind for f in final.failures] == [FailureKind.CRASH, FailureKind.HANG]
        onset = datetime.fromtimestamp(hang["at"], UTC)
        assert (final.failures[1].detected_at - onset).total_seconds() <= 2 * 2.5
        job = await job_view(fleet)
        assert job.state is JobState.FINISHED and job.step == STEPS
        assert job.resumed_from >= 10 and job.runs == 3
        checkpoints = (await fleet.training_checkpoints(JOB)).checkpoints
        assert checkpoints[-1].step == STEPS
        assert checkpoints[-1].digest == checkpoints[-1].manifest_digest
        assert job.params_digest == uninterrupted_digest(tmp_path / "reference")
