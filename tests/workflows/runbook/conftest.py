"""Runbook workflow tests share a model lab with room for a drain, a converged
rebalancer, and helpers to start runs and wait for task phases."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
import yaml
from temporalio.client import WorkflowHandle

from orchestrator.contracts.rebalancer import RebalancerInput
from orchestrator.contracts.runbook import RunbookRunInput, TaskPhase
from orchestrator.lab.config import DemandConfig
from orchestrator.lab.server import LabThread, build_app
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import Runbook
from tests.workflows.conftest import ROOMY_RPS, Stack, lab_config
from workflows.rebalancer import TrafficRebalanceWorkflow
from workflows.runbook import RunbookWorkflow

DRAIN = """
name: test-drain
kind: drain
parameters:
  region: {type: region}
tasks:
  - id: shift-traffic
    template: traffic_shift
    args: {region: "${params.region}", ratio: 0}
    steps: "2 x 50%"
    wait: 0.5
    gates: ["error_rate in others-of(${params.region}) <= 0.05"]
    restore: auto
  - id: sessions-off
    template: service_weight
    depends_on: [shift-traffic]
    args: {region: "${params.region}", service: sessions, weight: 0}
    restore: auto
  - id: move-kv
    template: shard_shift
    depends_on: [shift-traffic]
    args: {service: kv, region: "${params.region}", direction: out}
    steps: "2 x 50%"
    restore: auto
  - id: stop-batch
    template: job_update
    depends_on: [sessions-off, move-kv]
    args: {operation: stop, region: "${params.region}"}
    restore: auto
  - id: sign-off
    template: approval
    depends_on: [stop-batch]
    args: {approvers: [alice], timeout: 60}
"""


@pytest.fixture
def model_lab() -> Iterator[LabThread]:
    """The default model lab with room for a drain (the default demand leaves none)."""
    config = lab_config(initial_routing="nearest", demand=DemandConfig(total_rps=ROOMY_RPS))
    with LabThread(build_app(config, mode="model")) as lab:
        yield lab


def runbook(text: str, **params: Any) -> Runbook:
    return bind(Runbook.model_validate(yaml.safe_load(text)), params)


@pytest_asyncio.fixture(loop_scope="session")
async def balanced(stack: Stack) -> AsyncIterator[dict[str, dict[str, float]]]:
    """A running rebalancer (id ``rebalancer``) that has converged; yields the converged table."""
    handle = await stack.client.start_workflow(
        TrafficRebalanceWorkflow.run,
        RebalancerInput(epoch_s=0.5, window_s=5),
        id="rebalancer",
        task_queue=stack.task_queue,
    )
    deadline = asyncio.get_running_loop().time() + 40
    while True:
        status = await handle.query(TrafficRebalanceWorkflow.status)
        if status.epochs and status.epochs[-1].outcome == "unchanged":
            break
        assert asyncio.get_running_loop().time() < deadline, "rebalancer did not converge"
        await asyncio.sleep(0.3)
    yield (await stack.fleet.routing()).fractions
    await handle.terminate("test over")


async def start(stack: Stack, rb: Runbook, **fields: Any) -> WorkflowHandle[RunbookWorkflow, Any]:
    return await stack.client.start_workflow(
        RunbookWorkflow.run,
        RunbookRunInput(runbook=rb, requested_by="test", **fields),
        id=f"{rb.name}-{uuid.uuid4().hex[:6]}",
        task_queue=stack.task_queue,
    )


async def wait_phase(
    handle: WorkflowHandle, task: str, phase: TaskPhase, limit_s: float = 30
) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while True:
        status = await handle.query(RunbookWorkflow.status)
        state = next(t for t in status.tasks if t.id == task)
        if state.phase == phase:
            return
        assert asyncio.get_running_loop().time() < deadline, (
            f"{task} stuck in {state.phase}: "
            + "; ".join(f"{t.id}={t.phase}:{t.message}" for t in status.tasks)
            + " | "
            + " / ".join(status.events)
        )
        await asyncio.sleep(0.2)


def close(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> bool:
    return all(
        abs(a.get(p, {}).get(r, 0.0) - b.get(p, {}).get(r, 0.0)) < 1e-6
        for p in set(a) | set(b)
        for r in set(a.get(p, {})) | set(b.get(p, {}))
    )
