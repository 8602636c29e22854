"""``orchestrator runbook ...``: check runbooks and show their plan.

``lint`` and ``plan`` need no server. Commands that drive a run (run, status,
pause, resume, skip, override, approve, abort) register on the same ``app``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.exceptions import OrchestratorError
from orchestrator.policy.drain.maelstrom import dag_of, simulate, topological_layers
from orchestrator.runbook import lint_files, load_runbook
from orchestrator.runbook.spec import Runbook, RunMode
from orchestrator.runbook.types import format_duration

app = typer.Typer(
    name="runbook",
    help="Lint runbooks, show their plan, and (with a server) run and steer them.",
    no_args_is_help=True,
)

PARAM_OPTION = typer.Option(
    [], "--param", "-p", help="A runbook parameter as NAME=VALUE; repeat for more."
)


def parse_params(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs as a dict; a pair without ``=`` is a one-line error."""
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            fail(f"--param {pair!r}: expected NAME=VALUE")
        values[name.strip()] = value
    return values


@app.command("lint")
def lint_command(
    files: list[Path] = typer.Argument(..., help="Runbook YAML files to check."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Check runbooks; print one line per finding (file:line: task: message).

    Exits 0 when every file is clean, 1 when any finding is reported.
    """
    findings = lint_files(list(files))
    if as_json:
        print_json({"files": [str(f) for f in files], "findings": findings})
    else:
        for finding in findings:
            typer.echo(finding.format())
        if not findings:
            noun = "runbook" if len(files) == 1 else "runbooks"
            console.print(f"[green]ok[/]: {len(files)} {noun}, no findings", highlight=False)
    if findings:
        raise typer.Exit(1)


@app.command("plan")
def plan_command(
    file: Path = typer.Argument(..., help="The runbook YAML file."),
    params: list[str] = PARAM_OPTION,
    mode: str = typer.Option("real", "--mode", help="drill or real: which `when:` tasks run."),
    parallelism: int | None = typer.Option(
        None, "--parallelism", min=1, help="Bound on concurrent tasks (default: unbounded)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show the DAG layers, the critical path and the expected duration. Changes nothing."""
    if mode not in ("drill", "real"):
        fail(f"--mode {mode!r}: use drill or real")
    try:
        runbook = load_runbook(file, parse_params(params))
        plan = plan_data(runbook, "drill" if mode == "drill" else "real", parallelism)
    except OrchestratorError as exc:
        fail(str(exc))
    if as_json:
        print_json(plan)
    else:
        print_plan(runbook, plan)


def plan_data(runbook: Runbook, mode: RunMode, parallelism: int | None = None) -> dict[str, Any]:
    """The plan: DAG layers, start times, expected durations and the critical path."""
    run_mode = runbook.mode_for(mode)
    dag = dag_of(runbook, run_mode)
    schedule = simulate(dag, parallelism)
    return {
        "runbook": runbook.name,
        "mode": run_mode,
        "layers": topological_layers(dag),
        "skipped": [t.id for t in runbook.tasks if not t.active_in(run_mode)],
        "critical_path": schedule.critical_path,
        "makespan_s": schedule.makespan_s,
        "sequential_s": schedule.sequential_s,
        "speedup": schedule.speedup,
        "start_s": schedule.start_s,
        "expected_s": {t.id: t.duration_s for t in dag.tasks},
    }


def print_plan(runbook: Runbook, plan: dict[str, Any]) -> None:
    table = Table(title=f"{runbook.name} ({plan['mode']})")
    for column in ("layer", "task", "template", "after", "starts at", "expected"):
        table.add_column(column)
    path = plan["critical_path"]
    critical = set(path.tasks)
    for depth, layer in enumerate(plan["layers"]):
        for task_id in layer:
            task = runbook.task(task_id)
            name = f"[bold]{task_id}[/] *" if task_id in critical else task_id
            if task_id in plan["skipped"]:
                name = f"[dim]{task_id} (skipped: when {task.when})[/]"
            after = [*task.depends_on, *(f"~{d}" for d in task.weak_depends_on)]
            table.add_row(
                str(depth),
                name,
                task.template,
                ", ".join(after),
                format_duration(plan["start_s"][task_id]),
                format_duration(plan["expected_s"][task_id]),
            )
    console.print(table)
    console.print(
        f"critical path (*): {' -> '.join(path.tasks)}; "
        f"expected {format_duration(plan['makespan_s'])} "
        f"vs {format_duration(plan['sequential_s'])} one after another "
        f"({plan['speedup']:.1f}x); ~ marks a weak dependency",
        highlight=False,
    )
