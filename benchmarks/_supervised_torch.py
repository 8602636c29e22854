"""The supervised arm of torch_recovery: a ``kind: torch`` lab job under the real workflow.

A live lab (in this process, on a thread) whose training cluster runs the PyTorch job
on ``ranks`` hosts of one building (``ranks + 2`` hosts per building, so a lost host
has a spare beside it and a dark building has a whole building to move to), a real
Temporal dev server, a worker, TrainingJobSupervisorWorkflow. Faults go through the
lab's fault API; each is matched to the first failure the supervisor detects after
it, and anything else it detected is counted as spurious.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from temporalio.worker import Worker

from orchestrator import registry
from orchestrator.clients.training import start_supervisor, supervisor_status
from orchestrator.config import Settings
from orchestrator.contracts.training import JobState, TrainingJob
from orchestrator.contracts.training_supervisor import (
    FailureRecord,
    SupervisorInput,
    SupervisorStatus,
)
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import load_config
from orchestrator.lab.server import LabThread, build_app
from orchestrator.lab.training.config import TrainingJobConfig, TrainingLabConfig
from orchestrator.worker import sandbox_runner
from testkit.temporal import start_dev_server

__all__ = ["run_supervised_arm"]

JOB = "bench-torch"


async def _job(fleet: HttpFleet) -> TrainingJob:
    cluster = await fleet.training_cluster()
    return next(j for j in cluster.jobs if j.spec.name == JOB)


async def _until_ready(fleet: HttpFleet, checkpoint_every: int, timeout_s: float) -> TrainingJob:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = await _job(fleet)
        if (
            job.state is JobState.RUNNING
            and (job.checkpoint_step or 0) >= job.resumed_from + checkpoint_every
        ):
            return job
        await asyncio.sleep(0.1)
    raise TimeoutError(f"supervised job never ready: {job.model_dump_json()}")


def _matching(status: SupervisorStatus, at: datetime) -> FailureRecord | None:
    return next((f for f in status.failures if f.detected_at >= at), None)


async def _until_recovered(client: Any, at: datetime, timeout_s: float) -> FailureRecord:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = await supervisor_status(client, JOB)
        found = _matching(status, at)
        if found is not None and found.confirmed:
            return found
        await asyncio.sleep(0.1)
    raise TimeoutError(f"fault at {at} not recovered in {timeout_s:g}s")


def _row(kind: str, at: datetime, f: FailureRecord) -> dict[str, Any]:
    assert f.decided_at is not None and f.recovered_at is not None and f.restarted_at
    return {
        "fault": kind,
        "number": f.number,
        "detected_as": f.kind.value,
        "step_at_fault": f.failed_at_step,
        "detect_s": (f.detected_at - at).total_seconds(),
        "decide_s": (f.decided_at - f.detected_at).total_seconds(),
        "restart_s": (f.recovered_at - f.decided_at).total_seconds(),
        # the lab's start call (the workflow's start activity): decided -> job launched
        "start_call_s": (f.restarted_at - f.decided_at).total_seconds(),
        "mttr_s": (f.recovered_at - at).total_seconds(),
        "resumed_from_step": f.resumed_from_step,
        "lost_steps": f.lost_steps,
        "recovered": f.confirmed,
        "hosts_after": list(f.hosts_after),
        "quarantined": list(f.quarantined),
        "rejected_checkpoints": [r.step for r in f.rejected_checkpoints],
    }


async def run_supervised_arm(
    workdir: Path,
    faults: list[str],
    *,
    ranks: int,
    steps: int,
    seed: int,
    heartbeat_s: float,
    hang_after_s: float,
    step_ms: float,
    checkpoint_every: int,
) -> dict[str, Any]:
    job_config = TrainingJobConfig(
        name=JOB,
        region="us-east",
        hosts=ranks,
        total_steps=steps,
        checkpoint_every=checkpoint_every,
        step_ms=step_ms,
        heartbeat_s=heartbeat_s,
        seed=seed,
        keep=4,
        kind="torch",
    )
    training = TrainingLabConfig(
        hosts_per_building=ranks + 2, spares_per_building=2, jobs=[job_config], workdir=workdir
    )
    config = load_config().model_copy(update={"training": training})
    env = await start_dev_server()
    lab = LabThread(build_app(config, mode="live", faults=True)).start()
    fleet = HttpFleet(lab.url, timeout=10.0)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    ctx = registry.ActivityContext(
        settings=Settings(fleet_url=lab.url, task_queue=queue), fleet=fleet, client=env.client
    )
    worker = Worker(
        env.client,
        task_queue=queue,
        workflows=registry.workflows(),
        activities=registry.activities(ctx),
        workflow_runner=sandbox_runner(),
    )
    rows = []
    started = time.monotonic()
    try:
        async with worker, httpx.AsyncClient(base_url=lab.url, timeout=10.0) as http:
            handle = await start_supervisor(
                env.client,
                JOB,
                task_queue=queue,
                options=SupervisorInput(
                    job=JOB, hang_after_s=hang_after_s, poll_s=0.2, confirm_timeout_s=300
                ),
            )
            for kind in faults:
                job = await _until_ready(fleet, checkpoint_every, 300.0)
                building = job.hosts[0].rsplit("-h", 1)[0]
                body = {
                    "rank-kill": {"job": JOB, "rank": 2},
                    "hang": {"job": JOB},
                    "straggler": {"job": JOB, "factor": 4.0},
                    "corrupt-checkpoint": {"job": JOB},
                    "host-down": {"host": job.hosts[1]},
                    "power-loss": {"building": building},
                }[kind]
                response = await http.post(f"/lab/training/faults/{kind}", json=body)
                response.raise_for_status()
                at = datetime.fromtimestamp(response.json()["at"], UTC)
                rows.append(_row(kind, at, await _until_recovered(env.client, at, 400.0)))
            final: SupervisorStatus = await asyncio.wait_for(handle.result(), 600)
            job = await _job(fleet)
    finally:
        await fleet.aclose()
        lab.stop()
        await env.shutdown()
    matched = {r["number"] for r in rows}
    return {
        "failures": rows,
        # failures nobody injected (a healthy rank taken for hung, say)
        "spurious": [f.kind.value for f in final.failures if f.number not in matched],
        "finished": final.state.value == "finished" and job.step == steps,
        "params_digest": job.params_digest,
        "runs": job.runs,
        "ettr": final.ettr,
        "wall_s": time.monotonic() - started,
    }
