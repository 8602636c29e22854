"""One probe per input boundary: feed it one input, get a :class:`Verdict`.

A probe runs the real boundary code in-process (the parser and lint, the
FastAPI apps through httpx's ASGI transport, the solver, the Typer app through
CliRunner) and judges the answer:

- ``accepted``: the input was valid after all (a mutation can leave it valid);
- ``rejected``: refused cleanly: a 4xx naming the field, a one-line error, a
  lint finding with a line, and nothing changed;
- ``unclean``: refused, but badly: no field named, a multi-line message, a
  change half-applied, a run started from a refused request;
- ``crash``: an exception escaped, a 5xx, a traceback was printed.

The HTTP probes (trigger app, lab) are in ``probes_http``. The fuzz tests assert every
verdict is clean; ``benchmarks/fuzz.py`` counts them.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from orchestrator.cli import app as cli_app
from orchestrator.commands.output import error_reason
from orchestrator.exceptions import Infeasible, PolicyError, RunbookError
from orchestrator.policy.rebalance.taiji import SolverInstance, SolverResult, solve
from orchestrator.ports import free_port
from orchestrator.runbook import Finding, RunbookInvalid, load_runbook

__all__ = [
    "REPO",
    "SERVING",
    "SOLVER_EXAMPLE",
    "CliProbe",
    "RunbookProbe",
    "SolverProbe",
    "Verdict",
    "one_line",
    "valid_instances",
    "valid_runbooks",
]

REPO = Path(__file__).resolve().parents[2]
Kind = Literal["accepted", "rejected", "unclean", "crash"]


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    detail: str = ""

    @property
    def clean(self) -> bool:
        return self.kind in ("accepted", "rejected")


def _crash(exc: BaseException) -> Verdict:
    last = traceback.format_exception(exc)[-1].strip()
    return Verdict("crash", f"{type(exc).__name__}: {last}")


def one_line(text: str) -> bool:
    return bool(text.strip()) and "\n" not in text.strip()


# --- runbook YAML --------------------------------------------------------------


class RunbookProbe:
    """``load_runbook`` (lint, then load) and ``orchestrator runbook lint`` on one text.

    The text is written next to copies of the shipped runbooks, so the cross-file
    checks (a drain's restore runbook, nested runbooks) run too.
    """

    def __init__(self, cli_every: int = 5) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="fuzz-runbooks-"))
        for shipped in (REPO / "runbooks").glob("*.yaml"):
            shutil.copy(shipped, self._dir / shipped.name)
        self.path = self._dir / "fuzzed.yaml"
        self.runner = CliRunner()
        self.count = 0
        self.cli_every = cli_every

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def __call__(self, text: str) -> Verdict:
        self.path.write_text(text, encoding="utf-8", errors="surrogatepass")
        self.count += 1
        try:
            load_runbook(self.path)
            findings: list[Finding] = []
        except RunbookInvalid as exc:
            if not one_line(str(exc)) or str(self.path) not in str(exc):
                return Verdict("unclean", f"load error not one line naming the file: {exc}")
            findings = exc.findings
        except RunbookError as exc:
            return Verdict("unclean", f"RunbookError without findings: {exc}")
        except Exception as exc:
            return _crash(exc)
        for finding in findings:
            if finding.line < 1 or not one_line(finding.format()):
                return Verdict("unclean", f"finding without a line or on many: {finding!r}")
        if self.count % self.cli_every == 0:
            # YAML parsing dominates; the CLI (which lints again) is checked on a share.
            result = self.runner.invoke(cli_app, ["runbook", "lint", str(self.path)])
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                return _crash(result.exception)
            if "Traceback" in result.output:
                return Verdict("crash", "traceback printed by runbook lint")
            if result.exit_code != (1 if findings else 0):
                return Verdict("unclean", f"lint exit {result.exit_code}, {len(findings)} findings")
        return Verdict("rejected" if findings else "accepted")


def valid_runbooks() -> list[dict[str, Any]]:
    """The shipped runbooks as documents: the seeds the mutations start from."""
    return [yaml.safe_load(p.read_text()) for p in sorted((REPO / "runbooks").glob("*.yaml"))]


# --- solver instances ---------------------------------------------------------------------

SOLVER_EXAMPLE = REPO / "examples" / "rebalance" / "small.json"


def _table_problem(instance: SolverInstance, result: SolverResult) -> str | None:
    """Why ``result`` is not a valid routing table for ``instance``, or None."""
    regions = set(instance.region_names())
    for pop in instance.pops:
        split = result.fractions.get(pop.name)
        if split is None:
            return f"no split for PoP {pop.name}"
        if set(split) - regions:
            return f"{pop.name} routes to unknown regions {sorted(set(split) - regions)}"
        if any(not math.isfinite(v) or v < -1e-9 for v in split.values()):
            return f"{pop.name} has a negative or non-finite share: {split}"
        if abs(sum(split.values()) - 1.0) > 1e-6:
            return f"{pop.name} shares sum to {sum(split.values())}"
    return None


class SolverProbe:
    """``SolverInstance`` validation, ``solve`` and ``orchestrator rebalance solve --input``."""

    def __init__(self, cli_every: int = 3) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="fuzz-solver-"))
        self.path = self._dir / "instance.json"
        self.runner = CliRunner()
        self.count = 0
        self.cli_every = cli_every

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def __call__(self, data: Any) -> Verdict:
        verdict = self._library(data)
        self.count += 1
        if self.count % self.cli_every != 0 or not verdict.clean:
            # the CLI solves again; it is checked on a share of the inputs
            return verdict
        self.path.write_text(json.dumps(data, allow_nan=True))
        result = self.runner.invoke(
            cli_app, ["rebalance", "solve", "--input", str(self.path), "--json"]
        )
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            return _crash(result.exception)
        if "Traceback" in result.output:
            return Verdict("crash", "traceback printed by rebalance solve")
        if verdict.kind == "accepted":
            if result.exit_code != 0:
                return Verdict("unclean", f"solve exited {result.exit_code}: {result.stderr}")
            return verdict
        if result.exit_code == 0 or not one_line(result.stderr):
            return Verdict("unclean", f"exit {result.exit_code}, stderr {result.stderr!r}")
        return verdict

    def _library(self, data: Any) -> Verdict:
        try:
            instance = SolverInstance.model_validate(data)
        except ValidationError as exc:
            message = error_reason(exc)
            named = bool(exc.errors()[0]["loc"]) or ": " in message
            return Verdict("rejected" if named and one_line(message) else "unclean", message)
        except Exception as exc:
            return _crash(exc)
        try:
            result = solve(instance)
        except Infeasible as exc:
            ok = bool(exc.constraint) and one_line(str(exc))
            return Verdict("rejected" if ok else "unclean", str(exc))
        except PolicyError as exc:
            return Verdict("rejected" if one_line(str(exc)) else "unclean", str(exc))
        except Exception as exc:
            return _crash(exc)
        problem = _table_problem(instance, result)
        return Verdict("unclean", problem) if problem else Verdict("accepted")


def valid_instances() -> list[dict[str, Any]]:
    return [json.loads(SOLVER_EXAMPLE.read_text())]


# --- CLI arguments ----------------------------------------------------------------------

#: Typer's usage-error panel; the message names the option, argument or value
USAGE = re.compile(
    r"─ Error ─.*\n│ (No such|Missing|Invalid|Got unexpected|Option|Error|Requested)", re.S
)
FINDING = re.compile(r"^.+:\d+: \S+: \S")
#: commands that, given valid arguments, serve, supervise or start servers until stopped (the
#: demo starts a Temporal server, a lab and a worker on fixed ports and runs every scenario):
#: never drawn, as a valid draw would run them in-process
SERVING = {
    ("server",),
    ("worker",),
    ("demo",),
    ("lab", "serve"),
    ("lab", "traffic"),
    ("triggers", "serve"),
}


class CliProbe:
    """The Typer app in-process, pointed at a Temporal and a fleet that are not there.

    A bad argument must end in a usage error (exit 2) or one ``error:`` line
    (non-zero exit); an argument that turns out valid gets as far as the
    unreachable server and must report that in one line too.
    """

    def __init__(self) -> None:
        closed = free_port()  # nothing listens: connects fail at once
        self.env = {
            "TEMPORAL_ADDRESS": f"127.0.0.1:{closed}",
            "ORCHESTRATOR_FLEET_URL": f"http://127.0.0.1:{closed}",
            "ORCHESTRATOR_CONFIG": os.devnull,
            "COLUMNS": "200",
        }
        self.runner = CliRunner()

    def close(self) -> None:
        pass

    def __call__(self, args: list[str]) -> Verdict:
        with _cwd(REPO):
            try:
                result = self.runner.invoke(cli_app, args, env=self.env)
            except Exception as exc:
                return _crash(exc)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            return _crash(result.exception)
        if "Traceback" in result.output:
            return Verdict("crash", f"traceback printed for {args}")
        if result.exit_code == 0:
            return Verdict("accepted")
        err = result.stderr.strip()
        if result.exit_code == 2 and (USAGE.search(err) or "Usage:" in err):
            return Verdict("rejected")  # Typer's usage error: names the option or argument
        if not err and args[:2] == ["runbook", "lint"] and result.stdout.strip():
            # lint findings go to stdout: one per line, or a JSON document with --json
            lines = result.stdout.strip().splitlines()
            if all(FINDING.match(line) for line in lines) or _json_findings(result.stdout):
                return Verdict("rejected")
        if not err.startswith("error:") or not one_line(err):
            return Verdict("unclean", f"exit {result.exit_code} for {args}: {err[:300]!r}")
        return Verdict("rejected")


def _json_findings(text: str) -> bool:
    try:
        document = json.loads(text)
    except ValueError:
        return False
    return isinstance(document, dict) and bool(document.get("findings"))


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)
