"""The ``orchestrator`` console command: one entry point, subcommands grouped by capability."""

from __future__ import annotations

import logging
import os
import sys

import typer

from orchestrator import temporal
from orchestrator.commands import (
    demo,
    drain,
    lab,
    loadtest,
    platform,
    rebalance,
    rebalance_control,
    report,
    runbook,
    runbook_control,
    schedule,
    status,
    training,
    triggers,
)

app = typer.Typer(
    name="orchestrator",
    help="Disaster-recovery and traffic-management orchestrator on Temporal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

platform.register(app)
# Capability groups mount below, one line each.
app.add_typer(training.app, name="training")
app.add_typer(rebalance.app, name="rebalance")
rebalance_control.register(rebalance.app)
app.add_typer(lab.app, name="lab")
status.register(app)
app.add_typer(triggers.app, name="triggers")
app.add_typer(runbook.app, name="runbook")
runbook_control.register(runbook.app)
drain.register(app)
app.add_typer(loadtest.app, name="loadtest")
app.add_typer(schedule.app, name="schedule")
demo.register(app)
report.register(app)


def main() -> None:
    """The ``orchestrator`` console script: the Typer app, then a teardown that cannot abort.

    A short-lived command that talked to Temporal could end with SIGABRT (exit -6, seen in
    CI) after its work was done: the SDK's Rust threads outlive the interpreter's teardown
    (temporalio/sdk-python#300). Such a process flushes its output and logs and leaves with
    ``os._exit``, skipping only that teardown; one that never connected exits normally.
    """
    try:
        app()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if not temporal.connected_in_this_process:
        sys.exit(code)  # type: ignore[arg-type]
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
