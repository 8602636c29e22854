"""The shipped rules (deploy/prometheus/) are valid and every alert behaves as its
``promtool test rules`` cases say: fires when it should, stays quiet otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.metrics.promtool import check_rules, test_rules

pytestmark = pytest.mark.server  # runs promtool, a subprocess

DEPLOY = Path(__file__).parents[2] / "deploy" / "prometheus"


def test_rules_are_valid() -> None:
    assert check_rules(DEPLOY / "orchestrator.rules.yml") == ""


def test_rule_cases_pass() -> None:
    assert test_rules([DEPLOY / "orchestrator.rules.test.yml"]) == ""


def test_every_alert_has_a_case() -> None:
    rules = (DEPLOY / "orchestrator.rules.yml").read_text()
    cases = (DEPLOY / "orchestrator.rules.test.yml").read_text()
    alerts = [line.split(":", 1)[1].strip() for line in rules.splitlines() if "- alert:" in line]
    assert len(alerts) == 7
    assert [a for a in alerts if f"alertname: {a}" not in cases] == []
