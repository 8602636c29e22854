"""The lab's training cluster through the fleet API: hosts, jobs, checkpoints, faults."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.contracts.training import JobState, QuarantineRequest, StartJobRequest
from orchestrator.exceptions import FleetNotFound, VersionConflict
from orchestrator.policy.training.models import HostState, RejectReason
from orchestrator.policy.training.recovery import choose_checkpoint
from tests.fixtures.lab import LabFactory
from tests.workflows.training_support import JOB, inject, job_view, training_config, wait_job


class TestTopologyOfTheCluster:
    """Every building gets its hosts, the first of each in the spare pool, all GPUs healthy."""

    async def test_hosts(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(), mode="model")
        cluster = await lab.fleet().training_cluster()
        buildings = {h.building for h in cluster.hosts}
        assert len(cluster.hosts) == 4 * len(buildings)
        spares = [h for h in cluster.hosts if h.state is HostState.SPARE]
        assert len(spares) == len(buildings)
        assert all(all(h.gpu_health) for h in cluster.hosts)
        assert [j.state for j in cluster.jobs] == [JobState.PENDING]


class TestMutationsApplyOnce:
    """A start repeated with the same Idempotency-Key is answered from the ledger and
    starts nothing; a start on quarantined or busy hosts is refused."""

    async def test_start_is_idempotent(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(), mode="model")
        fleet = lab.fleet()
        request = StartJobRequest(job=JOB, hosts=["use-a-h00", "use-a-h01"])
        first = await fleet.start_training_job(request, idempotency_key="k-start")
        again = await fleet.start_training_job(request, idempotency_key="k-start")
        assert again == first
        assert (await job_view(fleet)).runs == 1
        assert [e.kind for e in await fleet.audit()] == ["training-start"]
        with pytest.raises(VersionConflict):
            await fleet.start_training_job(request, idempotency_key="k-start-2")

    async def test_quarantined_host_refused(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(), mode="model")
        fleet = lab.fleet()
        until = datetime.now(UTC) + timedelta(hours=1)
        await fleet.quarantine_host(
            QuarantineRequest(host="use-a-h00", reason="xid 79", until=until),
            idempotency_key="q1",
        )
        with pytest.raises(VersionConflict, match="quarantined"):
            await fleet.start_training_job(
                StartJobRequest(job=JOB, hosts=["use-a-h00", "use-a-h01"]),
                idempotency_key="s1",
            )
        await fleet.release_host("use-a-h00", idempotency_key="r1")
        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=["use-a-h00", "use-a-h01"]), idempotency_key="s2"
        )
        assert (await job_view(fleet)).state is JobState.RUNNING


class TestFaultsNeedFaultMode:
    """Without --faults the training fault routes do not exist."""

    async def test_no_fault_routes(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(), mode="model", faults=False)
        async with lab.http() as client:
            response = await client.post("/lab/training/faults/hang", json={"job": JOB})
        assert response.status_code == 404
        with pytest.raises(FleetNotFound):
            await lab.fleet().training_checkpoints("no-such-job")


class TestModelMode:
    """Model mode steps and checkpoints analytically; a corrupted checkpoint fails its
    digest check so the policy falls back, and a building power loss downs its hosts."""

    async def test_progress_corruption_and_power(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(step_ms=5.0), mode="model", faults=True)
        fleet = lab.fleet()
        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=["use-a-h00", "use-a-h01"]), idempotency_key="s"
        )
        await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= 60, timeout_s=10)
        fault = await inject(lab, "corrupt-checkpoint", job=JOB)
        job = await job_view(fleet)
        assert job.state is JobState.CRASHED
        checkpoints = (await fleet.training_checkpoints(JOB)).checkpoints
        choice = choose_checkpoint(checkpoints)
        assert choice.chosen is not None and choice.chosen.step < fault["step"]
        assert choice.rejected[0].reason is RejectReason.CORRUPT

        await inject(lab, "power-loss", building="use-a")
        cluster = await fleet.training_cluster()
        assert all(h.state is HostState.DOWN for h in cluster.hosts if h.building == "use-a")
        assert [i.building for i in cluster.incidents] == ["use-a"]


class TestLiveHang:
    """A hung live trainer stays alive but stops heartbeating and stepping."""

    async def test_hang(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(), faults=True)
        fleet = lab.fleet()
        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=["use-a-h00", "use-a-h01"]), idempotency_key="s"
        )
        await wait_job(fleet, lambda j: j.step > 0, timeout_s=30)
        await inject(lab, "hang", job=JOB)
        before = await job_view(fleet)
        await asyncio.sleep(2.5)
        after = await job_view(fleet)
        assert after.state is JobState.RUNNING
        assert after.step == before.step and after.last_heartbeat == before.last_heartbeat
        await fleet.stop_training_job(JOB, idempotency_key="stop")
        assert (await job_view(fleet)).state is JobState.STOPPED


class TestDiskFullFault:
    """The lab's disk-full fault: the job's next checkpoint write fails with ENOSPC, the
    fleet reports the crash with a non-retryable ``disk_full`` failure, and a restart on the
    same storage fails the same way."""

    async def test_reported_as_not_retryable(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(), faults=True)
        fleet = lab.fleet()
        hosts = ["use-a-h00", "use-a-h01"]
        await fleet.start_training_job(StartJobRequest(job=JOB, hosts=hosts), idempotency_key="s")
        await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= 20, timeout_s=30)
        await inject(lab, "disk-full", job=JOB)
        job = await wait_job(fleet, lambda j: j.state is JobState.CRASHED, timeout_s=30)
        assert job.failure is not None
        assert job.failure.reason == "disk_full" and not job.failure.retryable
        assert job.failure.exit_code == 5
        assert "No space left on device" in job.failure.detail

        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=hosts, checkpoint_step=job.checkpoint_step),
            idempotency_key="s2",
        )
        again = await wait_job(
            fleet, lambda j: j.runs == 2 and j.state is JobState.CRASHED, timeout_s=30
        )
        assert again.failure is not None and again.failure.reason == "disk_full"

    async def test_a_plain_crash_carries_no_failure(self, start_lab: LabFactory) -> None:
        lab = await start_lab(training_config(), faults=True)
        fleet = lab.fleet()
        await fleet.start_training_job(
            StartJobRequest(job=JOB, hosts=["use-a-h00", "use-a-h01"]), idempotency_key="s"
        )
        await wait_job(fleet, lambda j: j.step > 0, timeout_s=30)
        await inject(lab, "gpu-error", host="use-a-h00")
        job = await wait_job(fleet, lambda j: j.state is JobState.CRASHED, timeout_s=30)
        assert job.failure is None
