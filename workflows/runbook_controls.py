"""Operator controls of RunbookWorkflow: its Updates, signal and query.

A mixin so the scheduler in ``workflows/runbook.py`` reads on its own. Each
handler only records what the operator asked (who, why, when) and wakes the
scheduler; the scheduler acts on it at the next stage boundary. The handler
names (pause, resume, skip, override, approve, abort_run, alert_resolved,
status) are the workflow's public surface: the CLI and the trigger server call
them by name.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import (
        AlertResolvedInput,
        ApproveInput,
        OperatorInput,
        RunbookRunInput,
        RunbookStatus,
        SkipReason,
        TaskControlInput,
        TaskPhase,
    )
    from workflows.runbook_run import RunState

__all__ = ["RunbookControls"]


class RunbookControls:
    """Handlers over the run state that RunbookWorkflow keeps."""

    inp: RunbookRunInput
    run_state: RunState

    @workflow.update
    def pause(self, inp: OperatorInput) -> RunbookStatus:
        self.run_state.paused_by = inp.by
        self.run_state.event(f"paused by {inp.by}: {inp.reason}")
        return self.status()

    @workflow.update
    def resume(self, inp: OperatorInput) -> RunbookStatus:
        self.run_state.paused_by = None
        self.run_state.event(f"resumed by {inp.by}")
        return self.status()

    @workflow.update
    def skip(self, inp: TaskControlInput) -> RunbookStatus:
        self.run_state.skips[inp.task] = inp
        if self.run_state.tasks[inp.task].phase == TaskPhase.PENDING:
            self.run_state.skip(inp.task, SkipReason.OPERATOR, f"skipped by {inp.by}: {inp.reason}")
        self.run_state.event(f"{inp.task}: skipped by {inp.by}: {inp.reason}")
        return self.status()

    @skip.validator
    def _validate_skip(self, inp: TaskControlInput) -> None:
        self.run_state.known(inp.task)

    @workflow.update
    def override(self, inp: TaskControlInput) -> RunbookStatus:
        self.run_state.overrides[inp.task] = inp
        self.run_state.event(f"{inp.task}: override requested by {inp.by}: {inp.reason}")
        return self.status()

    @override.validator
    def _validate_override(self, inp: TaskControlInput) -> None:
        self.run_state.known(inp.task)
        if not inp.reason:
            raise ApplicationError(
                "an override needs a reason; it is recorded", type="InvalidRequest"
            )

    @workflow.update
    def approve(self, inp: ApproveInput) -> RunbookStatus:
        self.run_state.approvals[inp.task] = inp
        self.run_state.event(
            f"{inp.task}: approved by {inp.by} at {workflow.now().isoformat()}: {inp.comment}"
        )
        return self.status()

    @approve.validator
    def _validate_approve(self, inp: ApproveInput) -> None:
        self.run_state.known(inp.task)
        task = self.inp.runbook.task(inp.task)
        if task.template != "approval":
            raise ApplicationError(f"task {inp.task} is not an approval", type="InvalidRequest")
        approvers = task.args.get("approvers", [])
        if approvers and inp.by not in approvers:
            raise ApplicationError(
                f"{inp.by} may not approve {inp.task} (approvers: {', '.join(approvers)})",
                type="InvalidRequest",
            )

    @workflow.update
    def abort_run(self, inp: OperatorInput) -> RunbookStatus:
        self.run_state.abort = inp
        self.run_state.event(f"abort requested by {inp.by}: {inp.reason}")
        return self.status()

    @workflow.signal
    def alert_resolved(self, inp: AlertResolvedInput) -> None:
        self.run_state.event(f"alert {inp.alertname or inp.fingerprint} resolved")

    @workflow.query
    def status(self) -> RunbookStatus:
        return self.run_state.status()
