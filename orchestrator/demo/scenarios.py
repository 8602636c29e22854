"""The demo's four scenarios, each a real workflow on the running stack.

Every scenario returns a :class:`ScenarioSummary`; the errors users saw come from
the data plane's own count of the edge answers it gave (:mod:`orchestrator.demo.answers`),
not from the orchestrator's view of itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from orchestrator.clients.overrides import rebalancer_holds
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.clients.training import start_supervisor, wait_for_supervisor
from orchestrator.contracts.load_test import LoadTestInput, LoadTestResult, load_test_owner
from orchestrator.contracts.rebalancer import REBALANCER_ID, RebalancerInput, RebalancerStatus
from orchestrator.contracts.runbook import RunbookReport, RunbookRunInput, RunbookStatus
from orchestrator.contracts.training_supervisor import SupervisorInput, SupervisorStatus
from orchestrator.demo.answers import AnswerCounter
from orchestrator.demo.stack import DemoError
from orchestrator.fleet.http import HttpFleet
from orchestrator.policy.rebalance.inputs import Override
from orchestrator.runbook import load_runbook
from orchestrator.runbook.spec import RunMode
from workflows.load_test import LiveLoadTestWorkflow
from workflows.rebalancer import TrafficRebalanceWorkflow
from workflows.runbook import RunbookWorkflow

__all__ = [
    "DemoContext",
    "ScenarioSummary",
    "drain_and_restore",
    "load_test",
    "rebalance",
    "restore_verdict",
    "run_runbook",
    "training",
]

T = TypeVar("T")
RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
#: the region the demo load-tests, drains and restores
REGION = "eu-west"
JOB = "llm-demo"
#: the demo's PyTorch job: steps, and how far past its checkpoint a run must get before
#: the next fault (two checkpoints)
TRAINING_STEPS = 300
PAST_CHECKPOINT = 20
#: a run of torchrun agents and ranks importing torch next to Locust and Temporal can
#: take a minute to take its first step
RESTART_TIMEOUT_S = 240
#: the lab's p99 at rest is ~350 ms (web waits on kv primaries across regions), and a
#: receiving region serves its new buckets cold for a few seconds
SLO_P99_MS = 800.0
WINDOW_S = 3.0


class ScenarioSummary(BaseModel):
    name: str
    workflow_ids: list[str]
    ok: bool
    what: str
    duration_s: float
    user_requests: int
    user_5xx: int
    capacity: str = ""
    ettr: float | None = None
    #: why it failed, printed under the table (too long for a cell)
    detail: str = ""
    reports: list[str] = []


@dataclass
class DemoContext:
    client: Client
    fleet: HttpFleet
    #: the lab's own API: its controls (faults) when it has them
    lab: httpx.AsyncClient
    task_queue: str
    say: Callable[[str], None]
    #: (edge answers, of which 5xx) the data plane has given so far
    answers: AnswerCounter

    async def spread(self) -> float:
        health = await self.fleet.health(WINDOW_S)
        utils = [r.utilization for r in health.regions if r.utilization is not None]
        return max(utils) - min(utils) if len(utils) >= 2 else 1.0


async def _measured(
    ctx: DemoContext, name: str, body: Callable[[], Awaitable[ScenarioSummary]]
) -> ScenarioSummary:
    """Run ``body`` and fill in its duration and the user-visible errors meanwhile."""
    start, (requests0, errors0) = time.monotonic(), await ctx.answers()
    summary = await body()
    requests1, errors1 = await ctx.answers()
    return summary.model_copy(
        update={
            "name": name,
            "duration_s": round(time.monotonic() - start, 1),
            "user_requests": requests1 - requests0,
            "user_5xx": errors1 - errors0,
        }
    )


async def _poll(
    read: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    show: Callable[[T], str],
    ctx: DemoContext,
    timeout_s: float,
    what: str,
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await read()
        ctx.say(show(value))
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise DemoError(f"{what} did not finish within {timeout_s:g}s: {show(value)}")
        await asyncio.sleep(0.5)


def _blank(ids: list[str]) -> ScenarioSummary:
    return ScenarioSummary(
        name="", workflow_ids=ids, ok=False, what="", duration_s=0, user_requests=0, user_5xx=0
    )


async def rebalance(ctx: DemoContext) -> ScenarioSummary:
    """The rebalancer takes the lab from nearest-region routing to balanced utilization."""

    async def body() -> ScenarioSummary:
        before = await ctx.spread()
        handle = await ctx.client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=WINDOW_S, window_s=WINDOW_S),
            id=REBALANCER_ID,
            task_queue=ctx.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        spread = before

        async def read() -> RebalancerStatus:
            nonlocal spread
            spread = await ctx.spread()
            return await handle.query(TrafficRebalanceWorkflow.status)

        status = await _poll(
            read,
            lambda s: s.epoch >= 3 and spread < 0.03,
            lambda s: f"rebalancer epoch {s.epoch}: utilization spread {spread:.1%}",
            ctx,
            90,
            "the rebalancer",
        )
        published = sum(1 for e in status.epochs if e.outcome == "published")
        summary = _blank([REBALANCER_ID])
        return summary.model_copy(
            update={
                "ok": spread < 0.03,
                "what": f"utilization spread {before:.0%} -> {spread:.1%} in {status.epoch} epochs "
                f"({published} tables published)",
            }
        )

    return await _measured(ctx, "rebalance", body)


async def load_test(ctx: DemoContext) -> ScenarioSummary:
    """A Kraken-style live load test finds the capacity of one region's web pool."""
    wid = f"loadtest-{REGION}-demo-{int(time.time())}"

    async def body() -> ScenarioSummary:
        before = (await ctx.fleet.routing()).fractions
        handle = await ctx.client.start_workflow(
            LiveLoadTestWorkflow.run,
            LoadTestInput(
                region=REGION,
                p99_slo_ms=SLO_P99_MS,
                window_s=WINDOW_S,
                settle_s=2.0,
                max_steps=20,
                reason="demo",
            ),
            id=wid,
            task_queue=ctx.task_queue,
        )
        await _poll(
            lambda: handle.query(LiveLoadTestWorkflow.progress),
            lambda p: p.phase in ("done", "failed"),
            lambda p: (
                f"load test {REGION}: {p.phase}, step {p.steps}, "
                + (f"load {p.current_load:.0f} rps" if p.current_load is not None else "baseline")
                + (f", band {p.band}" if p.band else "")
            ),
            ctx,
            150,
            "the load test",
        )
        result: LoadTestResult = await handle.result()
        after = await ctx.fleet.routing()
        holds = await rebalancer_holds(ctx.client)
        restored, restore = restore_verdict(result, holds, before, after.fractions)
        summary = _blank([wid])
        return summary.model_copy(
            update={
                "ok": restored,
                "what": f"{result.steps} steps, stopped on {result.bottleneck or result.outcome}; "
                + restore,
                "capacity": f"{result.estimate.load:.0f} rps of {result.theoretical_capacity:.0f} "
                f"({result.capacity_ratio:.0%})",
            }
        )

    return await _measured(ctx, "load test", body)


def restore_verdict(
    result: LoadTestResult,
    holds: list[Override],
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
) -> tuple[bool, str]:
    """Whether the demo counts the routing as put back after its load test, in words.

    The demo's rebalancer keeps running, so the exact table found is not the test: it
    takes the released hold's table back and then goes on publishing its own epochs
    (CI saw one land between the restore and the demo's read, which then said "NOT
    restored" of a correct run). The workflow judges the region's share within one
    ramp per table published since; the demo adds what it can see for itself: no hold
    of the test's is left with the rebalancer.
    """
    owner = load_test_owner(result.workflow_id)
    left = sorted(h.region for h in holds if h.owner == owner)
    if left:
        return False, f"routing NOT restored: the test still holds {', '.join(left)}"
    if not result.routing_restored:
        return False, f"routing NOT restored: {result.routing_check}"
    if after == before:
        return True, "routing restored exactly"
    return True, "routing restored (hold released; the rebalancer has published since)"


async def run_runbook(
    ctx: DemoContext,
    name: str,
    wid: str,
    params: dict[str, Any],
    *,
    where: str,
    mode: RunMode = "real",
    requested_by: str = "demo",
) -> RunbookReport:
    """Run ``runbooks/<name>.yaml`` with ``params``, showing its progress, to its report."""
    runbook = load_runbook(
        RUNBOOKS / f"{name}.yaml",
        {**params, "step_wait": f"{WINDOW_S:g}s", "slo_p99_ms": SLO_P99_MS},
    )
    handle = await ctx.client.start_workflow(
        RunbookWorkflow.run,
        RunbookRunInput(runbook=runbook, mode=mode, requested_by=requested_by),
        id=wid,
        task_queue=ctx.task_queue,
    )

    def show(s: RunbookStatus) -> str:
        active = [t for t in s.tasks if t.phase not in ("pending", "done", "skipped")]
        doing = ", ".join(f"{t.id} {t.step}/{t.steps}" for t in active) or "-"
        done = sum(1 for t in s.tasks if t.phase in ("done", "skipped"))
        return f"{name} {where}: {s.state}, {done}/{len(s.tasks)} tasks done; now {doing}"

    await _poll(
        lambda: handle.query(RunbookWorkflow.status),
        lambda s: s.state not in ("running", "paused", "rolling_back"),
        show,
        ctx,
        240,
        name,
    )
    return await runbook_result(handle)


async def _runbook(ctx: DemoContext, name: str, wid: str) -> RunbookReport:
    return await run_runbook(ctx, name, wid, {"region": REGION}, where=REGION, mode="drill")


async def drain_and_restore(ctx: DemoContext) -> ScenarioSummary:
    """Drain the load-tested region under live traffic, then restore it."""
    stamp = int(time.time())
    drain_id, restore_id = f"drain-{REGION}-demo-{stamp}", f"undrain-{REGION}-demo-{stamp}"

    async def body() -> ScenarioSummary:
        drain = await _runbook(ctx, "region-drain", drain_id)
        share = max(s.get(REGION, 0.0) for s in (await ctx.fleet.routing()).fractions.values())
        restore = await _runbook(ctx, "region-restore", restore_id)
        ok = drain.outcome == "completed" and restore.outcome == "completed" and share == 0.0
        detail = "" if drain.outcome == "completed" else "; ".join(drain.events[-2:])
        took = (drain.finished_at - drain.started_at).total_seconds()
        summary = _blank([drain_id, restore_id])
        return summary.model_copy(
            update={
                "ok": ok,
                "detail": detail,
                "what": f"region-drain {drain.outcome} in {took:.0f}s (share left {share:.0%}; "
                f"critical path {drain.critical_path_s:.0f}s), restore {restore.outcome}",
            }
        )

    return await _measured(ctx, "drain + restore", body)


async def training(ctx: DemoContext) -> ScenarioSummary:
    """A supervised PyTorch training job survives a GPU failure and a building power loss."""
    wid = f"training-{JOB}"

    async def inject(kind: str, **body: Any) -> None:
        (await ctx.lab.post(f"/lab/training/faults/{kind}", json=body)).raise_for_status()

    async def ready(n: int) -> list[str]:
        """Hosts of the job once it has made progress after its ``n``-th failure (0: launch)."""
        if n:
            await wait_for_supervisor(
                ctx.client,
                JOB,
                lambda s: len(s.failures) >= n and s.failures[n - 1].confirmed,
                timeout_s=RESTART_TIMEOUT_S,
            )
        for _ in range(RESTART_TIMEOUT_S * 10):
            cluster = await ctx.fleet.training_cluster()
            job = next(j for j in cluster.jobs if j.spec.name == JOB)
            past = job.resumed_from + PAST_CHECKPOINT
            if job.checkpoint_step is not None and job.checkpoint_step >= past:
                return list(job.hosts)
            await asyncio.sleep(0.1)
        raise DemoError(f"{JOB} made no progress after recovery {n}")

    async def body() -> ScenarioSummary:
        handle = await start_supervisor(
            ctx.client,
            JOB,
            task_queue=ctx.task_queue,
            # 6 missed 1 s beats: a healthy rank on the shared cores is not taken for hung
            options=SupervisorInput(
                job=JOB, hang_after_s=6.0, poll_s=0.1, confirm_timeout_s=RESTART_TIMEOUT_S
            ),
        )
        hosts = await ready(0)
        ctx.say(f"{JOB}: running on {', '.join(hosts)}; GPU error on {hosts[0]}")
        await inject("gpu-error", host=hosts[0])
        hosts = await ready(1)
        cluster = await ctx.fleet.training_cluster()
        building = next(h.building for h in cluster.hosts if h.name == hosts[0])
        ctx.say(f"{JOB}: recovered onto {', '.join(hosts)}; power loss in {building}")
        await inject("power-loss", building=building)
        await ready(2)
        status: SupervisorStatus = await _poll(
            lambda: handle.query("status", result_type=SupervisorStatus),
            lambda s: s.state in ("finished", "halted"),
            lambda s: f"{JOB}: {s.state}, step {s.step}/{s.total_steps}",
            ctx,
            120,
            JOB,
        )
        # power back: the building also held a share of its region's serving capacity
        await inject("power-restore", building=building)
        real = [f for f in status.failures if f.kind != "launch"]
        mttr = [f.mttr_s for f in real if f.mttr_s is not None]
        summary = _blank([wid])
        return summary.model_copy(
            update={
                "ok": status.state == "finished"
                and len(real) == 2
                and all(f.confirmed for f in real),
                "what": f"{status.state} at step {status.step}: "
                + ", ".join(
                    f"{f.kind} (MTTD {f.mttd_s:.1f}s, lost {f.lost_steps} steps)" for f in real
                )
                + (f"; MTTR max {max(mttr):.1f}s" if mttr else ""),
                "ettr": status.ettr,
            }
        )

    return await _measured(ctx, "training", body)
