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
        TaskState,
        task_table,
    )
    from orchestrator.runbook.spec import RunMode

__all__ = ["RunbookControls"]


class RunbookControls:
    """Handlers over the run state that RunbookWorkflow keeps."""

    inp: RunbookRunInput
    mode: RunMode
    state: str
    tasks: dict[str, TaskState]
    paused_by: str | None
    abort: OperatorInput | None
    skips: dict[str, TaskControlInput]
    overrides: dict[str, TaskControlInput]
    approvals: dict[str, ApproveInput]
    events: list[str]
    changed: bool

    def _set(self, task_id: str, phase: TaskPhase, message: str) -> None:
        self.tasks[task_id].phase = phase
        if message:
            self.tasks[task_id].message = message
        self.changed = True
        self._show()

    def _show(self) -> None:
        """The task table as the run's current details (the Temporal UI shows it)."""
        workflow.set_current_details(
            task_table(self.inp.runbook.name, self.mode, self.state, self.tasks.values())
        )

    def _skip(self, task_id: str, why: SkipReason, message: str) -> None:
        self.tasks[task_id].skipped = why
        self._set(task_id, TaskPhase.SKIPPED, message)

    def _event(self, text: str) -> None:
        stamp = workflow.now().strftime("%H:%M:%S")
        self.events.append(f"{stamp} {text}")
        workflow.logger.info(text)

    def _known(self, task_id: str) -> None:
        if task_id not in self.tasks:
            raise ApplicationError(
                f"no task {task_id!r} in {self.inp.runbook.name}", type="InvalidRequest"
            )

    @workflow.update
    def pause(self, inp: OperatorInput) -> RunbookStatus:
        self.paused_by = inp.by
        self._event(f"paused by {inp.by}: {inp.reason}")
        return self.status()

    @workflow.update
    def resume(self, inp: OperatorInput) -> RunbookStatus:
        self.paused_by = None
        self._event(f"resumed by {inp.by}")
        return self.status()

    @workflow.update
    def skip(self, inp: TaskControlInput) -> RunbookStatus:
        self.skips[inp.task] = inp
        if self.tasks[inp.task].phase == TaskPhase.PENDING:
            self._skip(inp.task, SkipReason.OPERATOR, f"skipped by {inp.by}: {inp.reason}")
        self._event(f"{inp.task}: skipped by {inp.by}: {inp.reason}")
        return self.status()

    @skip.validator
    def _validate_skip(self, inp: TaskControlInput) -> None:
        self._known(inp.task)

    @workflow.update
    def override(self, inp: TaskControlInput) -> RunbookStatus:
        self.overrides[inp.task] = inp
        self._event(f"{inp.task}: override requested by {inp.by}: {inp.reason}")
        return self.status()

    @override.validator
    def _validate_override(self, inp: TaskControlInput) -> None:
        self._known(inp.task)
        if not inp.reason:
            raise ApplicationError(
                "an override needs a reason; it is recorded", type="InvalidRequest"
            )

    @workflow.update
    def approve(self, inp: ApproveInput) -> RunbookStatus:
        self.approvals[inp.task] = inp
        self._event(
            f"{inp.task}: approved by {inp.by} at {workflow.now().isoformat()}: {inp.comment}"
        )
        return self.status()

    @approve.validator
    def _validate_approve(self, inp: ApproveInput) -> None:
        self._known(inp.task)
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
        self.abort = inp
        self._event(f"abort requested by {inp.by}: {inp.reason}")
        return self.status()

    @workflow.signal
    def alert_resolved(self, inp: AlertResolvedInput) -> None:
        self._event(f"alert {inp.alertname or inp.fingerprint} resolved")

    @workflow.query
    def status(self) -> RunbookStatus:
        return RunbookStatus(
            runbook=self.inp.runbook.name,
            mode=self.mode,
            state="paused" if self.paused_by and self.state == "running" else self.state,
            paused_by=self.paused_by,
            tasks=list(self.tasks.values()),
            events=self.events[-50:],
        )
