"""The supervisor under stress: a crash loop halts it, a killed worker does not double a restart."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
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
from orchestrator.fleet.http import HttpFleet
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

OPTIONS = SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1, confirm_timeout_s=30)


class TestCrashLoopGuard:
    """A job that dies before every new checkpoint is restarted a bounded number of
    times, then halted with an alert instead of being restarted forever."""

    async def test_poisoned_job_halts(
        self, dev_env: WorkflowEnvironment, start_lab: LabFactory, make_worker: WorkerFactory
    ) -> None:
        lab = await start_lab(training_config(), faults=True)
        fleet = lab.fleet(timeout=10.0)
        ctx = registry.ActivityContext(
            settings=Settings(fleet_url=lab.url), fleet=fleet, client=dev_env.client
        )
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=OPTIONS
            )
            await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= 60)
            await inject(lab, "poison", job=JOB)
            final = await handle.result()

        assert final.state is SupervisorState.HALTED
        assert final.alert is not None and "no progress" in final.alert
        starts = [e for e in await fleet.audit() if e.kind == "training-start"]
        # launch + recoveries; the last failure is the one the guard refused to recover
        assert len(starts) == len(final.failures)
        assert len(final.failures) <= 1 + OPTIONS.crash_loop_limit + 1
        job = await job_view(fleet)
        assert job.state is JobState.CRASHED and job.runs == len(starts)


class TestDiskFullHalts:
    """A job whose disk is full is not restarted: the supervisor halts at the first such
    failure, recorded as ``fatal`` with "disk full" and alerted, instead of restarting it
    into the same full disk until the crash-loop guard gives up."""

    async def test_disk_full_halts_without_a_restart(
        self, dev_env: WorkflowEnvironment, start_lab: LabFactory, make_worker: WorkerFactory
    ) -> None:
        lab = await start_lab(training_config(), faults=True)
        fleet = lab.fleet(timeout=10.0)
        ctx = registry.ActivityContext(
            settings=Settings(fleet_url=lab.url), fleet=fleet, client=dev_env.client
        )
        async with make_worker(dev_env.client, registry.activities(ctx)) as worker:
            await end_earlier_supervisor(dev_env.client)
            handle = await start_supervisor(
                dev_env.client, JOB, task_queue=worker.task_queue, options=OPTIONS
            )
            await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= 40)
            await inject(lab, "disk-full", job=JOB)
            final = await handle.result()

        assert final.state is SupervisorState.HALTED
        assert final.alert is not None and "disk full" in final.alert
        assert [f.kind for f in final.failures] == [FailureKind.FATAL]
        assert "No space left on device" in final.failures[0].detail
        starts = [e for e in await fleet.audit() if e.kind == "training-start"]
        assert len(starts) == 1  # the launch; no restart into the full disk
        job = await job_view(fleet)
        assert job.state is JobState.CRASHED and job.failure is not None
        assert job.failure.reason == "disk_full"


def _spawn_worker(
    address: str, fleet_url: str, queue: str, state_dir: Path
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        TEMPORAL_ADDRESS=address,
        ORCHESTRATOR_FLEET_URL=fleet_url,
        ORCHESTRATOR_TASK_QUEUE=queue,
        ORCHESTRATOR_STATE_DIR=str(state_dir),
        ORCHESTRATOR_LOG_LEVEL="warning",
    )
    return subprocess.Popen(
        [sys.executable, "-c", "from orchestrator.cli import app; app()", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _wait_audit(fleet: HttpFleet, suffix: str, timeout_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not any(e.idempotency_key.endswith(suffix) for e in await fleet.audit()):
        if loop.time() > deadline:
            raise TimeoutError(f"no audit entry ending {suffix!r}")
        await asyncio.sleep(0.02)


class TestWorkerKilledMidRecovery:
    """SIGKILLing the worker in the middle of a recovery and starting another one
    finishes that recovery once: one stop, one quarantine, one restart in the audit log."""

    async def test_restart_applies_once(
        self, dev_env: WorkflowEnvironment, start_lab: LabFactory, tmp_path: Path
    ) -> None:
        lab = await start_lab(training_config(), faults=True)
        fleet = lab.fleet(timeout=10.0)
        address = dev_env.client.service_client.config.target_host
        queue = f"test-{uuid.uuid4().hex[:10]}"
        first = _spawn_worker(address, lab.url, queue, tmp_path)
        second = None
        try:
            await end_earlier_supervisor(dev_env.client)
            await start_supervisor(dev_env.client, JOB, task_queue=queue, options=OPTIONS)
            job = await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= 40, timeout_s=90)
            await inject(lab, "gpu-error", host=job.hosts[0])
            await _wait_audit(fleet, "failure-2/stop")
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            second = _spawn_worker(address, lab.url, queue, tmp_path)
            status = await wait_for_supervisor(
                dev_env.client,
                JOB,
                lambda s: len(s.failures) >= 1 and s.failures[0].confirmed,
                timeout_s=90,
            )
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(10)

        entries = await fleet.audit()
        recovery = [e for e in entries if "/failure-2/" in e.idempotency_key]
        assert sorted(e.kind for e in recovery) == [
            "host-quarantine",
            "training-start",
            "training-stop",
        ]
        starts = [e for e in entries if e.kind == "training-start"]
        assert len(starts) == 2
        job = await job_view(fleet)
        assert job.runs == 2 and job.state is JobState.RUNNING
        assert status.failures[0].hosts_after == job.hosts
