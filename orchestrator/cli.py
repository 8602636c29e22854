"""The ``orchestrator`` console command: one entry point, subcommands grouped by capability.

Commands are imported when they run (:mod:`orchestrator.commands.lazy`): ``--help`` and a
command that needs no Temporal SDK, scipy or FastAPI do not pay for importing them.
A capability mounts with one line in a table below: the module and the line ``--help``
shows for it.
"""

from __future__ import annotations

import logging
import os
import sys

import typer

from orchestrator.commands.lazy import Lazy, LazyGroup

_C = "orchestrator.commands."

REBALANCE = LazyGroup(
    name="rebalance",
    help="Taiji-style traffic rebalancing: solve routing tables, run the rebalancer.",
    no_args_is_help=True,
    lazy={
        "solve": Lazy(
            _C + "rebalance",
            "app",
            "Solve one rebalancing epoch for an instance file and print the new table.",
        ),
        **{
            name: Lazy(_C + "rebalance_control", "register", text)
            for name, text in {
                "start": "Start the rebalancer (workflow id `rebalancer`); a running one is left "
                "as it is.",
                "stop": "Stop the rebalancer after the epoch in progress.",
                "status": "Current table, utilization, overrides and the last epochs.",
                "pause": "Pause: no table is published until resumed; new overrides are refused.",
                "resume": "Resume publishing; an epoch runs at once.",
            }.items()
        },
    },
)

RUNBOOK = LazyGroup(
    name="runbook",
    help="Lint runbooks, show their plan, and (with a server) run and steer them.",
    no_args_is_help=True,
    lazy={
        "lint": Lazy(
            _C + "runbook",
            "app",
            "Check runbooks; print one line per finding (file:line: task: message).",
        ),
        "plan": Lazy(
            _C + "runbook",
            "app",
            "Show the DAG layers, the critical path and the expected duration.",
        ),
        **{
            name: Lazy(_C + "runbook_control", "register", text)
            for name, text in {
                "run": "Lint, then start a runbook run (with --wait, follow it to the end).",
                "status": "A running run's per-task state, or a finished run's report.",
                "pause": "Hold every task at its next step boundary.",
                "resume": "Let a paused run go on.",
                "skip": "Skip a task (pending: never runs; running: stops at its next step).",
                "override": "Let a task past its failed condition or gate, once; recorded with "
                "who and why.",
                "approve": "Approve an approval task (the approver must be on its list).",
                "abort": "Stop the run and roll back every step taken, in reverse order.",
            }.items()
        },
    },
)


class _Orchestrator(LazyGroup):
    lazy = {
        "server": Lazy(
            _C + "platform",
            "register",
            "Run the embedded Temporal dev server (with UI) until Ctrl-C or SIGTERM.",
        ),
        "worker": Lazy(
            _C + "platform",
            "register",
            "Run a worker for every workflow and activity of the project.",
        ),
        "version": Lazy(
            _C + "platform",
            "register",
            "Print the versions of this project, Temporal's SDK and Python.",
        ),
        "snapshot": Lazy(
            _C + "platform",
            "register",
            "Summarise the fleet through a FleetSnapshotWorkflow run on the worker.",
        ),
        "status": Lazy(
            _C + "status",
            "register",
            "Regions with utilization, rps, p99 and error rate; where the routing sends traffic.",
        ),
        "drain": Lazy(
            _C + "drain",
            "register",
            "Drain REGION with the region-drain runbook (workflow id drain-REGION).",
        ),
        "undrain": Lazy(
            _C + "drain",
            "register",
            "Restore REGION with the region-restore runbook (workflow id undrain-REGION).",
        ),
        "demo": Lazy(
            _C + "demo",
            "register",
            "Run the main scenario: rebalance, load test, drain and restore, training recovery.",
        ),
        "report": Lazy(
            _C + "report",
            "register",
            "Write a self-contained HTML report of one run: header, summary and charts.",
        ),
        "training": Lazy(
            _C + "training", "app", "Training-job checkpoint/restart recovery.", group=True
        ),
        "rebalance": REBALANCE,
        "haproxy": Lazy(
            _C + "haproxy",
            "app",
            "Check and adopt the HAProxy the orchestrator steers.",
            group=True,
        ),
        "lab": Lazy(_C + "lab", "app", "The local lab fleet: a fleet you can hurt.", group=True),
        "triggers": Lazy(
            _C + "triggers",
            "app",
            "Start runbooks from Alertmanager webhooks and API calls.",
            group=True,
        ),
        "runbook": RUNBOOK,
        "loadtest": Lazy(
            _C + "loadtest",
            "app",
            "Live load tests: move traffic onto a region step by step and find its capacity.",
            group=True,
        ),
        "schedule": Lazy(
            _C + "schedule",
            "app",
            "Schedule drain drills and load tests (Temporal Schedules).",
            group=True,
        ),
    }


app = typer.Typer(
    cls=_Orchestrator,
    name="orchestrator",
    help="Disaster-recovery and traffic-management orchestrator on Temporal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    # Typer builds a group only for an app with a callback or several commands; the
    # commands here are all lazy.
    pass


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
    # Looked up, not imported: a command that never needed Temporal never loaded it.
    temporal = sys.modules.get("orchestrator.temporal")
    if temporal is None or not getattr(temporal, "connected_in_this_process", False):
        sys.exit(code)  # type: ignore[arg-type]
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
