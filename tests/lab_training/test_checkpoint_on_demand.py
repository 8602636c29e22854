"""Checkpoint on demand (issue 25): a stop with ``checkpoint`` writes a checkpoint at the
job's current step first, so a restart from it loses no step; the same key applies once."""

from __future__ import annotations

import pytest

from orchestrator.contracts.training import JobState, StartJobRequest
from tests.fixtures.lab import LabFactory
from tests.workflows.training_support import JOB, job_view, training_config, wait_job


class TestCheckpointOnDemand:
    """Off the checkpoint schedule (every 20 steps here, at a step that is not a multiple),
    the stop commits a checkpoint at the step reached; a restart resumes there, runs to the
    end, and a second stop with the same key is answered from the ledger."""

    @pytest.mark.parametrize("mode", ["live", "model"])
    async def test_stop_with_checkpoint(self, start_lab: LabFactory, mode: str) -> None:
        lab = await start_lab(training_config(checkpoint_every=1000, total_steps=300), mode=mode)
        fleet = lab.fleet()
        hosts = ["use-a-h00", "use-a-h01"]
        await fleet.start_training_job(StartJobRequest(job=JOB, hosts=hosts), idempotency_key="s1")
        await wait_job(fleet, lambda j: j.step >= 5, timeout_s=60)
        stopped = await fleet.stop_training_job(JOB, idempotency_key="ck", checkpoint=True)
        again = await fleet.stop_training_job(JOB, idempotency_key="ck", checkpoint=True)
        assert again == stopped
        job = await job_view(fleet)
        assert job.state is JobState.STOPPED
        step = stopped.detail["checkpoint_step"]
        assert step == stopped.detail["step"] == job.step and step >= 5
        steps = [c.step for c in (await fleet.training_checkpoints(JOB)).checkpoints]
        assert steps == [step]  # none on the schedule yet: only the one on demand
        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=["use-b-h00", "use-b-h01"], checkpoint_step=step),
            idempotency_key="s2",
        )
        done = await wait_job(fleet, lambda j: j.state is JobState.FINISHED, timeout_s=120)
        assert done.resumed_from == step and done.step == 300

    async def test_plain_stop_has_no_checkpoint_field(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(), mode="model")
        fleet = lab.fleet()
        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=["use-a-h00", "use-a-h01"]), idempotency_key="s1"
        )
        stopped = await fleet.stop_training_job(JOB, idempotency_key="st")
        assert "checkpoint_step" not in stopped.detail


class TestTorchCheckpointOnDemand:
    """The PyTorch job: every rank stops at the same step and writes its shard of one
    checkpoint there; the restart on other hosts resumes from it and finishes."""

    async def test_torch_stop_with_checkpoint(self, start_lab: LabFactory) -> None:
        config = training_config(
            kind="torch", hosts=2, total_steps=60, checkpoint_every=1000, step_ms=100.0
        )
        lab = await start_lab(config)
        fleet = lab.fleet(timeout=180.0)
        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=["use-a-h00", "use-a-h01"]), idempotency_key="s1"
        )
        await wait_job(fleet, lambda j: j.step >= 5, timeout_s=180)
        stopped = await fleet.stop_training_job(JOB, idempotency_key="ck", checkpoint=True)
        job = await job_view(fleet)
        assert job.state is JobState.STOPPED
        step = stopped.detail["checkpoint_step"]
        assert step == stopped.detail["step"] and step >= 5
        steps = [c.step for c in (await fleet.training_checkpoints(JOB)).checkpoints]
        assert steps == [step]
        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=["use-b-h00", "use-b-h01"], checkpoint_step=step),
            idempotency_key="s2",
        )
        done = await wait_job(fleet, lambda j: j.state is JobState.FINISHED, timeout_s=300)
        assert done.resumed_from == step and done.step == 60
