"""The demo's last scenario: one incident, one run (issue 25).

A building of eu-west loses power under live traffic while a training job runs there.
``runbooks/building-loss.yaml`` is started as its alert would start it: the building's
share of user traffic moves out, and the job, which its supervisor has already
recovered onto hosts outside the building, is accounted for (steps lost, MTTR). Then
power comes back and ``building-restore.yaml`` returns the traffic and the hosts. The
loss run's HTML report draws the traffic and the job on one time axis.
"""

from __future__ import annotations

import asyncio
import time

from orchestrator.clients.training import start_supervisor
from orchestrator.contracts.runbook import RunbookReport
from orchestrator.contracts.training_supervisor import SupervisorInput, SupervisorStatus
from orchestrator.demo.scenarios import (
    DemoContext,
    ScenarioSummary,
    _blank,
    _measured,
    _poll,
    run_runbook,
)
from orchestrator.demo.stack import DemoError
from orchestrator.policy.snapshot import traffic_shares

__all__ = ["BUILDING_JOB", "BUILDING_REGION", "building_incident"]

#: the job that trains in the building that loses power, and its region
BUILDING_JOB = "llm-building"
BUILDING_REGION = "eu-west"
OPTIONS = SupervisorInput(job=BUILDING_JOB, hang_after_s=1.5, poll_s=0.1, confirm_timeout_s=60)


async def _stepping(ctx: DemoContext) -> list[str]:
    """The job's hosts once it has checkpointed 40 steps past where it started."""
    for _ in range(900):
        cluster = await ctx.fleet.training_cluster()
        job = next(j for j in cluster.jobs if j.spec.name == BUILDING_JOB)
        if job.checkpoint_step is not None and job.checkpoint_step >= job.resumed_from + 40:
            return list(job.hosts)
        await asyncio.sleep(0.1)
    raise DemoError(f"{BUILDING_JOB} made no progress")


async def _share(ctx: DemoContext) -> float:
    """eu-west's share of all user traffic now (each PoP weighted by its demand)."""
    shares = traffic_shares(await ctx.fleet.topology(), await ctx.fleet.routing())
    return shares[BUILDING_REGION]


async def _run(ctx: DemoContext, name: str, wid: str, building: str) -> RunbookReport:
    return await run_runbook(
        ctx, name, wid, {"building": building}, where=building,
        requested_by="demo: BuildingPowerLost",
    )  # fmt: skip


async def building_incident(ctx: DemoContext) -> ScenarioSummary:
    """A building loses power under traffic with a job training there; one run moves both."""
    stamp = int(time.time())

    async def body() -> ScenarioSummary:
        handle = await start_supervisor(
            ctx.client, BUILDING_JOB, task_queue=ctx.task_queue, options=OPTIONS
        )
        hosts = await _stepping(ctx)
        cluster = await ctx.fleet.training_cluster()
        building = next(h.building for h in cluster.hosts if h.name == hosts[0])
        before = await _share(ctx)
        ctx.say(f"{BUILDING_JOB} training on {', '.join(hosts)}; power loss in {building}")
        (await ctx.lab.post(f"/lab/buildings/{building}/power-loss")).raise_for_status()
        loss_id, restore_id = (
            f"building-loss-{building}-demo-{stamp}",
            f"building-restore-{building}-demo-{stamp}",
        )
        loss = await _run(ctx, "building-loss", loss_id, building)
        after = await _share(ctx)
        status: SupervisorStatus = await _poll(
            lambda: handle.query("status", result_type=SupervisorStatus),
            lambda s: s.state in ("finished", "halted"),
            lambda s: f"{BUILDING_JOB}: {s.state}, step {s.step}/{s.total_steps}",
            ctx,
            180,
            BUILDING_JOB,
        )
        (await ctx.lab.post(f"/lab/buildings/{building}/power-restore")).raise_for_status()
        restore = await _run(ctx, "building-restore", restore_id, building)
        failures = [f for f in status.failures if f.kind != "launch"]
        lost = sum(f.lost_steps or 0 for f in failures)
        mttr = max((f.mttr_s for f in failures if f.mttr_s is not None), default=None)
        took = (loss.finished_at - loss.started_at).total_seconds()
        ok = (
            loss.outcome == "completed"
            and restore.outcome == "completed"
            and status.state == "finished"
            and len(failures) == 1
            and failures[0].confirmed
        )
        summary = _blank([loss_id, restore_id])
        return summary.model_copy(
            update={
                "ok": ok,
                "what": f"power loss in {building}: building-loss {loss.outcome} in {took:.0f}s "
                f"({BUILDING_REGION} share {before:.0%} -> {after:.0%}); {BUILDING_JOB} "
                f"{status.state} at step {status.step}, {lost} steps lost, MTTR "
                + ("-" if mttr is None else f"{mttr:.1f}s")
                + f"; restore {restore.outcome}",
                "ettr": status.ettr,
                "detail": "" if ok else "; ".join(loss.events[-2:]),
            }
        )

    return await _measured(ctx, "building loss", body)
