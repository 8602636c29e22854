"""The HAProxy lab's rules (orchestrator/lab/haproxy/haproxy-lab.rules.yml, package data the
lab's prometheus.yml loads) are valid, pass their ``promtool test rules`` cases, have a case
for every alert, and record exactly the region health queries of haproxy-lab-queries.yaml at
a 1m window."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from orchestrator.lab.haproxy.config import RULES
from orchestrator.promhealth import HAPROXY_LAB_QUERIES
from tests.metrics.promtool import check_rules, test_rules

CASES = Path(__file__).parents[2] / "deploy" / "prometheus" / "haproxy-lab.rules.test.yml"


def rules() -> list[dict[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def flat(expr: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\(\s+", "(", expr)).strip()


@pytest.mark.server  # runs promtool, a subprocess
def test_rules_are_valid() -> None:
    assert check_rules(RULES) == ""


@pytest.mark.server
def test_rule_cases_pass() -> None:
    assert test_rules([CASES]) == ""


def test_every_rule_and_alert_has_a_case() -> None:
    cases = yaml.safe_load(CASES.read_text())["tests"]
    tested = {t["alertname"] for case in cases for t in case.get("alert_rule_test", [])}
    tested |= {t["expr"] for case in cases for t in case.get("promql_expr_test", [])}
    names = [rule.get("alert") or rule["record"] for rule in rules()]
    assert len(names) == 5
    assert [n for n in names if n not in tested] == []
    # the alert is shown both firing and quiet
    alert_cases = [t for case in cases for t in case.get("alert_rule_test", [])]
    assert any(t["exp_alerts"] for t in alert_cases)
    assert any(not t["exp_alerts"] for t in alert_cases)


def test_recordings_are_the_health_queries_at_1m() -> None:
    """Same PromQL as the queries the orchestrator's gates read: a ratio of rates is their
    ratio of increases, a p99 in seconds their p99_ms / 1000."""
    queries = yaml.safe_load(HAPROXY_LAB_QUERIES.read_text())["regions"]
    recorded = {rule["record"]: flat(rule["expr"]) for rule in rules() if "record" in rule}

    def at_1m(expr: str) -> str:
        return flat(expr.replace("$window", "1m"))

    assert recorded["region:haproxy_server_requests:rate1m"] == at_1m(queries["rps"])
    assert recorded["region:haproxy_server_errors:ratio_rate1m"] == at_1m(
        queries["error_rate"].replace("increase(", "rate(")
    )
    assert recorded["region:lab_region_request_duration_seconds:p99_1m"] == at_1m(
        queries["p99_ms"].removeprefix("1000 * ")
    )
