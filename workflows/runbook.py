"""RunbookWorkflow: Maelstrom's scheduler and executor as one durable run.

Every task whose dependencies are done and whose pre-conditions hold starts,
in parallel with the others; each runs pre-check, steps with health gates
between them, post-check. Operators pause, resume, skip, override a failed
condition (recorded with who and why), approve, and abort. Abort, or a failed
gate whose task says ``on_failure: rollback``, undoes every step taken, in
reverse dependency order. The report gives per-task durations and the
critical path.

The run's state is one :class:`~workflows.runbook_run.RunState`; the parts below
(start-up, task runner, checks, rollback, report, operator controls) are handed it.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from orchestrator.clients.runbook_runs import run_failure
    from orchestrator.contracts.runbook import (
        AlertResolvedInput,
        ApproveInput,
        OperatorInput,
        RunbookReport,
        RunbookRunInput,
        RunbookStatus,
        RunOutcome,
        TaskControlInput,
    )
    from orchestrator.temporal import OUTCOME
    from workflows import observe
    from workflows import runbook_controls as controls
    from workflows.runbook_report import observe_end, record_durations, report
    from workflows.runbook_rollback import finish
    from workflows.runbook_run import RunState
    from workflows.runbook_start import start_up
    from workflows.runbook_steps import CANCELLATION, TRUTH_PATCH
    from workflows.runbook_tasks import TaskRunner

__all__ = ["RunbookWorkflow"]


@workflow.defn
class RunbookWorkflow:
    @workflow.init
    def __init__(self, inp: RunbookRunInput) -> None:
        # The plan: every task pending, but those its ``when`` leaves out of this mode.
        self.run_state = RunState.plan(inp)

    @workflow.run
    async def run(self, inp: RunbookRunInput) -> RunbookReport:
        run, started = self.run_state, workflow.now()
        observe.run_started(inp.runbook.kind.value, inp.runbook.name)
        run.truthful = workflow.patched(TRUTH_PATCH)
        if run.truthful:
            CANCELLATION.set(ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        # Before anything changes: what a restore puts back, whether a drain may start.
        executor = await start_up(run, inp)
        run.event(f"{run.mode} run of {inp.runbook.name} by {inp.requested_by}")
        await self._run_tasks(TaskRunner(run, inp, executor))
        # An abort or a rollback undoes what was done, newest first; then the outcome.
        outcome = await finish(run, executor)
        run.show()
        durations = await record_durations(run)
        await workflow.wait_condition(workflow.all_handlers_finished)
        ran = report(run, outcome, started, durations)
        observe_end(run, outcome, started)
        if run.truthful:
            workflow.upsert_search_attributes([OUTCOME.value_set(outcome)])
            if outcome != RunOutcome.COMPLETED:
                raise run_failure(ran, run.why)
        return ran

    async def _run_tasks(self, runner: TaskRunner) -> None:
        """Start every task as soon as it may, until none is left or the run stops (an
        abort, a rollback); a task still running then is cancelled."""
        run = self.run_state
        running: dict[str, asyncio.Task[None]] = {}
        while not run.stopping:
            for task in run.ready():
                run.order.append(task.id)
                running[task.id] = asyncio.create_task(runner.run_task(task))
            if run.truthful:
                for t in running.values():
                    if t.done() and not t.cancelled():
                        t.result()  # a bug in this code fails the workflow task, loudly
            running = {k: t for k, t in running.items() if not t.done()}
            if not running and not run.ready():
                break
            run.changed = False
            await workflow.wait_condition(lambda: run.changed or run.stopping)
        for t in running.values():
            t.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)

    # --- what an operator can do while it runs (the CLI and the trigger server call these)

    @workflow.update
    def pause(self, inp: OperatorInput) -> RunbookStatus:
        return controls.pause(self.run_state, inp)

    @workflow.update
    def resume(self, inp: OperatorInput) -> RunbookStatus:
        return controls.resume(self.run_state, inp)

    @workflow.update
    def skip(self, inp: TaskControlInput) -> RunbookStatus:
        return controls.skip(self.run_state, inp)

    @skip.validator
    def _validate_skip(self, inp: TaskControlInput) -> None:
        self.run_state.known(inp.task)

    @workflow.update
    def override(self, inp: TaskControlInput) -> RunbookStatus:
        return controls.override(self.run_state, inp)

    @override.validator
    def _validate_override(self, inp: TaskControlInput) -> None:
        controls.check_override(self.run_state, inp)

    @workflow.update
    def approve(self, inp: ApproveInput) -> RunbookStatus:
        return controls.approve(self.run_state, inp)

    @approve.validator
    def _validate_approve(self, inp: ApproveInput) -> None:
        controls.check_approve(self.run_state, inp)

    @workflow.update
    def abort_run(self, inp: OperatorInput) -> RunbookStatus:
        return controls.abort(self.run_state, inp)

    @workflow.signal
    def alert_resolved(self, inp: AlertResolvedInput) -> None:
        controls.alert_resolved(self.run_state, inp)

    @workflow.query
    def status(self) -> RunbookStatus:
        return self.run_state.status()
