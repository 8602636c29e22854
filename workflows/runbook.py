"""RunbookWorkflow: Maelstrom's scheduler and executor as one durable run.

Every task whose dependencies are done and whose pre-conditions hold starts,
in parallel with the others; each runs pre-check, steps with health gates
between them, post-check. Operators pause, resume, skip, override a failed
condition (recorded with who and why), approve, and abort. Abort, or a failed
gate whose task says ``on_failure: rollback``, undoes every step taken, in
reverse dependency order. The report gives per-task durations and the
critical path.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import (
    ApplicationError,
)
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.runbook import DurationsInput, RunbookActivities
    from orchestrator.clients.runbook_runs import run_failure
    from orchestrator.contracts.runbook import (
        TERMINAL,
        RunbookReport,
        RunbookRunInput,
        RunOutcome,
        SkipReason,
        TaskPhase,
        TaskState,
    )
    from orchestrator.policy.drain.maelstrom import critical_path, dag_of, percentile
    from orchestrator.runbook.spec import ParamType, RunbookKind, Task
    from orchestrator.temporal import OUTCOME, REGION, RUN_KIND, RUNBOOK
    from workflows import observe
    from workflows.runbook_checks import RunbookChecks
    from workflows.runbook_controls import RunbookControls
    from workflows.runbook_executor import RETRY, TemplateExecutor
    from workflows.runbook_failures import RunbookFailures
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import (
        CANCELLATION,
        RECORDS_PATCH,
        TRUTH_PATCH,
        TaskFailed,
        admit_drain,
        building_of,
        drain_record,
        restore_records,
    )
    from workflows.runbook_tasks import RunbookTasks

__all__ = ["RunbookWorkflow"]


@workflow.defn
class RunbookWorkflow(RunbookControls, RunbookChecks, RunbookFailures, RunbookTasks):
    @workflow.init
    def __init__(self, inp: RunbookRunInput) -> None:
        self.inp = inp
        self.run_state = RunState.plan(inp)

    @workflow.run
    async def run(self, inp: RunbookRunInput) -> RunbookReport:
        rb = inp.runbook
        started = workflow.now()
        info = workflow.info()
        observe.run_started(rb.kind.value, rb.name)
        self.run_state.truthful = workflow.patched(TRUTH_PATCH)
        if self.run_state.truthful:
            CANCELLATION.set(ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        await self._start_up(inp)
        self.run_state.event(f"{self.run_state.mode} run of {rb.name} by {inp.requested_by}")
        running: dict[str, asyncio.Task[None]] = {}
        while not self.run_state.stopping:
            for task in self._ready():
                self.run_state.order.append(task.id)
                running[task.id] = asyncio.create_task(self._run_task(task))
            if self.run_state.truthful:
                for t in running.values():
                    if t.done() and not t.cancelled():
                        t.result()  # a bug in this code fails the workflow task, loudly
            running = {k: t for k, t in running.items() if not t.done()}
            if not running and not self._ready():
                break
            self.run_state.changed = False
            await workflow.wait_condition(lambda: self.run_state.changed or self.run_state.stopping)
        for t in running.values():
            t.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        outcome = await self._finish()
        self.run_state.show()
        durations = {
            t.id: t.duration_s
            for t in self.run_state.tasks.values()
            if t.phase == TaskPhase.DONE and t.duration_s
        }
        await workflow.execute_activity_method(
            RunbookActivities.durations,
            DurationsInput(
                runbook=rb.name, record={k: v for k, v in durations.items() if v is not None}
            ),
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        # The planner's DAG, timed by what each task actually took (0 if it did not run).
        ran = dag_of(rb)
        ran.tasks = [
            t.model_copy(update={"duration_s": durations.get(t.id) or 0.0}) for t in ran.tasks
        ]
        path = critical_path(ran)
        report = RunbookReport(
            runbook=rb.name,
            workflow_id=info.workflow_id,
            mode=self.run_state.mode,
            outcome=outcome,
            started_at=started,
            finished_at=workflow.now(),
            tasks=list(self.run_state.tasks.values()),
            critical_path=path.tasks,
            critical_path_s=path.length_s,
            sequential_s=sum(v for v in durations.values() if v is not None),
            events=self.run_state.events,
            restore_records=restore_records(rb, self.run_state.tasks),
        )
        self._observe_end(outcome, started)
        if self.run_state.truthful:
            workflow.upsert_search_attributes([OUTCOME.value_set(outcome)])
            if outcome != RunOutcome.COMPLETED:
                raise run_failure(report, self.run_state.why)
        return report

    def _observe_end(self, outcome: str, started: datetime) -> None:
        rb = self.inp.runbook
        seconds = (workflow.now() - started).total_seconds()
        observe.run_ended(rb.kind.value, rb.name, str(getattr(outcome, "value", outcome)), seconds)
        for t in self.run_state.tasks.values():
            if t.phase in TERMINAL:
                observe.task_ended(rb.name, t.id, t.phase.value, t.duration_s)

    async def _start_up(self, inp: RunbookRunInput) -> None:
        """Search attributes, the capacity check of a drain, and the tasks' history."""
        rb, info = inp.runbook, workflow.info()
        attrs = [RUNBOOK.value_set(rb.name), RUN_KIND.value_set(rb.kind.value)]
        param = rb.parameters.get("region")
        region = str(param.default) if param is not None and param.default else None
        building = next(
            (
                str(p.default)
                for p in rb.parameters.values()
                if p.type is ParamType.BUILDING and p.default
            ),
            "",
        )
        if region is None and building:
            # A building's runbook is about its region: the search attribute, the drain
            # record its restore reads and the capacity check all go by the region.
            try:
                region, _ = await building_of(building)
            except TaskFailed as exc:
                raise ApplicationError(
                    exc.reason, type="InvalidInstance", non_retryable=True
                ) from None
        if region is not None:
            attrs.append(REGION.value_set(region))
        workflow.upsert_search_attributes(attrs)
        self.executor = TemplateExecutor(
            f"{info.workflow_id}/{info.run_id}",
            self.run_state.approvals.get,
            mode=self.run_state.mode,
            requested_by=inp.requested_by,
            nested=inp.nested,
            depth=inp.depth,
        )
        self.executor.read_first = workflow.patched(RECORDS_PATCH)
        if rb.kind == RunbookKind.RESTORE and region is not None and self.executor.read_first:
            record = await drain_record(region, inp.restore_of)
            self.executor.records = record.records
            self.run_state.event(
                f"restoring what {record.workflow_id} recorded ({len(record.records)} tasks)"
                if record.workflow_id
                else f"{record.note}: restoring to the runbook's values"
            )
        if rb.kind == RunbookKind.DRAIN and region is not None:
            refusal = await admit_drain(region, inp.target_utilization, building)
            if refusal is not None:
                self.run_state.state = RunOutcome.REFUSED
                self.run_state.event(refusal)
                observe.run_ended(rb.kind.value, rb.name, RunOutcome.REFUSED.value, 0.0)
                if self.run_state.truthful:
                    workflow.upsert_search_attributes([OUTCOME.value_set(self.run_state.state)])
                raise ApplicationError(refusal, type="UnsafeRequest", non_retryable=True)
        history = await workflow.execute_activity_method(
            RunbookActivities.durations,
            DurationsInput(runbook=rb.name),
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
        )
        for task_id, seconds in history.items():
            if task_id in self.run_state.tasks and seconds:
                self.run_state.tasks[task_id].expected_s = percentile(seconds, 0.75)

    # --- scheduling ----------------------------------------------------------

    def _ready(self) -> list[Task]:
        ready = []
        for task in self.inp.runbook.tasks:
            if self.run_state.tasks[task.id].phase != TaskPhase.PENDING:
                continue
            if self.run_state.truthful and task.id in self.run_state.order:
                continue  # started already, not yet past its first stage
            failed = [d for d in task.depends_on if self._failed(self.run_state.tasks[d])]
            if failed:
                self.run_state.skip(
                    task.id, SkipReason.DEPENDENCY, f"not run: {', '.join(failed)} did not complete"
                )
                continue
            strong = [self.run_state.tasks[d].phase for d in task.depends_on]
            weak_done = all(self.run_state.tasks[d].phase in TERMINAL for d in task.weak_depends_on)
            if all(p in (TaskPhase.DONE, TaskPhase.SKIPPED) for p in strong) and weak_done:
                ready.append(task)
        return ready

    def _failed(self, dependency: TaskState) -> bool:
        """Whether a task that ``depends_on`` this one must not run."""
        if dependency.phase in (TaskPhase.FAILED, TaskPhase.ROLLED_BACK):
            return True
        # Continued past, or itself not run for a failure: its dependents cannot run either.
        return self.run_state.truthful and dependency.skipped in (
            SkipReason.CONTINUED,
            SkipReason.DEPENDENCY,
        )
