"""Bad input at every boundary gets a clean answer: no crash, a named error, nothing changed.

Each test draws a few inputs (``FUZZ_EXAMPLES``, small in CI) from the campaign's
strategy for one boundary; ``benchmarks/fuzz.py`` draws >= 1,000 of the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testkit.fuzz.campaign import BOUNDARIES
from testkit.fuzz.strategies import CI


@pytest.fixture(scope="module")
def probes() -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    yield made
    for probe in made.values():
        probe.close()


def check(probes: dict[str, Any], name: str, data: st.DataObject) -> None:
    boundary = BOUNDARIES[name]
    if name not in probes:
        probes[name] = boundary.make_probe()
    probe = probes[name]
    args = data.draw(boundary.inputs(probe), label=name)
    verdict = probe(*args)
    assert verdict.clean, f"{verdict.kind}: {verdict.detail}"


class TestRunbookYaml:
    """Mutated runbooks and junk YAML give lint findings with a line, or load; never a traceback."""

    @CI
    @given(st.data())
    def test_bad_runbooks_give_findings(self, probes: dict[str, Any], data: st.DataObject) -> None:
        check(probes, "runbook_yaml", data)


class TestWebhookPayloads:
    """Bad auth is 401, a malformed body is 422 naming the field, never a 5xx, nothing started."""

    @CI
    @given(st.data())
    def test_bad_requests_are_refused(self, probes: dict[str, Any], data: st.DataObject) -> None:
        check(probes, "webhook_payloads", data)


class TestSolverInstances:
    """An invalid instance is a named validation error or an infeasibility; a table is valid."""

    @CI
    @given(st.data())
    def test_bad_instances_are_refused(self, probes: dict[str, Any], data: st.DataObject) -> None:
        check(probes, "solver_instances", data)


class TestCliArguments:
    """Bad arguments exit non-zero with a usage error or one ``error:`` line, no traceback."""

    @CI
    @given(st.data())
    def test_bad_arguments_fail_in_one_line(
        self, probes: dict[str, Any], data: st.DataObject
    ) -> None:
        check(probes, "cli_arguments", data)


class TestFleetApiBodies:
    """A malformed fleet-API body is a 4xx naming the field and leaves the lab unchanged."""

    @CI
    @given(st.data())
    def test_bad_bodies_change_nothing(self, probes: dict[str, Any], data: st.DataObject) -> None:
        check(probes, "fleet_api_bodies", data)
