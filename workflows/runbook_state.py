"""Templates whose steps act on a set read from the fleet (kv primaries, batch
jobs), and the drain records a restore puts back. A mixin of :class:`TemplateExecutor`.

The set is read once, before the first mutation, and kept in the task's state:
an activity that read it itself, retried after a partial apply, would find a
world it had half changed and record less than it moved (and the restore would
leave the rest behind).
"""

from __future__ import annotations

import math
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.runbook import JobsInput, RunbookActivities, ShardStepInput
    from orchestrator.contracts.runbook import TaskState, Undo
    from orchestrator.runbook.spec import Task
    from workflows.runbook_steps import RETRY, SHORT, cancellation, step_summary
    from workflows.runbook_waits import WaitTemplates

__all__ = ["StateTemplates"]


class StateTemplates(WaitTemplates):
    #: restore task id -> what its drain recorded (set at start-up of a restore)
    records: dict[str, Undo]
    #: read targets before mutating (False only when replaying an older history)
    read_first: bool

    def _recorded(self, task_id: str, template: str, **same: Any) -> Undo | None:
        """The drain's record for this restore task, if it is of ``template`` and about
        the same resource (``same``) as the task."""
        found = self.records.get(task_id)
        if found is None or found.template != template:
            return None
        if any(found.args.get(k) != v for k, v in same.items()):
            return None
        return found

    async def _shard_shift(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        if args.direction == "out" and self.read_first:
            await self._shards_out(task, args, state, point, step)
            return
        moved = list(state.undo.args["moved"]) if state.undo else []
        recorded = self._recorded(task.id, "shard_return", region=args.region)
        if args.direction == "in" and recorded is not None:
            moved = list(recorded.args["moved"])
        result = await workflow.execute_activity_method(
            RunbookActivities.shift_shards,
            ShardStepInput(
                service=args.service,
                region=args.region,
                direction=args.direction,
                peers=args.peers,
                target_ratio=point * args.ratio,
                moved=moved,
                key=self.key(task.id, step),
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )
        if args.direction == "out":
            state.undo = Undo(
                template="shard_return",
                args={"service": args.service, "region": args.region, "moved": result},
            )

    async def _shards_out(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        if state.undo is None:
            owned = await workflow.execute_activity_method(
                RunbookActivities.read_primaries,
                ShardStepInput(
                    service=args.service, region=args.region, direction="out", target_ratio=0
                ),
                start_to_close_timeout=SHORT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RETRY,
                summary=step_summary(),
                cancellation_type=cancellation(),
            )
            state.undo = Undo(
                template="shard_return",
                args={"service": args.service, "region": args.region, "moved": [], "owned": owned},
            )
        owned, moved = state.undo.args["owned"], list(state.undo.args["moved"])
        chosen = owned[: math.ceil(point * args.ratio * len(owned) - 1e-9)]
        # Recorded before the move: a rollback after a crash mid-step returns these too
        # (the return leaves alone any that never left).
        state.undo.args["moved"] = chosen
        await workflow.execute_activity_method(
            RunbookActivities.shift_shards,
            ShardStepInput(
                service=args.service,
                region=args.region,
                direction="out",
                peers=args.peers,
                target_ratio=point * args.ratio,
                moved=moved,
                shards=chosen,
                key=self.key(task.id, step),
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )

    async def _job_update(
        self, task: Task, args: Any, state: TaskState, point: float, step: int
    ) -> None:
        flipped = "start" if args.operation == "stop" else "stop"
        jobs, region = list(args.jobs), args.region
        recorded = self._recorded(task.id, "job_update", operation=args.operation)
        if recorded is not None:
            jobs, region = list(recorded.args["jobs"]), None  # exactly those, even none
        elif self.read_first and not jobs and region is not None:
            if state.undo is None:
                listed = await workflow.execute_activity_method(
                    RunbookActivities.read_jobs,
                    JobsInput(operation=args.operation, region=region),
                    start_to_close_timeout=SHORT,
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=RETRY,
                    summary=step_summary(),
                    cancellation_type=cancellation(),
                )
                state.undo = Undo(
                    template="job_update", args={"operation": flipped, "jobs": listed}
                )
            jobs, region = list(state.undo.args["jobs"]), None
        jobs = await workflow.execute_activity_method(
            RunbookActivities.update_jobs,
            JobsInput(
                operation=args.operation, jobs=jobs, region=region, key=self.key(task.id, step)
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary=step_summary(),
            cancellation_type=cancellation(),
        )
        state.undo = Undo(template="job_update", args={"operation": flipped, "jobs": jobs})
