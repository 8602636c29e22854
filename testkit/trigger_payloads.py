"""Alertmanager webhook payloads in the documented format (version 4), and test runbooks."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from orchestrator.runbook.lint import lint_text
from orchestrator.runbook.spec import Runbook

TOKEN = "test-bearer-token-0123456789"
HMAC_SECRET = "test-hmac-secret-0123456789"
#: who may approve the test runbook's ``sign-off`` task
APPROVER = "oncall"


def fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]


def alert(
    status: str = "firing",
    *,
    alertname: str = "RegionErrorRate",
    starts_at: str = "2024-05-01T10:00:00.000Z",
    ends_at: str = "0001-01-01T00:00:00Z",
    **labels: str,
) -> dict[str, Any]:
    full = {"alertname": alertname, "severity": "critical", **labels}
    return {
        "status": status,
        "labels": full,
        "annotations": {"summary": f"{alertname} {labels}"},
        "startsAt": starts_at,
        "endsAt": ends_at,
        "generatorURL": "http://prometheus.local/graph?g0.expr=up",
        "fingerprint": fingerprint(full),
    }


def notification(
    *alerts: dict[str, Any], group_key: str = '{}:{alertname="RegionErrorRate"}'
) -> dict[str, Any]:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    common = dict(alerts[0]["labels"]) if alerts else {}
    for a in alerts[1:]:
        common = {k: v for k, v in common.items() if a["labels"].get(k) == v}
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "orchestrator",
        "groupLabels": {"alertname": common.get("alertname", "")},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.local:9093",
        "alerts": list(alerts),
    }


def runbook(
    name: str,
    *,
    cooldown: str = "0s",
    alertname: str = "RegionErrorRate",
    matchers: str = "['severity=~\"warning|critical\"', 'env!=\"dev\"']",
) -> Runbook:
    """A small drain runbook whose trigger maps the ``region`` label; lints clean.

    Its only task waits for an approval, so a run stays open until approved.
    """
    text = f"""
name: {name}
kind: drain
parameters:
  region: {{type: region}}
  max_pct: {{type: int, default: 50}}
tasks:
  - id: sign-off
    template: approval
    args: {{approvers: [{APPROVER}], timeout: 10m}}
triggers:
  - alertname: {alertname}
    matchers: {matchers}
    parameters: {{region: region, max_pct: max_pct}}
    cooldown: {cooldown}
"""
    findings = lint_text(text, f"{name}.yaml")
    assert not findings, findings
    return Runbook.model_validate(yaml.safe_load(text))
