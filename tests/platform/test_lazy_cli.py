"""The CLI imports a command's module only to run it (or show its own help)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.main
from typer.core import TyperCommand, TyperGroup

from orchestrator.cli import REBALANCE, RUNBOOK, app
from orchestrator.commands.lazy import Lazy, LazyGroup, all_commands

#: what a command's start-up must not pay for unless it needs it
HEAVY = ("temporalio", "scipy", "fastapi", "locust", "matplotlib", "uvicorn", "workflows")


def _loaded_after(*args: str) -> list[str]:
    """The HEAVY modules a fresh interpreter has imported after ``orchestrator ARGS``."""
    code = (
        "import json, sys\n"
        "from orchestrator.cli import app\n"
        "try:\n"
        f"    app({list(args)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def _groups() -> dict[str, LazyGroup]:
    top = typer.main.get_command(app)
    assert isinstance(top, LazyGroup)
    return {"orchestrator": top, "rebalance": REBALANCE, "runbook": RUNBOOK}


class TestListedHelp:
    """The line a group's --help shows for a command it has not imported is the command's
    own, and every listed command loads."""

    @pytest.mark.parametrize("group", ["orchestrator", "rebalance", "runbook"])
    def test_listed_line_is_the_commands_own(self, group: str) -> None:
        lazy = _groups()[group]
        wrong = {}
        for name, entry in lazy.lazy.items():
            if not isinstance(entry, Lazy):
                continue
            listed = TyperCommand(name, help=entry.help).get_short_help_str(10_000)
            own = entry.load(name).get_short_help_str(10_000)
            if listed != own:
                wrong[name] = (listed, own)
        assert wrong == {}

    def test_every_command_loads(self) -> None:
        top = typer.main.get_command(app)
        assert isinstance(top, TyperGroup)
        commands = all_commands(top)
        assert {"server", "rebalance", "runbook", "loadtest", "report"} <= set(commands)
        assert set(all_commands(REBALANCE)) == {
            "solve",
            "start",
            "stop",
            "status",
            "pause",
            "resume",
        }


@pytest.mark.server  # a fresh interpreter: only a subprocess shows what an import pulls in
class TestStartUpImportsLittle:
    """`orchestrator --help` imports none of Temporal's SDK, scipy, FastAPI, Locust,
    matplotlib, uvicorn or the workflows; and neither do `rebalance solve --help` and
    `runbook lint --help` (the solver imports scipy when it solves)."""

    def test_help(self) -> None:
        assert _loaded_after("--help") == []

    def test_group_help(self) -> None:
        assert _loaded_after("rebalance", "--help") == []

    def test_solve_and_lint_need_no_temporal(self) -> None:
        assert _loaded_after("rebalance", "solve", "--help") == []
        assert _loaded_after("runbook", "lint", "--help") == []
