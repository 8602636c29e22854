"""`orchestrator rebalance start|stop|status|pause|resume`: the rebalancer's controls."""

from __future__ import annotations

import getpass
from typing import Any

import typer
from rich.table import Table
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from orchestrator.commands.output import JSON_OPTION, console, print_json
from orchestrator.commands.temporal_call import with_client
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import (
    REBALANCER_ID,
    PauseInput,
    RebalancerInput,
    RebalancerStatus,
    ResumeInput,
)
from orchestrator.policy.taiji_model import Constraints
from workflows.rebalancer import TrafficRebalanceWorkflow

__all__ = ["register"]


def _handle(client: Client) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(REBALANCER_ID)


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


def stop(reason: str = typer.Option("stopped from the CLI", help="Recorded in history.")) -> None:
    """Stop the rebalancer. The routing table stays as last published."""

    async def body(client: Client, _settings: Settings) -> None:
        handle = _handle(client)
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return
        await handle.terminate(reason=reason)

    with_client(body, "rebalancer")
    console.print("rebalancer stopped; routing left as last published")


def status(as_json: bool = JSON_OPTION) -> None:
    """Current table, utilization, overrides and the last epochs."""

    async def body(client: Client, _settings: Settings) -> RebalancerStatus:
        return await _handle(client).query(TrafficRebalanceWorkflow.status)

    result = with_client(body, "rebalancer")
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
