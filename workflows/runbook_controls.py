"""What an operator's Updates and signal to a RunbookWorkflow do to its run state.

Each records what the operator asked (who, why, when) and wakes the scheduler, which
acts on it at the next stage boundary; the workflow's handlers (pause, resume, skip,
override, approve, abort_run, alert_resolved, status: the names the CLI and the
trigger server call) are one line over these.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import (
        AlertResolvedInput,
        ApproveInput,
        OperatorInput,
        RunbookStatus,
        SkipReason,
        TaskControlInput,
        TaskPhase,
    )
    from workflows.runbook_run import RunState

__all__ = [
    "abort",
    "alert_resolved",
    "approve",
    "check_approve",
    "check_override",
    "override",
    "pause",
    "resume",
    "skip",
]


def pause(run: RunState, inp: OperatorInput) -> RunbookStatus:
    run.paused_by = inp.by
    run.event(f"paused by {inp.by}: {inp.reason}")
    return run.status()


def resume(run: RunState, inp: OperatorInput) -> RunbookStatus:
    run.paused_by = None
    run.event(f"resumed by {inp.by}")
    return run.status()


def skip(run: RunState, inp: TaskControlInput) -> RunbookStatus:
    run.skips[inp.task] = inp
    if run.tasks[inp.task].phase == TaskPhase.PENDING:
        run.skip(inp.task, SkipReason.OPERATOR, f"skipped by {inp.by}: {inp.reason}")
    run.event(f"{inp.task}: skipped by {inp.by}: {inp.reason}")
    return run.status()


def override(run: RunState, inp: TaskControlInput) -> RunbookStatus:
    run.overrides[inp.task] = inp
    run.event(f"{inp.task}: override requested by {inp.by}: {inp.reason}")
    return run.status()


def check_override(run: RunState, inp: TaskControlInput) -> None:
    run.known(inp.task)
    if not inp.reason:
        raise ApplicationError("an override needs a reason; it is recorded", type="InvalidRequest")


def approve(run: RunState, inp: ApproveInput) -> RunbookStatus:
    run.approvals[inp.task] = inp
    run.event(f"{inp.task}: approved by {inp.by} at {workflow.now().isoformat()}: {inp.comment}")
    return run.status()


def check_approve(run: RunState, inp: ApproveInput) -> None:
    run.known(inp.task)
    task = run.runbook.task(inp.task)
    if task.template != "approval":
        raise ApplicationError(f"task {inp.task} is not an approval", type="InvalidRequest")
    approvers = task.args.get("approvers", [])
    if approvers and inp.by not in approvers:
        raise ApplicationError(
            f"{inp.by} may not approve {inp.task} (approvers: {', '.join(approvers)})",
            type="InvalidRequest",
        )


def abort(run: RunState, inp: OperatorInput) -> RunbookStatus:
    run.abort = inp
    run.event(f"abort requested by {inp.by}: {inp.reason}")
    return run.status()


def alert_resolved(run: RunState, inp: AlertResolvedInput) -> None:
    run.event(f"alert {inp.alertname or inp.fingerprint} resolved")
