"""The training templates of a runbook (issue 25).

``training_move`` plans the GPU half (refused when some job could not keep its size,
unless ``allow_waiting``), then asks every job with a host there to move, each through
its supervisor's ``move_job`` Update, all at once. Its request id is the task's step
key and the job, so a replayed step or a retried activity moves nothing twice. It
records no undo: a moved job stays where it went.

``hosts_quarantine`` and ``hosts_release`` read the hosts once (a building's hosts),
record the undo naming exactly those, then change them; a restore run releases the
hosts its drain recorded.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.training_moves import (
        HostsInput,
        MoveCallInput,
        MovePlanInput,
        TrainingMoveActivities,
    )
    from orchestrator.contracts.runbook import TaskState
    from orchestrator.contracts.runbook_undo import (
        HostsQuarantine,
        HostsQuarantineArgs,
        HostsRelease,
        HostsReleaseArgs,
    )
    from orchestrator.contracts.training_moves import MoveJobRequest, MoveJobResult, MoveOutcome
    from orchestrator.runbook.spec import Task
    from workflows.runbook_steps import (
        RETRY,
        SHORT,
        StepContext,
        TaskFailed,
        cancellation,
        step_summary,
    )

__all__ = ["TrainingSteps"]

#: a move is a checkpoint, a restart and the first steps on the new hosts
_MOVE_CALL = timedelta(minutes=10)


class TrainingSteps:
    """Steps of training_move, hosts_quarantine and hosts_release, and their undo."""

    def __init__(self, ctx: StepContext) -> None:
        self.ctx = ctx

    async def training_move(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        planned = await workflow.execute_activity_method(
            TrainingMoveActivities.plan,
            MovePlanInput(
                building=args.building,
                hosts=args.hosts,
                jobs=args.jobs,
                allow_waiting=args.allow_waiting,
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )
        where = args.building or ", ".join(args.hosts)
        calls = [
            workflow.execute_activity_method(
                TrainingMoveActivities.move,
                MoveCallInput(
                    job=job,
                    request=MoveJobRequest(
                        avoid_buildings=[args.building] if args.building else [],
                        avoid_hosts=args.hosts,
                        reason=f"runbook {self.ctx.key_prefix}/{task.id}: off {where}",
                        request_id=f"{self.ctx.key(task.id, step)}/{job}",
                    ),
                ),
                start_to_close_timeout=_MOVE_CALL,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RETRY,
                summary=step_summary(),
                cancellation_type=cancellation(),
            )
            for job in planned.jobs
        ]
        results: list[MoveJobResult] = list(await asyncio.gather(*calls))
        state.message = "; ".join(_said(r) for r in results) or f"no training job on {where}"
        waiting = [r.job for r in results if r.outcome is MoveOutcome.WAITING]
        if waiting and not args.allow_waiting:
            raise TaskFailed(f"no capacity to move {', '.join(waiting)}: {state.message}")

    async def hosts_quarantine(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        if not isinstance(state.undo, HostsRelease):
            hosts = await self._read_hosts(args)
            state.undo = HostsRelease(args=HostsReleaseArgs(hosts=hosts))
        await self._quarantine_hosts(
            state.undo.args.hosts, args.reason, self.ctx.key(task.id, step)
        )

    async def hosts_release(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        recorded = self.ctx.records.get(task.id)
        if isinstance(recorded, HostsRelease):
            hosts = list(recorded.args.hosts)  # exactly what the drain quarantined
        elif isinstance(state.undo, HostsQuarantine):
            hosts = list(state.undo.args.hosts)
        else:
            hosts = await self._read_hosts(args)
        state.undo = HostsQuarantine(args=HostsQuarantineArgs(hosts=hosts, reason=args.reason))
        await self._release_hosts(hosts, self.ctx.key(task.id, step))

    async def undo_hosts(self, key: str, undo: HostsRelease | HostsQuarantine) -> None:
        """Undo of a quarantine (release) or of a release (quarantine again)."""
        if isinstance(undo, HostsRelease):
            await self._release_hosts(undo.args.hosts, key)
        else:
            await self._quarantine_hosts(undo.args.hosts, undo.args.reason or "undo", key)

    async def _read_hosts(self, args: Any) -> list[str]:
        hosts: list[str] = await workflow.execute_activity_method(
            TrainingMoveActivities.hosts,
            MovePlanInput(building=args.building, hosts=args.hosts),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )
        return hosts

    async def _quarantine_hosts(self, hosts: list[str], reason: str, key: str) -> None:
        await workflow.execute_activity_method(
            TrainingMoveActivities.quarantine,
            HostsInput(hosts=hosts, reason=reason, key=key),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    async def _release_hosts(self, hosts: list[str], key: str) -> None:
        await workflow.execute_activity_method(
            TrainingMoveActivities.release,
            HostsInput(hosts=hosts, key=key),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )


def _said(r: MoveJobResult) -> str:
    if r.outcome is MoveOutcome.MOVED:
        return (
            f"{r.job} moved to {', '.join(r.to_hosts)} from step {r.checkpoint_step} "
            f"({r.lost_steps} lost, {r.duration_s:.1f}s)"
        )
    return f"{r.job} {r.outcome.value}: {r.detail}"
