"""Fault classes around the single routing writer: the fleet gone for twice the retry
budget, a fleet that restarts and loses its state, a worker starved of CPU.

Each starts the rebalancer with a drain's hold on ``eu-west`` (``max_share 0``, held
by ``runbook:eu-west``, as a completed drain leaves it), converges, then does its harm
and measures how long after the harm ends routing is back to the intended state: the
rebalancer running and publishing again, the hold still held, ``eu-west`` carrying
nothing. ``details()`` reports ``time_to_intended_s`` for ``benchmarks/chaos.py``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from testkit.chaos.harness import ChaosStack, Scenario, audit_problems
from testkit.chaos.traffic_scenarios import start_rebalancer, wait_converged

__all__ = ["FleetOutage", "LabRestart", "WorkerStarvation", "retry_budget_s"]

REGION = "eu-west"
OWNER = f"runbook:{REGION}"


def retry_budget_s(per_attempt_s: float = 0.0) -> float:
    """Seconds the rebalancer's activity retry policy takes from the first attempt to the
    last failing: its backoff, plus ``per_attempt_s`` for each attempt."""
    from workflows.rebalancer_support import ACTIVITY_RETRY as policy

    first = policy.initial_interval or timedelta(seconds=1)
    cap = (policy.maximum_interval or first * 100).total_seconds()
    waits = [
        min(first.total_seconds() * policy.backoff_coefficient**n, cap)
        for n in range(policy.maximum_attempts - 1)
    ]
    return sum(waits) + policy.maximum_attempts * per_attempt_s


async def status_of(stack: ChaosStack) -> Any:
    from workflows.rebalancer import TrafficRebalanceWorkflow

    handle = stack.client.get_workflow_handle("rebalancer")
    return await stack.read(lambda: handle.query(TrafficRebalanceWorkflow.status), tries=120)


async def carried(stack: ChaosStack) -> float:
    table = await stack.read(stack.fleet.routing)
    return max(shares.get(REGION, 0.0) for shares in table.fractions.values())


class HeldRegion(Scenario):
    """The shared set-up and end check: a drained region that must stay drained."""

    total_rps = 120.0
    limit_s = 600.0

    async def prepare(self, stack: ChaosStack) -> None:
        from orchestrator.clients.overrides import request_override
        from orchestrator.contracts.rebalancer import SetOverrideInput

        handle = await start_rebalancer(stack)
        await wait_converged(stack, 60)
        await request_override(
            handle,
            SetOverrideInput(region=REGION, owner=OWNER, reason="chaos: drained", max_share=0.0),
        )
        await wait_converged(stack, 60)

    async def intended(self, stack: ChaosStack, since_epoch: int) -> bool:
        """Running, publishing again after ``since_epoch``, the hold held, the region empty."""
        status = await status_of(stack)
        later = [e for e in status.epochs if e.epoch > since_epoch]
        return (
            any(e.outcome in ("published", "unchanged") for e in later)
            and [(o.region, o.owner) for o in status.overrides] == [(REGION, OWNER)]
            and await carried(stack) == 0.0
        )

    async def measure(self, stack: ChaosStack, harm_ended: float, since_epoch: int) -> None:
        deadline = time.monotonic() + self.limit_s
        while not await self.intended(stack, since_epoch):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not back to the intended state within {self.limit_s:g}s")
            await asyncio.sleep(0.5)
        stack.notes["time_to_intended_s"] = round(time.monotonic() - harm_ended, 2)

    async def verify(self, stack: ChaosStack) -> list[str]:
        from temporalio.client import WorkflowExecutionStatus

        problems = []
        described = await stack.client.get_workflow_handle("rebalancer").describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            problems.append(f"the rebalancer is {described.status}, not running")
        if await carried(stack) != 0.0:
            problems.append(f"{REGION} carries traffic again")
        stack.notes["incidents"] = (await status_of(stack)).incidents.model_dump()
        return problems

    def details(self, stack: ChaosStack) -> dict[str, Any]:
        return {
            "time_to_intended_s": stack.notes.get("time_to_intended_s"),
            **{k: v for k, v in stack.notes.get("incidents", {}).items() if k != "last"},
        }


class FleetOutage(HeldRegion):
    """Every fleet-API call fails for twice the rebalancer's retry budget."""

    name = "fleet-outage"

    async def run(self, stack: ChaosStack) -> None:
        outage_s = 2 * retry_budget_s()
        stack.notes["outage_s"] = outage_s
        since = (await status_of(stack)).epoch
        async with stack.lab.http() as http:
            (await http.post("/lab/faults", json={"api_error_rate": 1.0})).raise_for_status()
        await asyncio.sleep(outage_s)
        await stack.clear_faults()
        await self.measure(stack, time.monotonic(), since)

    async def verify(self, stack: ChaosStack) -> list[str]:
        problems = await super().verify(stack)
        if not stack.notes["incidents"]["unreachable_epochs"]:
            problems.append("no epoch was skipped as unreachable: the outage was not seen")
        return problems


class LabRestart(HeldRegion):
    """The lab is killed and started again empty: routing back at v1, eu-west ~27%."""

    name = "lab-restart"

    async def run(self, stack: ChaosStack) -> None:
        stack.notes["audit_before"] = await stack.read(stack.fleet.audit)
        since = (await status_of(stack)).epoch
        started_with = await stack.restart_lab()
        stack.notes["carried_after_restart"] = max(
            shares.get(REGION, 0.0) for shares in started_with.fractions.values()
        )
        await self.measure(stack, time.monotonic(), since)

    async def verify(self, stack: ChaosStack) -> list[str]:
        problems = await super().verify(stack)
        # The restart emptied the audit log: check the part from before it here.
        problems += audit_problems(stack.notes["audit_before"])
        if stack.notes["carried_after_restart"] < 0.1:
            problems.append("the restarted lab did not route into the region: nothing tested")
        incidents = stack.notes["incidents"]
        if not incidents["routing_regressions"] or not incidents["emergency_steps"]:
            problems.append(f"the lost state was not reported: {incidents}")
        return problems


class WorkerStarvation(HeldRegion):
    """The worker runs 0.3 s of every 12.3 s (SIGSTOP/SIGCONT) while every fleet call takes
    0.4 s: an activity started in a running slice is frozen mid-call past its 10 s heartbeat
    timeout, attempt after attempt, for 1.25 times the retry budget with a heartbeat
    timeout per attempt (long enough for every attempt of an epoch to fail)."""

    name = "starvation"
    stopped_s, running_s, call_s = 12.0, 0.3, 0.4

    async def run(self, stack: ChaosStack) -> None:
        from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT

        since = (await status_of(stack)).epoch
        slow = {"api_hang_rate": 1.0, "api_hang_s": self.call_s}
        async with stack.lab.http() as http:
            (await http.post("/lab/faults", json=slow)).raise_for_status()
        budget = retry_budget_s(per_attempt_s=HEARTBEAT_TIMEOUT.total_seconds())
        ends = time.monotonic() + 1.25 * budget
        try:
            while time.monotonic() < ends:
                stack.starve_worker(True)
                await asyncio.sleep(self.stopped_s)
                stack.starve_worker(False)
                await asyncio.sleep(self.running_s)
        finally:
            stack.starve_worker(False)
            await stack.clear_faults()
        await self.measure(stack, time.monotonic(), since)

    async def verify(self, stack: ChaosStack) -> list[str]:
        problems = await super().verify(stack)
        if not stack.notes["incidents"]["unreachable_epochs"]:
            problems.append("no epoch exhausted its attempts: the starvation was not seen")
        return problems
