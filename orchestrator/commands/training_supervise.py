"""``orchestrator training supervise JOB`` and ``orchestrator training status JOB``."""

from __future__ import annotations

import typer
from rich.table import Table
from temporalio.client import Client

from orchestrator.clients.training import start_supervisor, supervisor_status
from orchestrator.commands.known import check_known
from orchestrator.commands.output import JSON_OPTION, console, print_json
from orchestrator.commands.temporal_call import with_client
from orchestrator.config import Settings
from orchestrator.contracts.training_supervisor import (
    FailureRecord,
    SupervisorInput,
    SupervisorStatus,
    supervisor_id,
)

__all__ = ["register"]


def supervise(
    job: str = typer.Argument(..., help="The training job to supervise."),
    hang_after_s: float = typer.Option(1.5, help="Heartbeat silence that means hung, seconds."),
    poll_s: float = typer.Option(0.2, help="How often the watcher reads the fleet, seconds."),
    crash_loop_limit: int = typer.Option(
        3,
        min=1,
        help="Recoveries without progress before halting (at high failure rates size it: "
        "docs/deploying.md).",
    ),
    max_failed_resumes: int = typer.Option(
        2, min=1, help="Resumes from one checkpoint without progress before an older one."
    ),
    checkpoint_write_s: float = typer.Option(
        0.0, help="The trainer's blocking write per checkpoint, seconds (taken out of ETTR)."
    ),
    checkpoint_interval_s: float | None = typer.Option(
        None, help="Compute between two checkpoints, seconds (needed with the write)."
    ),
) -> None:
    """Start the job's supervisor (workflow id `training-<job>`); a running one is kept."""

    async def body(client: Client, settings: Settings) -> str:
        await check_known(settings, jobs=[job])
        options = SupervisorInput(
            job=job,
            hang_after_s=hang_after_s,
            poll_s=poll_s,
            crash_loop_limit=crash_loop_limit,
            max_failed_resumes=max_failed_resumes,
            checkpoint_write_s=checkpoint_write_s,
            checkpoint_interval_s=checkpoint_interval_s,
        )
        handle = await start_supervisor(
            client, job, task_queue=settings.task_queue, options=options
        )
        return handle.id

    workflow_id = with_client(body, what="supervisor")
    console.print(f"supervising {job}: workflow {workflow_id}")


def _fmt(value: float | int | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def status(
    job: str = typer.Argument(..., help="The supervised training job."),
    json_output: bool = JSON_OPTION,
) -> None:
    """State, failures with MTTD / MTTR / lost steps, and ETTR so far."""

    async def body(client: Client, _settings: Settings) -> SupervisorStatus:
        return await supervisor_status(client, job)

    result = with_client(body, what=supervisor_id(job))
    if json_output:
        print_json(result.model_dump(mode="json"))
        return
    total = f"/{result.total_steps}" if result.total_steps else ""
    console.print(
        f"{job}: {result.state.value}, step {result.step}{total}, "
        f"ETTR {_fmt(result.ettr, '.3f')}, {result.totals.failures} failures"
    )
    if result.dropped:
        console.print(f"{result.dropped} older records folded into the totals; newest listed")
    if result.alert:
        console.print(f"[bold red]alert:[/] {result.alert}")
    table = Table("#", "kind", "MTTD s", "MTTR s", "lost steps", "resumed from", "hosts after")
    for f in result.failures:
        table.add_row(
            str(f.number),
            f.kind.value,
            _fmt(f.mttd_s),
            _fmt(f.mttr_s),
            _fmt(f.lost_steps, "d"),
            _fmt(f.resumed_from_step, "d"),
            _hosts(f),
        )
    console.print(table)


def _hosts(f: FailureRecord) -> str:
    """The hosts after, or for a record carried across continue-as-new, the change."""
    if not f.hosts_compacted:
        return ",".join(f.hosts_after)
    return " ".join([*(f"+{h}" for h in f.hosts_in), *(f"-{h}" for h in f.hosts_out)])


def register(app: typer.Typer) -> None:
    app.command("supervise")(supervise)
    app.command("status")(status)
