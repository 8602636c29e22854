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

The fuzz tests assert every verdict is clean; ``benchmarks/fuzz.py`` counts them.
"""

from __future__ import annotations

import asyncio
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

import httpx
import yaml
from fastapi import FastAPI
from pydantic import ValidationError
from typer.testing import CliRunner

from orchestrator.cli import app as cli_app
from orchestrator.commands.output import error_reason
from orchestrator.exceptions import Infeasible, PolicyError, RunbookError
from orchestrator.lab.server import build_app as build_lab
from orchestrator.policy.taiji import SolverInstance, SolverResult, solve
from orchestrator.runbook import Finding, RunbookInvalid, load_runbook
from orchestrator.triggers.auth import SIGNATURE_HEADER, sign
from tests.fixtures.ports import free_port
from tests.triggers.conftest import MemoryStarter, make_app
from tests.triggers.payloads import HMAC_SECRET, TOKEN, alert, notification, runbook
from tests.workflows.conftest import lab_config

__all__ = [
    "REPO",
    "CliProbe",
    "LabProbe",
    "RunbookProbe",
    "SolverProbe",
    "TriggerProbe",
    "Verdict",
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


# --- HTTP helpers ----------------------------------------------------------------


class AppClient:
    """A FastAPI app over httpx's ASGI transport, called synchronously on its own loop.

    Hypothesis drives plain functions; one loop per probe keeps the app's state
    (and the in-memory starter) alive across examples.
    """

    def __init__(self, app: FastAPI) -> None:
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://fuzz"
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.loop.run_until_complete(self.http.request(method, path, **kwargs))

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()


def _body_bytes(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    # allow_nan: a sender may well write NaN; the server must refuse it cleanly.
    return json.dumps(body, allow_nan=True).encode()


def _names_field(status: int, answer: Any) -> bool:
    """A 422's detail names a field (FastAPI/pydantic ``loc``, or the lab's ``field``)."""
    if not isinstance(answer, dict):
        return False
    detail = answer.get("detail")
    if isinstance(detail, list):
        return bool(detail) and all(
            isinstance(d, dict) and len(d.get("loc", [])) >= 1 and d.get("msg") for d in detail
        )
    if "field" in answer:
        return status != 422 or bool(answer.get("field"))
    return isinstance(detail, str) and bool(detail)


# --- Alertmanager webhook and manual runs ---------------------------------------------

AuthKind = Literal["bearer", "hmac", "none", "wrong_bearer", "wrong_hmac", "garbage"]


def auth_headers(kind: AuthKind, body: bytes) -> dict[str, str]:
    return {
        "bearer": {"Authorization": f"Bearer {TOKEN}"},
        "hmac": {SIGNATURE_HEADER: sign(HMAC_SECRET, body)},
        "none": {},
        "wrong_bearer": {"Authorization": f"Bearer {TOKEN}x"},
        "wrong_hmac": {SIGNATURE_HEADER: sign(HMAC_SECRET, body + b" ")},
        "garbage": {"Authorization": "Bearer", SIGNATURE_HEADER: "sha256=zz"},
    }[kind]


VALID_ALERTS = [
    notification(alert(region="eu-west")),
    notification(alert(region="us-east", max_pct="40"), alert("resolved", region="eu-west")),
]
VALID_MANUAL = [
    {"parameters": {"region": "eu-west", "max_pct": 30}},
    {
        "parameters": {"region": "us-east"},
        "mode": "drill",
        "requested_by": "op",
        "idempotency_key": "k1",
    },
]


class TriggerProbe:
    """The trigger app over the in-memory starter (the trigger tests' pattern).

    Judges: bad auth is 401; a malformed body is 422 naming the field; never a
    5xx; and the starter saw exactly the starts the answer reports.
    """

    def __init__(self) -> None:
        self.starter = MemoryStarter()
        self.client = AppClient(make_app([runbook("drain")], self.starter))

    def close(self) -> None:
        self.client.close()

    def __call__(self, path: str, auth: AuthKind, body: Any) -> Verdict:
        raw = _body_bytes(body)
        before = len(self.starter.started)
        headers = {"Content-Type": "application/json", **auth_headers(auth, raw)}
        try:
            response = self.client.post(path, content=raw, headers=headers)
        except Exception as exc:
            return _crash(exc)
        started = len(self.starter.started) - before
        status = response.status_code
        if status >= 500:
            return Verdict("crash", f"{status} for {path}: {response.text[:200]}")
        if status == 404 and response.json() == {"detail": "Not Found"}:
            # no such route (a name with a slash): routing answers before any handler
            return Verdict("unclean", "404 but a run started") if started else Verdict("rejected")
        if auth not in ("bearer", "hmac"):
            if status != 401 or started:
                return Verdict("unclean", f"unauthenticated got {status}, started {started}")
            return Verdict("rejected")
        try:
            answer = response.json()
        except ValueError:
            return Verdict("unclean", f"{status} answer is not JSON: {response.text[:100]}")
        if status >= 400:
            if started:
                return Verdict("unclean", f"{status} but {started} run(s) started")
            if not _names_field(status, answer):
                return Verdict("unclean", f"{status} names no field: {answer}")
            return Verdict("rejected")
        reported = (
            sum(r["outcome"] == "started" for r in answer["results"])
            if path.endswith("alertmanager")
            else int(answer["started"])
        )
        if reported != started:
            return Verdict("unclean", f"answer reports {reported} starts, starter saw {started}")
        return Verdict("accepted")


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


# --- lab fleet API --------------------------------------------------------------------


class LabProbe:
    """The lab's fleet API (model mode, training included) through its ASGI app.

    Every request carries a fresh Idempotency-Key unless the fuzz takes it away.
    A refused request must leave routing, topology, training and the audit log
    exactly as they were.
    """

    def __init__(self) -> None:
        self.client = AppClient(build_lab(lab_config(), mode="model"))
        self.count = 0
        topology = self.client.get("/v1/topology").json()
        self.regions = [r["name"] for r in topology["regions"]]
        self.shards = [s["id"] for s in topology["shards"]]
        routing = self.client.get("/v1/routing").json()
        self.fractions = routing["fractions"]
        cluster = self.client.get("/v1/training/cluster").json()
        self.cluster = cluster

    def close(self) -> None:
        self.client.close()

    def state(self) -> tuple[Any, ...]:
        """What a mutation can change. The training clock and a running job's step move on
        by themselves, so training is compared by quarantine and each job's runs."""
        get = self.client.get
        cluster = get("/v1/training/cluster").json()
        jobs = [(j["spec"]["name"], j["runs"], j["resumed_from"]) for j in cluster["jobs"]]
        return (
            get("/v1/routing", params={"buckets": True}).text,
            get("/v1/topology").text,
            json.dumps(cluster["quarantine"], sort_keys=True),
            jobs,
            get("/v1/audit").text,
        )

    def valid_bodies(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(method, path, body) for every mutation, each valid against the default lab."""
        region = self.regions[0]
        job = self.cluster["jobs"][0]["spec"]["name"]
        hosts = [h["name"] for h in self.cluster["hosts"] if h["state"] == "idle"][:2]
        return [
            ("PUT", "/v1/routing", {"fractions": self.fractions, "reason": "fuzz"}),
            (
                "POST",
                "/v1/actions/service-weight",
                {"region": region, "service": "web", "weight": 0.5},
            ),
            ("POST", "/v1/actions/shard-move", {"shards": [self.shards[0]], "to_region": region}),
            ("POST", "/v1/actions/batch-job", {"job": "index-build", "action": "start"}),
            ("POST", "/v1/actions/config", {"path": "/svc/web", "content": "x", "expected_rev": 0}),
            ("POST", "/v1/actions/training-stop", {"job": job}),
            (
                "POST",
                "/v1/actions/training-start",
                {"job": job, "hosts": hosts},
            ),
            (
                "POST",
                "/v1/actions/host-quarantine",
                {"host": hosts[0], "reason": "fuzz", "until": "2030-01-01T00:00:00Z"},
            ),
            ("POST", "/v1/actions/host-release", {"host": hosts[0]}),
        ]

    def __call__(
        self, method: str, path: str, body: Any, key: str | None = "", if_match: str | None = ""
    ) -> Verdict:
        self.count += 1
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key or f"fuzz-{os.getpid()}-{self.count}"
        if path == "/v1/routing":
            version = self.client.get("/v1/routing").headers["ETag"]
            if if_match is not None:
                headers["If-Match"] = if_match or version
        before = self.state()
        try:
            response = self.client.request(method, path, content=_body_bytes(body), headers=headers)
        except Exception as exc:
            return _crash(exc)
        status = response.status_code
        if status >= 500:
            return Verdict("crash", f"{status} for {path}: {response.text[:200]}")
        if status < 400:
            return Verdict("accepted")
        if self.state() != before:
            return Verdict("unclean", f"{status} for {path} but the lab state changed")
        try:
            answer = response.json()
        except ValueError:
            return Verdict("unclean", f"{status} answer is not JSON")
        if not _names_field(status, answer) or not one_line(str(answer.get("reason", "x"))):
            return Verdict("unclean", f"{status} for {path} names no field: {answer}")
        return Verdict("rejected")


# --- CLI arguments ----------------------------------------------------------------------

#: commands that, given valid arguments, serve or supervise until stopped: their
#: bad arguments are fuzzed through options that can only be invalid
#: Typer's usage-error panel; the message names the option, argument or value
USAGE = re.compile(
    r"─ Error ─.*\n│ (No such|Missing|Invalid|Got unexpected|Option|Error|Requested)", re.S
)
FINDING = re.compile(r"^.+:\d+: \S+: \S")
SERVING = {("server",), ("worker",), ("lab", "serve"), ("lab", "traffic"), ("triggers", "serve")}


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
