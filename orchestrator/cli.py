"""The ``orchestrator`` console command: one entry point, subcommands grouped by capability."""

from __future__ import annotations

import typer

from orchestrator.commands import platform

app = typer.Typer(
    name="orchestrator",
    help="Disaster-recovery and traffic-management orchestrator on Temporal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

platform.register(app)
# Capability groups mount below, one line each.
