"""``orchestrator runbook run|status|pause|resume|skip|override|approve|abort``.

``run`` lints the runbook (and every runbook it nests) before anything starts:
an invalid runbook is one line and a non-zero exit, never a started run. The
steering commands send RunbookWorkflow's Updates by name; a refusal by the
workflow's validator (unknown task, an override without a reason, an approver
not on the list) is one line too.
"""

from __future__ import annotations

import asyncio
import getpass
import uuid
from pathlib import Path
from typing import Any

import typer
from rich.live import Live
from rich.table import Table
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from orchestrator.clients.reads import result_or_query
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.commands.gpu_forecast import gpu_forecasts, print_gpu_forecasts
from orchestrator.commands.known import buildings_in_runbook, check_known, names_in_runbook
from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.commands.runbook import PARAM_OPTION, parse_params, plan_data, print_plan
from orchestrator.commands.temporal_call import with_client
from orchestrator.config import Settings
from orchestrator.contracts.runbook import (
    RUNBOOK_WORKFLOW,
    ApproveInput,
    OperatorInput,
    RunbookReport,
    RunbookRunInput,
    RunbookStatus,
    TaskControlInput,
    TaskState,
)
from orchestrator.exceptions import OrchestratorError
from orchestrator.runbook import load_runbook, nested_runbooks
from orchestrator.runbook.spec import RunMode
from orchestrator.runbook.types import format_duration
from orchestrator.temporal import REGION, RUN_KIND, RUNBOOK

__all__ = ["prepare", "register", "start_and_follow"]

MODE_OPTION = typer.Option("real", "--mode", help="drill or real: which `when:` tasks run.")
WAIT_OPTION = typer.Option(False, "--wait", help="Follow the run, task by task, until it ends.")
AS_OPTION = typer.Option(None, "--as", help="Who is acting (recorded; default: your user).")
TASK_OPTION = typer.Option(..., "--task", help="The task id.")


def who(name: str | None) -> str:
    return name or getpass.getuser()


def prepare(
    file: Path,
    params: dict[str, Any],
    mode: str,
    requested_by: str,
    target_utilization: float = 0.75,
) -> RunbookRunInput:
    """The run's input from a runbook file, only if it (and what it nests) lints clean."""
    if mode not in ("drill", "real"):
        fail(f"--mode {mode!r}: use drill or real")
    run_mode: RunMode = "drill" if mode == "drill" else "real"
    try:
        runbook = load_runbook(file, params)
        nested = nested_runbooks(runbook, file.parent)
    except OrchestratorError as exc:
        fail(str(exc))
    return RunbookRunInput(
        runbook=runbook,
        parameters=params,
        mode=run_mode,
        requested_by=requested_by,
        nested=nested,
        target_utilization=target_utilization,
    )


def region_of(inp: RunbookRunInput) -> str | None:
    param = inp.runbook.parameters.get("region")
    return str(param.default) if param is not None and param.default else None


def search_attributes(inp: RunbookRunInput) -> TypedSearchAttributes:
    # Set at start (the workflow sets them again) so visibility finds the run at once.
    pairs = [
        SearchAttributePair(RUNBOOK, inp.runbook.name),
        SearchAttributePair(RUN_KIND, inp.runbook.kind.value),
    ]
    region = region_of(inp)
    if region:
        pairs.append(SearchAttributePair(REGION, region))
    return TypedSearchAttributes(pairs)


async def start_and_follow(
    client: Client, settings: Settings, inp: RunbookRunInput, workflow_id: str, wait: bool
) -> RunbookReport | None:
    """Start the run; with ``wait``, show live per-task progress and return the report."""
    regions, services = names_in_runbook(inp)
    buildings = buildings_in_runbook(inp)
    await check_known(settings, regions=regions, services=services, buildings=buildings)
    try:
        handle = await client.start_workflow(
            RUNBOOK_WORKFLOW,
            inp,
            id=workflow_id,
            task_queue=settings.task_queue,
            search_attributes=search_attributes(inp),
            result_type=RunbookReport,
        )
    except WorkflowAlreadyStartedError:
        fail(f"{workflow_id} is already running (orchestrator runbook status {workflow_id})")
    if not wait:
        return None
    await follow(handle)
    return await runbook_result(handle)


def status_table(status: RunbookStatus, title: str) -> Table:
    table = Table(title=f"{title}: {status.state}", title_justify="left")
    for column in ("task", "phase", "step", "took", "message"):
        table.add_column(column)
    for task in status.tasks:
        table.add_row(
            task.id + (" [red](stuck)[/]" if task.stuck else ""),
            task.phase.value,
            f"{task.step}/{task.steps}" if task.steps else "",
            _took(task),
            task.message,
        )
    return table


def _took(task: TaskState) -> str:
    seconds = task.duration_s
    return format_duration(seconds) if seconds is not None else ""


async def follow(handle: WorkflowHandle[Any, Any]) -> None:
    """Redraw the per-task table every second until the run ends."""
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        while True:
            try:
                status = await handle.query("status", result_type=RunbookStatus)
                live.update(status_table(status, handle.id))
            except RPCError:
                pass  # not picked up by a worker yet
            described = await handle.describe()
            if described.status != WorkflowExecutionStatus.RUNNING:
                return
            await asyncio.sleep(1.0)


def print_report(report: RunbookReport) -> None:
    took = (report.finished_at - report.started_at).total_seconds()
    console.print(
        status_table(
            RunbookStatus(
                runbook=report.runbook, mode=report.mode, state=report.outcome, tasks=report.tasks
            ),
            report.workflow_id,
        )
    )
    speedup = report.sequential_s / took if took > 0 else 0.0
    console.print(
        f"{report.outcome} in {format_duration(took)}; critical path "
        f"{' -> '.join(report.critical_path) or '-'} ({format_duration(report.critical_path_s)}); "
        f"one after another {format_duration(report.sequential_s)} ({speedup:.1f}x)",
        highlight=False,
    )


def _update(workflow_id: str, name: str, arg: Any, as_json: bool) -> None:
    async def body(client: Client, _settings: Settings) -> RunbookStatus:
        handle = client.get_workflow_handle(workflow_id)
        return await handle.execute_update(name, arg, result_type=RunbookStatus)

    status = with_client(body, "runbook")
    if as_json:
        print_json(status)
    else:
        console.print(f"{workflow_id}: {name} accepted; run is {status.state}", highlight=False)


def _dry_run(inp: RunbookRunInput, as_json: bool) -> None:
    plan = plan_data(inp.runbook, inp.mode)
    gpus = gpu_forecasts(inp.runbook, inp.mode)
    if as_json:
        print_json({"plan": plan, "gpu": gpus})
        return
    print_plan(inp.runbook, plan)
    print_gpu_forecasts(gpus)
    console.print("dry run, nothing changed")


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        file: Path = typer.Argument(..., help="The runbook YAML file."),
        params: list[str] = PARAM_OPTION,
        mode: str = MODE_OPTION,
        wait: bool = WAIT_OPTION,
        workflow_id: str | None = typer.Option(None, "--id", help="Workflow id to use."),
        by: str | None = AS_OPTION,
        dry_run: bool = typer.Option(
            False,
            "--dry-run",
            help="Show the plan (and, for training_move tasks, the GPU plan); change nothing.",
        ),
        as_json: bool = JSON_OPTION,
    ) -> None:
        """Lint, then start a runbook run (with --wait, follow it to the end)."""
        inp = prepare(file, parse_params(params), mode, who(by))
        if dry_run:
            _dry_run(inp, as_json)
            return
        region = region_of(inp)
        wid = workflow_id or f"{inp.runbook.name}-{region or uuid.uuid4().hex[:8]}"
        report = with_client(
            lambda c, s: start_and_follow(c, s, inp, wid, wait and not as_json), "runbook"
        )
        if as_json:
            print_json(report if report is not None else {"workflow_id": wid})
        elif report is not None:
            print_report(report)
        else:
            console.print(f"started {wid}  (orchestrator runbook status {wid})", highlight=False)

    @app.command("status")
    def status(
        workflow_id: str = typer.Argument(..., metavar="ID"),
        as_json: bool = JSON_OPTION,
    ) -> None:
        """A running run's per-task state, or a finished run's report."""

        async def body(client: Client, _s: Settings) -> RunbookStatus | RunbookReport:
            answer: RunbookStatus | RunbookReport = await result_or_query(
                client, workflow_id, RunbookReport, "status", RunbookStatus
            )
            return answer

        answer = with_client(body, "runbook")
        if as_json:
            print_json(answer)
        elif isinstance(answer, RunbookReport):
            print_report(answer)
        else:
            console.print(status_table(answer, workflow_id))
            for event in answer.events[-10:]:
                console.print(f"[dim]{event}[/]", highlight=False)

    @app.command("pause")
    def pause(
        workflow_id: str = typer.Argument(..., metavar="ID"),
        by: str | None = AS_OPTION,
        reason: str = typer.Option("", "--reason"),
        as_json: bool = JSON_OPTION,
    ) -> None:
        """Hold every task at its next step boundary."""
        _update(workflow_id, "pause", OperatorInput(by=who(by), reason=reason), as_json)

    @app.command("resume")
    def resume(
        workflow_id: str = typer.Argument(..., metavar="ID"),
        by: str | None = AS_OPTION,
        as_json: bool = JSON_OPTION,
    ) -> None:
        """Let a paused run go on."""
        _update(workflow_id, "resume", OperatorInput(by=who(by)), as_json)

    @app.command("skip")
    def skip(
        workflow_id: str = typer.Argument(..., metavar="ID"),
        task: str = TASK_OPTION,
        by: str | None = AS_OPTION,
        reason: str = typer.Option("", "--reason"),
        as_json: bool = JSON_OPTION,
    ) -> None:
        """Skip a task (pending: never runs; running: stops at its next step)."""
        _update(
            workflow_id, "skip", TaskControlInput(task=task, by=who(by), reason=reason), as_json
        )

    @app.command("override")
    def override(
        workflow_id: str = typer.Argument(..., metavar="ID"),
        task: str = TASK_OPTION,
        by: str | None = AS_OPTION,
        reason: str = typer.Option(..., "--reason", help="Why (recorded with who)."),
        as_json: bool = JSON_OPTION,
    ) -> None:
        """Let a task past its failed condition or gate, once; recorded with who and why."""
        arg = TaskControlInput(task=task, by=who(by), reason=reason)
        _update(workflow_id, "override", arg, as_json)

    @app.command("approve")
    def approve(
        workflow_id: str = typer.Argument(..., metavar="ID"),
        task: str = TASK_OPTION,
        by: str | None = AS_OPTION,
        comment: str = typer.Option("", "--comment"),
        as_json: bool = JSON_OPTION,
    ) -> None:
        """Approve an approval task (the approver must be on its list)."""
        arg = ApproveInput(task=task, by=who(by), comment=comment)
        _update(workflow_id, "approve", arg, as_json)

    @app.command("abort")
    def abort(
        workflow_id: str = typer.Argument(..., metavar="ID"),
        by: str | None = AS_OPTION,
        reason: str = typer.Option("", "--reason"),
        as_json: bool = JSON_OPTION,
    ) -> None:
        """Stop the run and roll back every step taken, in reverse order."""
        _update(workflow_id, "abort_run", OperatorInput(by=who(by), reason=reason), as_json)
