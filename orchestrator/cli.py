"""The ``orchestrator`` console command: one entry point, subcommands grouped by capability."""

from __future__ import annotations

import typer

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
