"""Top-level platform commands: server, worker, version, snapshot."""

from __future__ import annotations

import asyncio
import json
import platform as _platform
import sys
import uuid
from importlib.metadata import version as dist_version
from pathlib import Path

import typer
from rich.table import Table

from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.config import Settings, load_settings
from orchestrator.exceptions import OrchestratorError
from orchestrator.logging import configure_logging

__all__ = ["register", "settings_or_exit"]


def settings_or_exit() -> Settings:
    """Load settings, or print the one line that names the bad setting and exit 2."""
    try:
        return load_settings()
    except OrchestratorError as exc:
        fail(str(exc), code=2)


def server(
    port: int = typer.Option(7233, help="Temporal frontend (gRPC) port."),
    ui_port: int = typer.Option(8233, help="Temporal UI port."),
    db_file: Path | None = typer.Option(None, help="SQLite file: keep state across restarts."),
    ip: str = typer.Option("127.0.0.1", help="Address to bind."),
    log_file: Path | None = typer.Option(
        None,
        help="The server's own log, appended [default: temporal-server.log in the state dir].",
    ),
) -> None:
    """Run the embedded Temporal dev server (with UI) until Ctrl-C or SIGTERM."""
    from orchestrator.devserver import DevServer
    from orchestrator.processes import interrupt_on_signals
    from orchestrator.temporal import SEARCH_ATTRIBUTES

    if log_file is None:
        log_file = settings_or_exit().state_dir / "temporal-server.log"
    dev = DevServer(port=port, ui_port=ui_port, ip=ip, db_file=db_file, log_file=log_file)
    with interrupt_on_signals():
        try:
            dev.start()
            console.print(
                f"Temporal dev server at [bold]{dev.address}[/], UI at http://{ip}:{ui_port}"
                + (f", state in {db_file}" if db_file else " (in memory)")
                + f", log in {log_file}",
                highlight=False,
            )
            names = ", ".join(key.name for key in SEARCH_ATTRIBUTES)
            console.print(f"Search attributes: {names}. Ctrl-C stops.")
            code = dev.wait()
        except OrchestratorError as exc:
            fail(str(exc), code=2)
        except KeyboardInterrupt:
            console.print("stopping Temporal dev server")
            return
        finally:
            dev.stop()
    fail(f"Temporal dev server exited with code {code}", code=1)


def worker() -> None:
    """Run a worker for every workflow and activity of the project."""
    from orchestrator.worker import run_worker

    settings = settings_or_exit()
    configure_logging(settings.log_level)
    try:
        asyncio.run(run_worker(settings))
    except OrchestratorError as exc:
        fail(str(exc), code=2)


def version(as_json: bool = JSON_OPTION) -> None:
    """Print the versions of this project, Temporal's SDK and Python."""
    info = {
        "orchestrator": dist_version("dr-orchestrator"),
        "temporalio": dist_version("temporalio"),
        "python": _platform.python_version(),
    }
    if as_json:
        sys.stdout.write(json.dumps(info) + "\n")
    else:
        console.print(" ".join(f"{k} {v}" for k, v in info.items()))


def snapshot(
    window_s: float | None = typer.Option(None, help="Health window in seconds."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Summarise the fleet through a FleetSnapshotWorkflow run on the worker."""
    from orchestrator.temporal import connect
    from workflows.fleet_snapshot import FleetSnapshotInput, FleetSnapshotWorkflow

    settings = settings_or_exit()

    async def run() -> object:
        client = await connect(settings)
        return await client.execute_workflow(
            FleetSnapshotWorkflow.run,
            FleetSnapshotInput(window_s=window_s),
            id=f"snapshot-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )

    try:
        result = asyncio.run(run())
    except OrchestratorError as exc:
        fail(str(exc), code=2)
    except Exception as exc:  # a workflow failure: show its cause, not a traceback
        cause = getattr(exc, "cause", None) or exc
        fail(f"snapshot failed: {cause}")
    if as_json:
        print_json(result)
        return
    table = Table("region", "status", "share", "rps", "util", "p99 ms", "errors")
    for r in result.regions:  # type: ignore[attr-defined]
        table.add_row(
            r.region,
            r.status,
            f"{r.traffic_share:.1%}",
            _num(r.rps, "{:.1f}"),
            _num(r.utilization, "{:.1%}"),
            _num(r.p99_ms, "{:.0f}"),
            _num(r.error_rate, "{:.2%}"),
        )
    console.print(table)


def _num(value: float | None, fmt: str) -> str:
    return "missing" if value is None else fmt.format(value)


def register(app: typer.Typer) -> None:
    app.command()(server)
    app.command()(worker)
    app.command()(version)
    app.command()(snapshot)
