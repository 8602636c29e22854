"""The fuzz campaign: each boundary's probe and input strategy, and a counting runner.

The fuzz tests draw a few examples per boundary and assert each verdict is clean;
``benchmarks/fuzz.py`` runs :func:`run` with >= 1,000 examples per boundary and
records the counts (and the first unclean inputs, if any) in
``benchmarks/results/chaos.json``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as seeded
from hypothesis import strategies as st
from temporalio import workflow as wf

from orchestrator import registry
from orchestrator.cli import app as cli_app
from testkit.fuzz.probes import (
    SERVING,
    CliProbe,
    RunbookProbe,
    SolverProbe,
    Verdict,
    valid_instances,
    valid_runbooks,
)
from testkit.fuzz.probes_http import VALID_ALERTS, VALID_MANUAL, LabProbe, TriggerProbe
from testkit.fuzz.strategies import JSON, JUNK_BYTES, bodies, cli_args, command_table, mutated

__all__ = [
    "BOUNDARIES",
    "JUNK",
    "TARGETED",
    "Boundary",
    "Tally",
    "input_model",
    "run",
    "sample",
]


# --- input strategies ------------------------------------------------------------------


def runbook_texts() -> st.SearchStrategy[str]:
    docs = valid_runbooks()
    texts = [yaml.safe_dump(d, sort_keys=False) for d in docs]

    @st.composite
    def spliced(draw: st.DrawFn) -> str:
        text = draw(st.sampled_from(texts))
        cut = draw(st.integers(0, len(text)))
        insert = draw(
            st.one_of(
                st.text(max_size=8), st.sampled_from(["\n", ": ", "- ", "{", "'", "&a", "*a", "\t"])
            )
        )
        return text[:cut] + insert + text[cut + draw(st.integers(0, 3)) :]

    def dump(doc: Any) -> str:
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)

    mutated_docs = st.sampled_from(docs).flatmap(mutated).map(dump)
    return st.one_of(mutated_docs, mutated_docs, spliced(), st.text(max_size=200), JSON.map(dump))


@st.composite
def trigger_requests(draw: st.DrawFn) -> tuple[str, str, Any]:
    auth = draw(
        st.sampled_from(
            ["bearer", "bearer", "bearer", "hmac", "none", "wrong_bearer", "wrong_hmac", "garbage"]
        )
    )
    kind = draw(st.sampled_from(["alertmanager", "alertmanager", "manual", "manual_unknown"]))
    if kind == "alertmanager":
        path, valid = "/v1/alerts/alertmanager", VALID_ALERTS
    else:
        name = (
            "drain" if kind == "manual" else quote(draw(st.text(min_size=1, max_size=12)), safe="")
        )
        path, valid = f"/v1/runbooks/{name}/runs", VALID_MANUAL
    body = draw(st.one_of(bodies(*valid), JUNK_BYTES))
    return path, auth, body


KEYS = st.one_of(
    st.just(""),
    st.just(""),
    st.just(""),
    st.none(),
    st.sampled_from([" ", "k" * 201, "\t"]),
)
IF_MATCH = st.one_of(
    st.just(""),
    st.just(""),
    st.none(),
    st.sampled_from(["abc", '"-1"', 'W/"99999"', "0", "1.5", "99999999999999999999999"]),
)


def lab_requests(probe: LabProbe) -> st.SearchStrategy[tuple[Any, ...]]:
    valid = probe.valid_bodies()

    @st.composite
    def requests(draw: st.DrawFn) -> tuple[Any, ...]:
        method, path, body = draw(st.sampled_from(valid))
        body = draw(
            st.one_of(mutated(body), mutated(body), mutated(body), JSON, JUNK_BYTES, st.just(body))
        )
        return method, path, body, draw(KEYS), draw(IF_MATCH)

    return requests()


# --- workflow start inputs (a handful per type; each run costs a real workflow) ---

#: start inputs that fit no workflow's model, plus targeted ones per type
JUNK: list[Any] = [None, "drain", [1, 2], 7.5]
TARGETED: dict[str, list[Any]] = {
    "FleetSnapshotWorkflow": [{"window_s": -1}, {"window_s": "soon"}],
    "TrafficRebalanceWorkflow": [
        {"epoch_s": 0},
        {"epochs_per_run": 0},
        {"constraints": {"damping": 2}},
    ],
    "RunbookWorkflow": [{"runbook": {"name": "x"}, "requested_by": "t"}],
    "LiveLoadTestWorkflow": [{"region": ""}, {"region": "eu-west", "max_steps": -1}],
    "TrainingJobSupervisorWorkflow": [{"job": ""}, {"job": "llm-demo", "poll_s": -1}],
    "TrainingRecoveryWorkflow": [{"job": "llm-demo"}],
    "DrillWorkflow": [{"runbook": []}],
}


def input_model(workflow: str) -> Any:
    """The pydantic model a workflow type's run takes."""
    for cls in registry.workflows():
        defn = wf._Definition.must_from_class(cls)
        if defn.name == workflow:
            assert defn.arg_types
            return defn.arg_types[0]
    raise AssertionError(f"no workflow {workflow}")


# --- the campaign ----------------------------------------------------------------------------


@dataclass
class Boundary:
    name: str
    #: the probe; called with the strategy's tuple
    make_probe: Callable[[], Any]
    inputs: Callable[[Any], st.SearchStrategy[tuple[Any, ...]]]


BOUNDARIES: dict[str, Boundary] = {
    b.name: b
    for b in (
        Boundary("runbook_yaml", RunbookProbe, lambda _p: runbook_texts().map(lambda t: (t,))),
        Boundary("webhook_payloads", TriggerProbe, lambda _p: trigger_requests()),
        Boundary(
            "solver_instances",
            SolverProbe,
            lambda _p: bodies(*valid_instances()).map(lambda d: (d,)),
        ),
        Boundary(
            "cli_arguments",
            CliProbe,
            lambda _p: cli_args(command_table(cli_app, SERVING)).map(lambda a: (a,)),
        ),
        Boundary("fleet_api_bodies", LabProbe, lab_requests),
    )
}


@dataclass
class Tally:
    boundary: str
    counts: Counter[str] = field(default_factory=Counter)
    #: the first few inputs that were not handled cleanly, with the verdict
    examples: list[dict[str, str]] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def inputs(self) -> int:
        return sum(self.counts.values())

    @property
    def bad(self) -> int:
        """Inputs the boundary did not accept: the bad ones (clean or not)."""
        return self.inputs - self.counts["accepted"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "bad_inputs": self.bad,
            "accepted": self.counts["accepted"],
            "rejected_cleanly": self.counts["rejected"],
            "crashes": self.counts["crash"],
            "unclean_errors": self.counts["unclean"],
            "wall_s": round(self.wall_s, 1),
            "first_failures": self.examples,
        }


def run(boundary: Boundary, bad_inputs: int, seed: int = 0) -> Tally:
    """Draw inputs for ``boundary`` until ``bad_inputs`` of them were bad (not accepted),
    counting every verdict; never raises on them. A mutation can leave an input valid,
    so a few more inputs than ``bad_inputs`` are drawn."""
    tally = Tally(boundary.name)
    probe = boundary.make_probe()
    started = time.monotonic()

    def batch(n: int, batch_seed: int) -> None:
        @settings(
            max_examples=n,
            deadline=None,
            database=None,
            phases=[Phase.generate],  # no shrinking: every input is counted once
            suppress_health_check=list(HealthCheck),
        )
        @seeded(batch_seed)
        @given(boundary.inputs(probe))
        def campaign(args: tuple[Any, ...]) -> None:
            verdict: Verdict = probe(*args)
            tally.counts[verdict.kind] += 1
            if not verdict.clean and len(tally.examples) < 5:
                tally.examples.append(
                    {
                        "input": repr(args)[:500],
                        "verdict": f"{verdict.kind}: {verdict.detail}"[:500],
                    }
                )

        campaign()

    try:
        for round_ in range(10):
            missing = bad_inputs - tally.bad
            if missing <= 0:
                break
            batch(missing if round_ == 0 else missing + 10, seed + 1000 * round_)
    finally:
        probe.close()
        tally.wall_s = time.monotonic() - started
    return tally


def sample(strategy: st.SearchStrategy[Any], n: int, seed: int = 0) -> list[Any]:
    """``n`` inputs drawn from ``strategy`` (reproducibly), for the tests that drive a real
    Temporal server, where one hypothesis example per request would be too slow."""
    drawn: list[Any] = []

    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seeded(seed)
    @given(strategy)
    def collect(value: Any) -> None:
        drawn.append(value)

    collect()
    return drawn[:n]
