"""``orchestrator drain REGION`` and ``orchestrator undrain REGION``: the shipped
region-drain / region-restore runbooks as one command each.

A drain whose runbook shifts traffic refuses at once, like ``undrain``, when no
rebalancer runs: the rebalancer is the only writer of routing and holds the region.
Before a drain starts, the capacity check runs here (and again as the drain's
first activity, for drains started by triggers): it refuses, with every
region's predicted utilization, a drain after which the other regions would run
above the target, alone or together with drains already running. ``--dry-run``
prints the plan (DAG, order, critical path) and that forecast, and changes
nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from temporalio.client import Client

from orchestrator.clients.drains import drain_forecast
from orchestrator.commands.gpu_forecast import gpu_forecasts, print_gpu_forecasts
from orchestrator.commands.known import check_known
from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.commands.rebalance_control import require_rebalancer
from orchestrator.commands.runbook import PARAM_OPTION, parse_params, plan_data, print_plan
from orchestrator.commands.runbook_control import (
    AS_OPTION,
    MODE_OPTION,
    WAIT_OPTION,
    prepare,
    print_report,
    start_and_follow,
    who,
)
from orchestrator.commands.temporal_call import with_client
from orchestrator.config import Settings
from orchestrator.contracts.drain import DrainCheckInput
from orchestrator.contracts.runbook import RunbookReport, RunbookRunInput
from orchestrator.policy.drain.capacity import DEFAULT_TARGET_UTILIZATION, DrainForecast
from orchestrator.promhealth.configured import fleet_from_settings

__all__ = ["RUNBOOKS_DIR", "register", "shifts_traffic"]

#: the runbooks shipped with the project
RUNBOOKS_DIR = Path(__file__).resolve().parents[2] / "runbooks"

TARGET_OPTION = typer.Option(
    DEFAULT_TARGET_UTILIZATION,
    "--target",
    min=0.01,
    max=1.0,
    help="Refuse a drain after which another region would run above this utilization.",
)


def _forecast_table(forecast: DrainForecast, running: dict[str, str]) -> Table:
    table = Table(
        title=f"predicted utilization after draining {', '.join(forecast.draining)} "
        f"(target {forecast.target_utilization:.0%})",
        title_justify="left",
    )
    for column in ("region", "role", "now", "after", "by service (after)"):
        table.add_column(column)
    for region in forecast.regions:
        after = region.utilization_after
        over = after is not None and after > forecast.target_utilization
        shown = "-" if after is None else f"{after:.0%}"
        table.add_row(
            region.region,
            region.role + (f" ({running[region.region]})" if region.region in running else ""),
            "-" if region.utilization_before is None else f"{region.utilization_before:.0%}",
            f"[red]{shown}[/]" if over else shown,
            ", ".join(
                f"{s.service} {s.utilization_after:.0%}"
                for s in region.services
                if s.utilization_after is not None
            ),
        )
    return table


def register(app: typer.Typer) -> None:
    @app.command("drain")
    def drain(
        region: str = typer.Argument(..., help="The region to drain."),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Show the plan and the forecast; change nothing."
        ),
        wait: bool = WAIT_OPTION,
        target: float = TARGET_OPTION,
        params: list[str] = PARAM_OPTION,
        mode: str = MODE_OPTION,
        runbook: Path = typer.Option(RUNBOOKS_DIR / "region-drain.yaml", "--runbook"),
        by: str | None = AS_OPTION,
        as_json: bool = JSON_OPTION,
        building: str | None = typer.Option(
            None,
            "--building",
            help="Drain only this building's share of REGION: the runbook takes a `building` "
            "parameter instead of `region` (workflow id drain-BUILDING).",
        ),
    ) -> None:
        """Drain REGION with the region-drain runbook (workflow id drain-REGION)."""
        target_param = {"building": building} if building else {"region": region}
        inp = prepare(runbook, {**parse_params(params), **target_param}, mode, who(by), target)
        wid = f"drain-{building or region}"

        async def body(client: Client, settings: Settings) -> Any:
            await check_known(settings, regions=[region], buildings=[building] if building else [])
            fleet = fleet_from_settings(settings)
            check = DrainCheckInput(
                region=region,
                building=building or "",
                workflow_id=wid,
                target=target,
                task_queue=settings.task_queue,
            )
            try:
                # A refusal (DrainRefused) is an OrchestratorError: with_client prints it.
                forecast, running = await drain_forecast(fleet, client, check, check=not dry_run)
            finally:
                await fleet.aclose()
            if dry_run:
                return forecast, running
            if shifts_traffic(inp):
                # A traffic shift asks the rebalancer for its hold: without one the first
                # step would fail after its retries and the drain roll back. Refuse now.
                await require_rebalancer(client, settings, f"drain {region}")
            return await start_and_follow(client, settings, inp, wid, wait and not as_json)

        answer = with_client(body, "drain")
        if dry_run:
            forecast, running = answer
            plan = plan_data(inp.runbook, inp.mode)
            gpus = gpu_forecasts(inp.runbook, inp.mode)
            if as_json:
                print_json(
                    {"plan": plan, "forecast": forecast, "running_drains": running, "gpu": gpus}
                )
                return
            print_plan(inp.runbook, plan)
            console.print(_forecast_table(forecast, running))
            print_gpu_forecasts(gpus)
            verdict = "[green]safe[/]" if forecast.safe else "[red]would be refused[/]: "
            for note in forecast.notes:
                console.print(f"[yellow]estimated[/]: {note}")
            console.print(f"dry run, nothing changed; {verdict}" + "; ".join(forecast.reasons))
            return
        _started(answer, wid, as_json)

    @app.command("undrain")
    def undrain(
        region: str = typer.Argument(..., help="The region to bring back."),
        wait: bool = WAIT_OPTION,
        params: list[str] = PARAM_OPTION,
        mode: str = MODE_OPTION,
        runbook: Path = typer.Option(RUNBOOKS_DIR / "region-restore.yaml", "--runbook"),
        by: str | None = AS_OPTION,
        as_json: bool = JSON_OPTION,
    ) -> None:
        """Restore REGION with the region-restore runbook (workflow id undrain-REGION)."""
        inp = prepare(runbook, {**parse_params(params), "region": region}, mode, who(by))
        wid = f"undrain-{region}"

        async def body(client: Client, settings: Settings) -> RunbookReport | None:
            await check_known(settings, regions=[region])
            # Without the rebalancer the restore's release would wait on nobody: refuse now.
            await require_rebalancer(client, settings, f"undrain {region}")
            return await start_and_follow(client, settings, inp, wid, wait and not as_json)

        _started(with_client(body, "undrain"), wid, as_json)


def shifts_traffic(inp: RunbookRunInput) -> bool:
    """Whether the run (or a runbook it nests) has a traffic_shift task: one that needs the
    rebalancer, the only writer of routing, to hold the region."""
    runbooks = [inp.runbook, *inp.nested.values()]
    return any(task.template == "traffic_shift" for rb in runbooks for task in rb.tasks)


def _started(report: RunbookReport | None, wid: str, as_json: bool) -> None:
    if as_json:
        print_json(report if report is not None else {"workflow_id": wid})
    elif report is not None:
        print_report(report)
        if report.outcome != "completed":
            fail(f"{wid} ended {report.outcome}")
    else:
        console.print(f"started {wid}  (orchestrator runbook status {wid})", highlight=False)
