"""Shared pieces of the training-supervisor tests: a lab config, fault injection, waits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError

from orchestrator.contracts.training import TrainingJob
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import LabConfig, load_config
from orchestrator.lab.training.config import TrainingJobConfig, TrainingLabConfig
from tests.fixtures.lab import RunningLab

JOB = "llm-test"
HEARTBEAT_S = 1.0


def training_config(**job: Any) -> LabConfig:
    spec = {
        "name": JOB,
        "region": "us-east",
        "hosts": 2,
        "total_steps": 400,
        "checkpoint_every": 20,
        "step_ms": 20.0,
        "heartbeat_s": HEARTBEAT_S,
        "seed": 11,
        "keep": 4,
    } | job
    training = TrainingLabConfig(hosts_per_building=4, jobs=[TrainingJobConfig(**spec)])
    return load_config().model_copy(update={"training": training})


async def job_view(fleet: HttpFleet) -> TrainingJob:
    cluster = await fleet.training_cluster()
    return next(j for j in cluster.jobs if j.spec.name == JOB)


async def wait_job(
    fleet: HttpFleet, predicate: Callable[[TrainingJob], bool], timeout_s: float = 60.0
) -> TrainingJob:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        job = await job_view(fleet)
        if predicate(job):
            return job
        if loop.time() > deadline:
            raise TimeoutError(f"job never matched; last {job.model_dump_json()}")
        await asyncio.sleep(0.1)


async def inject(lab: RunningLab, kind: str, **body: Any) -> dict[str, Any]:
    async with lab.http() as client:
        response = await client.post(f"/lab/training/faults/{kind}", json=body)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result


async def end_earlier_supervisor(client: Client) -> None:
    """Tests share one dev server and the id ``training-<job>``; ``start_supervisor`` keeps a
    running supervisor, so one an earlier test left running must not be picked up."""
    with contextlib.suppress(RPCError):  # none running
        await client.get_workflow_handle(f"training-{JOB}").terminate("an earlier test's run")
