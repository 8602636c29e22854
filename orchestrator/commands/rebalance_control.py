"""`orchestrator rebalance start|stop|status|pause|resume`: the rebalancer's controls.

``status`` says when the rebalancer is not running (never started, failed, terminated)
instead of replaying the closed run's last state as if it were live;
:func:`require_rebalancer` lets other commands (``undrain``) refuse at once without one.
"""

from __future__ import annotations

import getpass
from datetime import datetime
from typing import Any

import typer
from pydantic import BaseModel
from rich.table import Table
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowHistoryEventFilterType,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.clients.rebalancer import stop_rebalancer
from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.commands.temporal_call import with_client
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import (
    REBALANCER_ID,
    STOPPED_MEMO,
    PauseInput,
    RebalancerInput,
    RebalancerStatus,
    ResumeInput,
    StopInput,
)
from orchestrator.exceptions import UnsafeRequest
from orchestrator.policy.rebalance.model import Constraints
from workflows.rebalancer import TrafficRebalanceWorkflow

__all__ = ["NotRunning", "register", "rebalancer_not_running", "require_rebalancer"]


def _handle(client: Client) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(REBALANCER_ID)


class NotRunning(BaseModel):
    """Why no rebalancer is running: never started, or its last run closed (and how)."""

    workflow_id: str = REBALANCER_ID
    running: bool = False
    #: never_started, stopped (``rebalance stop``), failed, terminated, canceled, timed_out,
    #: completed, other_task_queue
    status: str
    closed_at: datetime | None = None
    cause: str = ""

    def line(self) -> str:
        if self.status == "never_started":
            return f"no rebalancer has been started (workflow id {self.workflow_id})"
        if self.status == "other_task_queue":
            return f"the rebalancer running is on another task queue: {self.cause}"
        when = f" at {self.closed_at:%Y-%m-%d %H:%M:%S} UTC" if self.closed_at else ""
        cause = f": {self.cause}" if self.cause else ""
        return f"the rebalancer {self.status.replace('_', ' ')}{when}{cause}"


async def _close_cause(handle: WorkflowHandle[Any, Any]) -> str:
    async for event in handle.fetch_history_events(
        event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
    ):
        if event.HasField("workflow_execution_failed_event_attributes"):
            failure = event.workflow_execution_failed_event_attributes.failure
            while failure.HasField("cause"):
                failure = failure.cause
            return failure.message
        if event.HasField("workflow_execution_terminated_event_attributes"):
            return event.workflow_execution_terminated_event_attributes.reason
        if event.HasField("workflow_execution_timed_out_event_attributes"):
            return "its run timed out"
    return ""


async def rebalancer_not_running(client: Client, task_queue: str) -> NotRunning | None:
    """None when the rebalancer runs on ``task_queue``; else what became of it."""
    handle = _handle(client)
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return NotRunning(status="never_started")
        raise
    if described.status == WorkflowExecutionStatus.RUNNING:
        if task_queue and described.task_queue != task_queue:
            return NotRunning(status="other_task_queue", cause=described.task_queue)
        return None
    status = described.status.name.lower() if described.status else "closed"
    if described.status == WorkflowExecutionStatus.COMPLETED:
        stopped = (await described.memo()).get(STOPPED_MEMO)
        if isinstance(stopped, dict):
            reason = stopped.get("reason") or ""
            by = f"by {stopped.get('by')}" + (f", {reason}" if reason else "")
            return NotRunning(status="stopped", closed_at=described.close_time, cause=by)
    return NotRunning(
        status=status, closed_at=described.close_time, cause=await _close_cause(handle)
    )


async def require_rebalancer(client: Client, settings: Settings, what: str) -> None:
    """Refuse ``what`` at once (UnsafeRequest) when no rebalancer runs on this task queue."""
    gone = await rebalancer_not_running(client, settings.task_queue)
    if gone is not None:
        raise UnsafeRequest(
            f"{what} refused: {gone.line()}. The rebalancer is the only writer of routing "
            "and keeps the drain's hold; start it with `orchestrator rebalance start` (it "
            f"takes over the holds of its last run), then run {what} again"
        )


def start(
    epoch_s: float = typer.Option(300.0, help="Seconds between epochs (Taiji: 300)."),
    window_s: float | None = typer.Option(None, help="Health window in seconds."),
    max_increase: float = typer.Option(0.04, help="Max utilization increase per region per epoch."),
    target: float = typer.Option(1.0, help="Max predicted utilization of any region."),
    service: str = typer.Option("web", help="Service whose load is balanced."),
) -> None:
    """Start the rebalancer (workflow id `rebalancer`); a running one is left as it is."""

    async def body(client: Client, settings: Settings) -> str:
        inp = RebalancerInput(
            epoch_s=epoch_s,
            window_s=window_s,
            service=service,
            constraints=Constraints(
                max_utilization_increase=max_increase, target_utilization=target
            ),
        )
        handle = await client.start_workflow(
            TrafficRebalanceWorkflow.run,
            inp,
            id=REBALANCER_ID,
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
        return handle.result_run_id or ""

    run_id = with_client(body, "rebalancer")
    console.print(f"rebalancer running (workflow id {REBALANCER_ID}, run {run_id})")


def stop(
    reason: str = typer.Option("stopped from the CLI", help="Recorded in history."),
    timeout_s: float = typer.Option(
        30.0, "--timeout-s", min=0, help="Wait this long for the epoch in progress, then terminate."
    ),
) -> None:
    """Stop the rebalancer after the epoch in progress.

    The routing table stays as published. The run ends at an epoch boundary, so a publish
    in flight lands before this returns, never after it; requests no epoch settled are
    refused, so their drains learn at once. A run that does not stop within --timeout-s
    (no worker polling, a publish retrying against an unreachable fleet) is terminated,
    and this says so.
    """

    async def body(client: Client, _settings: Settings) -> str:
        handle = _handle(client)
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return "rebalancer not running; nothing to stop"
        stop = StopInput(by=getpass.getuser(), reason=reason)
        if not await stop_rebalancer(handle, stop, timeout_s):
            return (
                f"rebalancer terminated: it did not stop within {timeout_s:g} s; a publish in "
                "flight may still land"
            )
        return "rebalancer stopped after its epoch in progress; routing left as last published"

    console.print(with_client(body, "rebalancer"))


def status(as_json: bool = JSON_OPTION) -> None:
    """Current table, utilization, overrides and the last epochs."""

    async def body(client: Client, settings: Settings) -> RebalancerStatus | NotRunning:
        gone = await rebalancer_not_running(client, settings.task_queue)
        if gone is not None:
            return gone
        return await _handle(client).query(TrafficRebalanceWorkflow.status)

    result = with_client(body, "rebalancer")
    if isinstance(result, NotRunning):
        if as_json:
            print_json(result)
            raise typer.Exit(1)
        fail(
            f"{result.line()}; no table is published and no hold enforced until "
            "`orchestrator rebalance start` (which takes over the holds of the last run)"
        )
    if as_json:
        print_json(result)
        return
    _print_status(result)


def pause(reason: str = typer.Option("", help="Why; shown in status.")) -> None:
    """Pause: no table is published until resumed; new overrides are refused."""

    async def body(client: Client, _settings: Settings) -> RebalancerStatus:
        return await _handle(client).execute_update(
            TrafficRebalanceWorkflow.pause, PauseInput(by=getpass.getuser(), reason=reason)
        )

    with_client(body, "rebalancer")
    console.print("rebalancer paused")


def resume() -> None:
    """Resume publishing; an epoch runs at once."""

    async def body(client: Client, _settings: Settings) -> RebalancerStatus:
        return await _handle(client).execute_update(
            TrafficRebalanceWorkflow.resume, ResumeInput(by=getpass.getuser())
        )

    with_client(body, "rebalancer")
    console.print("rebalancer resumed")


def _print_status(s: RebalancerStatus) -> None:
    state = f"paused by {s.paused_by} ({s.pause_reason})" if s.paused_by else "running"
    console.print(f"epoch {s.epoch}, {state}, routing version {s.last_good_version}")
    if not s.trusted_view:
        console.print("[yellow]no trusted view of the fleet yet[/]: overrides are refused")
    i = s.incidents
    if i.unreachable_epochs or i.routing_regressions or i.emergency_steps:
        console.print(
            f"[red]incidents[/]: {i.unreachable_epochs} epochs with the fleet unreachable, "
            f"{i.routing_regressions} routing regressions (fleet lost state), "
            f"{i.emergency_steps} emergency steps; last: {i.last}",
            highlight=False,
        )
    if s.recovery_note:
        console.print(f"[dim]{s.recovery_note}[/]", highlight=False)
    table = Table("region", "share", "predicted util", "override")
    holds = {o.region: o for o in s.overrides}
    for region in sorted(set(s.shares) | set(holds)):
        o = holds.get(region)
        table.add_row(
            region,
            f"{s.shares.get(region, 0.0):.1%}",
            f"{s.utilization.get(region, 0.0):.1%}",
            f"{o.owner}: {o.reason}" if o else "",
        )
    console.print(table)
    epochs = Table("epoch", "outcome", "max util before", "after", "moved", "churn", "reason")
    for e in s.epochs[-10:]:
        epochs.add_row(
            str(e.epoch),
            e.outcome,
            _pct(e.max_utilization_before),
            _pct(e.max_utilization_after),
            _pct(e.traffic_moved_share),
            "" if e.churn is None else str(e.churn),
            e.reason,
        )
    console.print(epochs)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def register(app: typer.Typer) -> None:
    for command in (start, stop, status, pause, resume):
        app.command()(command)
