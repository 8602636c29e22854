"""``orchestrator report ID|--last``: one run's self-contained HTML report, with charts."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from temporalio.client import Client

from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.commands.temporal_call import with_client
from orchestrator.config import Settings

__all__ = ["register"]


def default_out(workflow_id: str) -> Path:
    """``report-<id>.html`` in the current folder, the id made safe for a file name."""
    return Path(f"report-{re.sub(r'[^A-Za-z0-9._-]+', '_', workflow_id)}.html")


def report(
    workflow_id: str | None = typer.Argument(None, help="Workflow id of the run to report on."),
    last: bool = typer.Option(
        False, "--last", help="The most recently started run of a reported workflow type."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="HTML file to write (default: report-<id>.html here)."
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Write a self-contained HTML report of one run: header, summary and charts.

    Rebalancer: traffic share and utilization per epoch. Load test: health metrics
    against load with their bands and the capacity found. Runbook: the task timeline
    with the critical path. Training supervisor: steps over time with failures.
    """
    if (workflow_id is None) == (not last):
        fail("give a workflow id or --last (one of the two)", code=2)
    # Imported here: matplotlib loads in a moment, which every other command would pay for.
    from orchestrator.reports import latest_workflow_id, write_report

    async def body(client: Client, settings: Settings) -> tuple[str, Path]:
        wid = workflow_id if workflow_id is not None else await latest_workflow_id(client)
        path = await write_report(client, wid, out if out is not None else default_out(wid))
        return wid, path

    wid, path = with_client(body, what="report")
    if json_out:
        print_json({"workflow_id": wid, "path": str(path.resolve())})
    else:
        console.print(f"report of [bold]{wid}[/] written to {path}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
