"""``orchestrator schedule``: Temporal Schedules for drain drills and daily load tests.

A schedule's action carries the whole input (the linted runbooks included), so a
drill runs what was scheduled even if the files change later. Overlap is
``SKIP``: a drill still running when the next one is due means the next is not
started at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)

from orchestrator.commands.known import check_known
from orchestrator.commands.output import JSON_OPTION, console, error_reason, fail, print_json
from orchestrator.commands.runbook import PARAM_OPTION, parse_params
from orchestrator.commands.temporal_call import with_client
from orchestrator.config import Settings
from orchestrator.contracts.drill import DRILL_WORKFLOW, BlockedWindow, DrillInput
from orchestrator.contracts.load_test import DEFAULT_SETTLE_S, DEFAULT_WINDOW_S, LoadTestInput
from orchestrator.exceptions import OrchestratorError
from orchestrator.policy.drain.drill import parse_window
from orchestrator.runbook import load_runbook
from orchestrator.runbook.types import parse_duration

__all__ = ["app"]

LOAD_TEST_WORKFLOW = "LiveLoadTestWorkflow"

app = typer.Typer(
    name="schedule",
    help="Schedule drain drills and load tests (Temporal Schedules).",
    no_args_is_help=True,
    add_completion=False,
)
create = typer.Typer(help="Create a schedule.", no_args_is_help=True, add_completion=False)
app.add_typer(create, name="create")

#: A schedule's interval may be longer than a runbook's durations (a quarterly drill).
MAX_EVERY_S = 366 * 86400.0
EVERY_OPTION = typer.Option(None, "--every", help="Interval, e.g. 2d, 12h, 30s (at most 366d).")
CRON_OPTION = typer.Option([], "--cron", help="A cron expression (UTC); repeat for more.")
PAUSED_OPTION = typer.Option(False, "--paused", help="Create it paused.")


def _spec(every: str | None, cron: list[str], default_every: str) -> ScheduleSpec:
    if every is None and not cron:
        every = default_every
    intervals = []
    if every is not None:
        try:
            seconds = parse_duration(every, maximum=MAX_EVERY_S)
        except ValueError as exc:
            fail(f"--every: {exc}")
        if seconds < 1:
            fail("--every: at least 1s")
        intervals.append(ScheduleIntervalSpec(every=timedelta(seconds=seconds)))
    return ScheduleSpec(intervals=intervals, cron_expressions=list(cron))


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            fail(f"--block-on {pair!r}: expected LABEL=VALUE")
        labels[name] = value
    return labels


def _create(
    schedule_id: str,
    workflow: str,
    arg: Any,
    spec: ScheduleSpec,
    paused: bool,
    *,
    regions: list[str],
    services: Sequence[str] = (),
) -> None:
    async def body(client: Client, settings: Settings) -> None:
        # A schedule that names a region the fleet lacks would fail at every firing.
        await check_known(settings, regions=regions, services=services)
        action = ScheduleActionStartWorkflow(
            workflow, arg, id=schedule_id, task_queue=settings.task_queue
        )
        schedule = Schedule(
            action=action,
            spec=spec,
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
            state=ScheduleState(paused=paused, note="created paused" if paused else ""),
        )
        try:
            await client.create_schedule(schedule_id, schedule)
        except ScheduleAlreadyRunningError:
            fail(f"a schedule with id {schedule_id!r} exists (delete it first)")

    with_client(body, "schedule")
    state = "paused" if paused else "active"
    console.print(f"created schedule [bold]{schedule_id}[/] ({workflow}, {state})", highlight=False)


@create.command("drill")
def create_drill(
    schedule_id: str = typer.Argument("drain-drill", help="The schedule's id."),
    runbook: Path = typer.Option(Path("runbooks/region-drain.yaml"), help="The drain runbook."),
    restore: Path | None = typer.Option(
        Path("runbooks/region-restore.yaml"), help="Run after the drain; --no-restore: none."
    ),
    no_restore: bool = typer.Option(False, "--no-restore", help="Do not restore afterwards."),
    regions: list[str] = typer.Option([], "--region", help="A candidate region; default: all."),
    params: list[str] = PARAM_OPTION,
    blocked: list[str] = typer.Option(
        [], "--blocked", help="No drill in this UTC window: '[DAYS ]HH:MM-HH:MM'."
    ),
    alertmanager: str | None = typer.Option(
        None, "--alertmanager", help="Alertmanager URL; a matching firing alert skips a drill."
    ),
    block_on: list[str] = typer.Option(
        [],
        "--block-on",
        help="LABEL=VALUE an alert must have to block (default severity=critical).",
    ),
    every: str | None = EVERY_OPTION,
    cron: list[str] = CRON_OPTION,
    paused: bool = PAUSED_OPTION,
) -> None:
    """A drain drill on the least recently drained region (default every 2 days)."""
    try:
        windows: list[BlockedWindow] = [parse_window(w) for w in blocked]
        inp = DrillInput(
            runbook=load_runbook(runbook),
            restore=None if no_restore or restore is None else load_runbook(restore),
            regions=list(regions),
            parameters=dict(parse_params(params)),
            blocked_windows=windows,
            alertmanager_url=alertmanager,
            blocking_labels=_labels(block_on) if block_on else {"severity": "critical"},
            requested_by=f"schedule:{schedule_id}",
        )
    except (OrchestratorError, ValueError) as exc:
        fail(error_reason(exc))
    _create(
        schedule_id, DRILL_WORKFLOW, inp, _spec(every, cron, "2d"), paused, regions=list(regions)
    )


@create.command("loadtest")
def create_loadtest(
    schedule_id: str = typer.Argument("daily-loadtest", help="The schedule's id."),
    region: str = typer.Option(..., "--region", help="The region to load."),
    service: str = typer.Option("web", "--service"),
    window: float = typer.Option(
        DEFAULT_WINDOW_S, "--window", help="Seconds of health judged per step."
    ),
    settle: float = typer.Option(DEFAULT_SETTLE_S, "--settle", help="Seconds before each window."),
    every: str | None = EVERY_OPTION,
    cron: list[str] = CRON_OPTION,
    paused: bool = PAUSED_OPTION,
) -> None:
    """A live load test of one region (default daily)."""
    try:
        inp = LoadTestInput(
            region=region,
            service=service,
            window_s=window,
            settle_s=settle,
            reason=f"schedule:{schedule_id}",
        )
    except ValueError as exc:
        fail(error_reason(exc))
    _create(
        schedule_id,
        LOAD_TEST_WORKFLOW,
        inp,
        _spec(every, cron, "1d"),
        paused,
        regions=[region],
        services=[service],
    )


@app.command("list")
def list_schedules(as_json: bool = JSON_OPTION) -> None:
    """Every schedule: what it starts, when next, its last actions, paused or not."""

    async def body(client: Client, settings: Settings) -> list[dict[str, Any]]:
        rows = []
        async for entry in await client.list_schedules():
            action = entry.schedule.action if entry.schedule else None
            spec = entry.schedule.spec if entry.schedule else None
            state = entry.schedule.state if entry.schedule else None
            rows.append(
                {
                    "id": entry.id,
                    "workflow": getattr(action, "workflow", None),
                    "every": [str(i.every) for i in spec.intervals] if spec else [],
                    "cron": list(spec.cron_expressions) if spec else [],
                    "paused": bool(state and state.paused),
                    "note": state.note if state else None,
                    "next": [t.isoformat() for t in entry.info.next_action_times[:1]]
                    if entry.info
                    else [],
                    "recent": [
                        a.action.workflow_id
                        for a in (entry.info.recent_actions if entry.info else [])
                        if hasattr(a.action, "workflow_id")
                    ],
                }
            )
        return sorted(rows, key=lambda r: r["id"])

    rows = with_client(body, "schedule")
    if as_json:
        print_json(rows)
        return
    table = Table(title="schedules")
    for column in ("id", "workflow", "when", "state", "next", "last started"):
        table.add_column(column)
    for row in rows:
        when = ", ".join([*(f"every {e}" for e in row["every"]), *row["cron"]])
        table.add_row(
            row["id"],
            row["workflow"] or "?",
            when,
            "paused" if row["paused"] else "active",
            ", ".join(row["next"]) or "-",
            row["recent"][-1] if row["recent"] else "-",
        )
    console.print(table)


@app.command("pause")
def pause(
    schedule_id: str = typer.Argument(..., help="The schedule's id."),
    unpause: bool = typer.Option(False, "--unpause", help="Resume it instead."),
    note: str = typer.Option("", "--note", help="Why (shown in the Temporal UI)."),
) -> None:
    """Pause a schedule (or resume it with --unpause)."""

    async def body(client: Client, settings: Settings) -> None:
        handle = client.get_schedule_handle(schedule_id)
        if unpause:
            await handle.unpause(note=note or "unpaused from the CLI")
        else:
            await handle.pause(note=note or "paused from the CLI")

    with_client(body, "schedule")
    console.print(f"{'unpaused' if unpause else 'paused'} {schedule_id}", highlight=False)


@app.command("trigger")
def trigger(schedule_id: str = typer.Argument(..., help="The schedule's id.")) -> None:
    """Run a schedule's action now (still skipped if its last run is still going)."""

    async def body(client: Client, settings: Settings) -> None:
        await client.get_schedule_handle(schedule_id).trigger()

    with_client(body, "schedule")
    console.print(f"triggered {schedule_id}", highlight=False)


@app.command("delete")
def delete(schedule_id: str = typer.Argument(..., help="The schedule's id.")) -> None:
    """Delete a schedule; runs it already started keep running."""

    async def body(client: Client, settings: Settings) -> None:
        await client.get_schedule_handle(schedule_id).delete()

    with_client(body, "schedule")
    console.print(f"deleted {schedule_id}", highlight=False)
