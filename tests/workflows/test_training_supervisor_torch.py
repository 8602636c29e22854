"""TrainingJobSupervisorWorkflow supervises the PyTorch job through four real faults.

Real Temporal, a real lab, 4 hosts each running a torchrun agent and one DDP rank.
Through the lab's fault API: a rank SIGKILLed, a rank SIGSTOPped (hung in all-reduce), a
host lost, the newest checkpoint's shard corrupted. The supervisor detects each, restarts
the job from its newest verified DCP checkpoint (on a spare in place of the lost host;
never from the corrupt one), and the job reaches its last step
with the parameters of an uninterrupted run, bit for bit.
"""

from __future__ import annotations

import time
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
from orchestrator.policy.training.models import RejectReason
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
#: that, missing heartbeats are a hang. Ranks beat every second; 6 missed beats, not 2.5,
#: because a healthy rank on a loaded 2-core machine once went 2.6 s between beats and the
#: supervisor rightly took it for a hang (a fifth, uninjected failure)
OPTIONS = SupervisorInput(job=JOB, hang_after_s=6.0, poll_s=0.2, confirm_timeout_s=240)
STEPS = 60
SEED = 11


#: the uninterrupted run's digest, once per process: it is deterministic (that is what the
#: tests check), and this file and test_training_supervisor_torch_moves.py, which share it,
#: are queued on one xdist worker (tests/fixtures/ordering.py): a second run of four ranks
#: would only cost CPU
_DIGEST: list[str] = []


def uninterrupted_digest(workdir: Path) -> str:
    """The same job (seed, hosts, steps) run straight through, outside the lab."""
    if not _DIGEST:
        _DIGEST.append(_run_uninterrupted(workdir))
    return _DIGEST[0]


def _run_uninterrupted(workdir: Path) -> str:
    started = time.monotonic()
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
    print(f"uninterrupted run: {time.monotonic() - started:.1f} s")
    return progress.params_digest


class TestTorchJobSurvivesFourFaults:
    """A SIGKILLed rank, a SIGSTOPped rank, a lost host and a corrupt shard: the supervisor
    detects each (the hang within two hang thresholds), restarts the job from its newest
    verified checkpoint, and it finishes its last step bit-identical to an uninterrupted run."""

    async def test_four_faults(
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
            faults = []
            for n, kind in enumerate(
                ["rank-kill", "hang", "host-down", "corrupt-checkpoint"], start=1
            ):
                job = await wait_job(
                    fleet,
                    lambda j, n=n: (
                        j.state is JobState.RUNNING
                        and j.runs == n
                        and (j.checkpoint_step or 0) >= j.resumed_from + 5
                    ),
                    timeout_s=240,
                )
                body = {
                    # SIGKILL: the peers' collectives fail, every agent exits
                    "rank-kill": {"job": JOB, "rank": 2},
                    # SIGSTOP: the other ranks block in all-reduce, no process exits,
                    # only rank 0's missing heartbeats reveal it
                    "hang": {"job": JOB},
                    "host-down": {"host": job.hosts[1]},
                    "corrupt-checkpoint": {"job": JOB},
                }[kind]
                faults.append(await inject(lab, kind, **body))
                await wait_for_supervisor(dev_env.client, JOB, recovered(n), timeout_s=300)
            final = await handle.result()

        assert final.state is SupervisorState.FINISHED
        assert [f.kind for f in final.failures] == [
            FailureKind.CRASH,
            FailureKind.HANG,
            FailureKind.HOST_DOWN,
            FailureKind.CRASH,
        ]
        onset = datetime.fromtimestamp(faults[1]["at"], UTC)
        assert (final.failures[1].detected_at - onset).total_seconds() <= 2 * OPTIONS.hang_after_s
        corrupted = faults[3]["step"]
        assert any(
            r.step == corrupted and r.reason is RejectReason.CORRUPT
            for r in final.failures[3].rejected_checkpoints
        )
        assert faults[2]["target"] not in final.failures[2].hosts_after
        job = await job_view(fleet)
        assert job.state is JobState.FINISHED and job.step == STEPS
        assert job.runs == 5 and job.resumed_from < corrupted
        checkpoints = (await fleet.training_checkpoints(JOB)).checkpoints
        assert checkpoints[-1].step == STEPS
        assert checkpoints[-1].digest == checkpoints[-1].manifest_digest
        assert job.params_digest == uninterrupted_digest(tmp_path / "reference")
