"""Runbook workflow tests share a model lab with room for a drain, a converged
rebalancer, and helpers to start runs and wait for task phases."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
import yaml
from temporalio.client import WorkflowHandle

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import RebalancerInput
from orchestrator.contracts.runbook import RunbookRunInput, TaskPhase
from orchestrator.lab.config import DemandConfig, LabConfig
from orchestrator.lab.memory import URL, MemoryFleet
from orchestrator.lab.server import LabThread, build_app
from orchestrator.models import RoutingWrite
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import Runbook
from testkit.lab import ROOMY_RPS, lab_config
from tests.fixtures.temporal import new_worker, start_time_skipping
from tests.workflows.conftest import Stack
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


def roomy_config() -> LabConfig:
    """The default model lab with room for a drain (the default demand leaves none)."""
    return lab_config(initial_routing="nearest", demand=DemandConfig(total_rps=ROOMY_RPS))


@pytest.fixture
def model_lab() -> Iterator[LabThread]:
    """The roomy lab on a port, for ``stack``."""
    with LabThread(build_app(roomy_config(), mode="model")) as lab:
        yield lab


@pytest.fixture
def fleet_config() -> LabConfig:
    """The roomy lab, for ``clock_stack``."""
    return roomy_config()


def runbook(text: str, **params: Any) -> Runbook:
    return bind(Runbook.model_validate(yaml.safe_load(text)), params)


async def _until_converged(
    stack: Stack, handle: WorkflowHandle[TrafficRebalanceWorkflow, None], limit_s: float = 40
) -> None:
    for _ in range(int(limit_s / 0.3)):
        status = await handle.query(TrafficRebalanceWorkflow.status)
        if status.epochs and status.epochs[-1].outcome == "unchanged":
            return
        await stack.sleep(0.3)
    raise AssertionError(f"rebalancer did not converge: {status.epochs[-3:]}")


async def _start_rebalancer(stack: Stack) -> WorkflowHandle[TrafficRebalanceWorkflow, None]:
    return await stack.client.start_workflow(
        TrafficRebalanceWorkflow.run,
        RebalancerInput(epoch_s=0.5, window_s=5),
        id="rebalancer",
        task_queue=stack.task_queue,
    )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def converged_table(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    """The table the rebalancer converges to on the roomy lab, found once per session on
    Temporal's clock (in real time its epochs took 15 s, for every test that needed it)."""
    env = await start_time_skipping()
    fleet = MemoryFleet(roomy_config())
    queue = f"converge-{uuid.uuid4().hex[:8]}"
    settings = Settings(task_queue=queue, fleet_url=URL, state_dir=tmp_path_factory.mktemp("c"))
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=env.client)
    try:
        async with new_worker(env.client, registry.activities(ctx), task_queue=queue):
            stack = Stack(env.client, fleet, URL, queue, settings, env)
            handle = await _start_rebalancer(stack)
            await _until_converged(stack, handle, limit_s=600)
            await handle.terminate("converged")
        return (await fleet.routing()).fractions
    finally:
        await fleet.aclose()
        await env.shutdown()


@pytest_asyncio.fixture(loop_scope="session")
async def balanced(
    stack: Stack, converged_table: dict[str, dict[str, float]]
) -> AsyncIterator[dict[str, dict[str, float]]]:
    """A running rebalancer (id ``rebalancer``) that has converged; yields the converged table.

    The lab starts at the table the rebalancer converges to (``converged_table``), so its
    first epoch already changes nothing: no test waits for the epochs that lead there."""
    table = await stack.fleet.routing()
    seed = RoutingWrite(fractions=converged_table, reason="test: the converged table")
    await stack.fleet.write_routing(seed, if_match=table.version, idempotency_key="seed")
    handle = await _start_rebalancer(stack)
    await _until_converged(stack, handle)
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
    handle: WorkflowHandle,
    task: str,
    phase: TaskPhase,
    limit_s: float = 30,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Until ``task`` is in ``phase``, polling every 0.2 s of ``sleep`` (``stack.sleep`` on
    the time-skipping server moves workflow time on) for up to ``limit_s`` of it."""
    polls = int(limit_s / 0.2)
    while True:
        status = await handle.query(RunbookWorkflow.status)
        state = next(t for t in status.tasks if t.id == task)
        if state.phase == phase:
            return
        polls -= 1
        assert polls > 0, (
            f"{task} stuck in {state.phase}: "
            + "; ".join(f"{t.id}={t.phase}:{t.message}" for t in status.tasks)
            + " | "
            + " / ".join(status.events)
        )
        await sleep(0.2)


def close(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> bool:
    return all(
        abs(a.get(p, {}).get(r, 0.0) - b.get(p, {}).get(r, 0.0)) < 1e-6
        for p in set(a) | set(b)
        for r in set(a.get(p, {})) | set(b.get(p, {}))
    )
