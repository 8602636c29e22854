"""The GPU half of ``--dry-run`` (issue 25): for each ``training_move`` task, the jobs
with hosts in the building and whether each keeps its size outside, waits or shrinks."""

from __future__ import annotations

import asyncio

from rich.table import Table

from orchestrator.clients.gpu_forecast import GpuForecast, gpu_forecast
from orchestrator.commands.output import console, fail
from orchestrator.commands.platform import settings_or_exit
from orchestrator.exceptions import OrchestratorError
from orchestrator.fleet.configured import fleet_from_settings
from orchestrator.runbook.spec import Runbook, RunMode

__all__ = ["gpu_forecasts", "print_gpu_forecasts"]


def gpu_forecasts(runbook: Runbook, mode: RunMode) -> list[GpuForecast]:
    """Read the fleet's training cluster once (only when the runbook moves jobs)."""
    if not any(t.template == "training_move" for t in runbook.tasks):
        return []
    settings = settings_or_exit()

    async def main() -> list[GpuForecast]:
        fleet = fleet_from_settings(settings)
        try:
            return await gpu_forecast(fleet, runbook, mode)
        finally:
            await fleet.aclose()

    try:
        return asyncio.run(main())
    except OrchestratorError as exc:
        fail(str(exc), code=2)


def print_gpu_forecasts(forecasts: list[GpuForecast]) -> None:
    for f in forecasts:
        plan = f.plan
        where = ", ".join([*plan.avoid_buildings, *plan.avoid_hosts])
        table = Table(
            title=f"GPU plan of {f.task}: training jobs off {where}", title_justify="left"
        )
        for column in ("job", "region", "hosts", "leaving", "keeping", "taking", "outcome"):
            table.add_column(column)
        for j in plan.jobs:
            outcome = j.outcome if j.outcome == "moves" else f"[red]{j.outcome}[/]: {j.reason}"
            table.add_row(
                j.job,
                j.region,
                str(j.size),
                ", ".join(j.leaving),
                ", ".join(j.keeping) or "-",
                ", ".join(j.taking) or "-",
                outcome,
            )
        console.print(table)
        if not plan.jobs:
            verdict = "no training job there: nothing to move"
        elif f.refused:
            verdict = (
                "[red]would be refused[/] (GpuCapacityShort): set allow_waiting after an approval"
            )
        elif plan.short:
            verdict = "[yellow]short, allowed[/] (allow_waiting): the jobs above wait or shrink"
        else:
            verdict = "[green]every job keeps its size[/]"
        console.print(f"{f.task}: {verdict}", highlight=False)
