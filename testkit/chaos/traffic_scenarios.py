"""Chaos scenarios of the traffic workflows: the rebalancer, a region drain + restore, a load test.

Each is a :class:`~testkit.chaos.harness.Scenario`; they are registered in
:mod:`testkit.chaos.scenarios`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

from temporalio.client import WorkflowHandle

from testkit.chaos.harness import (
    ROOT,
    ChaosPlan,
    ChaosStack,
    Scenario,
    effective_weights,
    max_difference,
    repeated_changes,
)

__all__ = [
    "DrainRestore",
    "LoadTest",
    "RebalanceEpochs",
    "start_rebalancer",
    "wait_converged",
    "wait_converged_handle",
]


async def start_rebalancer(
    stack: ChaosStack, epochs_per_run: int = 200
) -> WorkflowHandle[Any, Any]:
    from orchestrator.contracts.rebalancer import RebalancerInput
    from workflows.rebalancer import TrafficRebalanceWorkflow

    return await stack.client.start_workflow(
        TrafficRebalanceWorkflow.run,
        RebalancerInput(epoch_s=0.5, window_s=5, epochs_per_run=epochs_per_run),
        id="rebalancer",  # the id the worker's override activities address
        task_queue=stack.task_queue,
    )


async def wait_converged(stack: ChaosStack, limit_s: float) -> None:
    """Until the rebalancer's last two epochs changed nothing (queries retried through kills)."""
    await wait_converged_handle(stack.client.get_workflow_handle("rebalancer"), limit_s)


async def wait_converged_handle(handle: WorkflowHandle[Any, Any], limit_s: float) -> None:
    from workflows.rebalancer import TrafficRebalanceWorkflow

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            status = await asyncio.wait_for(handle.query(TrafficRebalanceWorkflow.status), 5)
            last = status.epochs[-2:]
            if len(status.epochs) >= 3 and all(e.outcome == "unchanged" for e in last):
                return
        await asyncio.sleep(0.3)
    raise TimeoutError(f"rebalancer did not converge within {limit_s:g}s")


async def spread(stack: ChaosStack) -> float:
    health = await stack.read(lambda: stack.fleet.health(5))
    utils = [r.utilization for r in health.regions if r.utilization is not None]
    return max(utils) - min(utils)


class RebalanceEpochs(Scenario):
    """From nearest-region routing the rebalancer converges, continuing-as-new on the way."""

    name = "rebalance"

    async def run(self, stack: ChaosStack) -> None:
        stack.notes["spread_before"] = await spread(stack)
        # Few epochs per run, so continue-as-new happens under the chaos too.
        await start_rebalancer(stack, epochs_per_run=8)
        await wait_converged(stack, self.limit_s)

    async def verify(self, stack: ChaosStack) -> list[str]:
        problems = []
        after = await spread(stack)
        if after >= 0.03:
            problems.append(f"utilization spread {after:.3f} >= 0.03 after convergence")
        if stack.notes["spread_before"] < 0.1:
            problems.append("the lab started balanced: nothing was tested")
        routing = [e for e in await stack.read(stack.fleet.audit) if e.kind == "routing"]
        if not routing:
            problems.append("the rebalancer never published")
        return problems


class DrainRestore(Scenario):
    """region-drain then region-restore: drained in between, the original table after."""

    name = "drain"
    region = "eu-west"
    # Two drains' worth of steps, gates and a dev-server restart: the full benchmark's
    # trials took 134 s on average, and one CI run on a busy machine passed 150 s.
    limit_s = 300.0
    # The default demand leaves the other two regions no room for eu-west's load, so
    # the capacity check (rightly) refuses; this much lets a drain start.
    total_rps = 120.0

    async def prepare(self, stack: ChaosStack) -> None:
        await start_rebalancer(stack)
        await wait_converged(stack, 60)
        stack.notes["routing"] = (await stack.read(stack.fleet.routing)).fractions
        stack.notes["topology"] = await stack.read(stack.fleet.topology)

    async def _runbook(self, stack: ChaosStack, name: str, restore_of: str | None = None) -> str:
        from orchestrator.clients.runbook_runs import runbook_result
        from orchestrator.contracts.runbook import RunbookRunInput
        from orchestrator.runbook.lint import load_runbook
        from workflows.runbook import RunbookWorkflow

        rb = load_runbook(
            ROOT
            / "runbooks"
            / f"{name}.yaml",  # The model lab's queues put p99 near 250 ms once one region is gone;
            # the gates are not what this measures, so their SLO is loose.
            {"region": self.region, "step_wait": "0.3s", "slo_p99_ms": 2000},
        )
        handle = await stack.client.start_workflow(
            RunbookWorkflow.run,
            RunbookRunInput(runbook=rb, mode="drill", requested_by="chaos", restore_of=restore_of),
            id=f"{name}-{self.region}",
            task_queue=stack.task_queue,
        )
        report = await asyncio.wait_for(runbook_result(handle), self.limit_s)
        return str(report.outcome)

    async def run(self, stack: ChaosStack) -> None:
        stack.notes["drain"] = await self._runbook(stack, "region-drain")
        table = (await stack.read(stack.fleet.routing)).fractions
        topo = await stack.read(stack.fleet.topology)
        stack.notes["drained"] = {
            "share": max(s.get(self.region, 0.0) for s in table.values()),
            "sessions": topo.service_weights.get(f"{self.region}/sessions"),
            "primaries": sum(1 for s in topo.shards if s.primary == self.region),
            "jobs": sum(1 for j in topo.batch_jobs if j.region == self.region and j.running),
        }
        stack.notes["restore"] = await self._runbook(
            stack, "region-restore", restore_of=f"region-drain-{self.region}"
        )

    async def verify(self, stack: ChaosStack) -> list[str]:
        problems = []
        if stack.notes["drain"] != "completed" or stack.notes["restore"] != "completed":
            problems.append(f"drain {stack.notes['drain']}, restore {stack.notes['restore']}")
        drained = stack.notes["drained"]
        if drained != {"share": 0.0, "sessions": 0.0, "primaries": 0, "jobs": 0}:
            problems.append(f"{self.region} not fully drained: {drained}")
        await wait_converged(stack, 60)
        diff = max_difference(
            (await stack.read(stack.fleet.routing)).fractions, stack.notes["routing"]
        )
        # The restore publishes the very table recorded before the drain.
        if diff > 1e-6:
            problems.append(f"routing {diff:.3g} away from the original table after restore")
        before, after = stack.notes["topology"], await stack.read(stack.fleet.topology)
        if effective_weights(after) != effective_weights(before):
            problems.append("service weights differ from before the drain")
        if sorted((s.id, s.primary) for s in after.shards) != sorted(
            (s.id, s.primary) for s in before.shards
        ):
            problems.append("kv primaries differ from before the drain")
        if [(j.name, j.running) for j in after.batch_jobs] != [
            (j.name, j.running) for j in before.batch_jobs
        ]:
            problems.append("batch jobs differ from before the drain")
        return problems + repeated_changes(await stack.read(stack.fleet.audit))


class LoadTest(Scenario):
    """LiveLoadTestWorkflow ramps a region and puts its routing back."""

    name = "loadtest"
    region = "eu-west"
    #: the activity the first kill lands in: the pin, which waits for the rebalancer's epoch
    #: (the longest call the test makes, up to 120 s if a lost attempt were not noticed)
    aim_at = "request_override"

    def __init__(self) -> None:
        self._handle: WorkflowHandle[Any, Any] | None = None
        self._aimed = self.aimed_hit = False

    async def next_kill(self, plan: ChaosPlan, rng: random.Random) -> None:
        """The first kill lands while a pin is in flight (within a minute, or it counts as
        missed); later ones at random gaps."""
        if self._aimed:
            await super().next_kill(plan, rng)
            return
        self._aimed = True
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._handle is not None:
                with contextlib.suppress(Exception):
                    described = await self._handle.describe()
                    pending = described.raw_description.pending_activities
                    if any(a.activity_type.name == self.aim_at for a in pending):
                        self.aimed_hit = True
                        return
            await asyncio.sleep(0.05)

    async def prepare(self, stack: ChaosStack) -> None:
        await start_rebalancer(stack)
        await wait_converged(stack, 60)
        stack.notes["routing"] = (await stack.read(stack.fleet.routing)).fractions

    async def run(self, stack: ChaosStack) -> None:
        from orchestrator.contracts.load_test import LoadTestInput
        from workflows.load_test import LiveLoadTestWorkflow

        handle = await stack.client.start_workflow(
            LiveLoadTestWorkflow.run,
            LoadTestInput(
                region=self.region,
                p99_slo_ms=400.0,
                max_utilization=0.9,
                window_s=0.5,
                settle_s=0.0,
            ),
            id=f"loadtest-{self.region}",
            task_queue=stack.task_queue,
        )
        self._handle = handle
        result = await asyncio.wait_for(handle.result(), self.limit_s)
        stack.notes["result"] = result

    async def verify(self, stack: ChaosStack) -> list[str]:
        from workflows.rebalancer import TrafficRebalanceWorkflow

        problems = []
        result = stack.notes["result"]
        if not self.aimed_hit:
            problems.append(f"no kill landed in {self.aim_at}: the test missed its aim")
        if not result.routing_restored:
            problems.append(f"load test says routing not restored ({result.reason})")
        if result.steps < 1:
            problems.append(f"load test applied no step ({result.outcome}: {result.reason})")
        await wait_converged(stack, 60)
        diff = max_difference(
            (await stack.read(stack.fleet.routing)).fractions, stack.notes["routing"]
        )
        if diff > 0.02:
            problems.append(f"routing {diff:.3f} away from the table before the load test")
        status = await stack.read(
            lambda: stack.client.get_workflow_handle("rebalancer").query(
                TrafficRebalanceWorkflow.status
            )
        )
        if status.overrides:
            problems.append(f"overrides left behind: {[o.region for o in status.overrides]}")
        return problems
