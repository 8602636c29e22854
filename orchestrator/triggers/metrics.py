"""What the trigger server counts, exposed on its ``/metrics`` (Prometheus text format).

``orchestrator_alerts_total{outcome,reason,runbook}`` counts every alert of every
notification by what became of it; ``reason`` is a short code, never free text,
so the series stay few:

| outcome | reasons |
|---|---|
| started, signalled | (empty) |
| deduplicated | ``duplicate`` (the episode's run exists, open or closed) |
| ignored | ``cooldown``, ``no_rule``, ``bad_label``, ``no_open_run`` |
| refused | ``oversize`` (labels Temporal could never accept; the answer is 4xx) |
| failed | ``temporal`` (Temporal refused the call; the answer is 503) |

``orchestrator_trigger_requests_refused_total{reason}`` counts requests refused at
the HTTP boundary before any alert was read (``unauthenticated``, ``too_large``,
``slow_client``, ``client_gone``).

Each app has its own registry, so several apps in one process (tests) never clash.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE", "BoundaryReason", "ReasonCode", "TriggerMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

ReasonCode = Literal[
    "",
    "duplicate",
    "cooldown",
    "no_rule",
    "bad_label",
    "no_open_run",
    "oversize",
    "temporal",
]
BoundaryReason = Literal["unauthenticated", "too_large", "slow_client", "client_gone"]


class TriggerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._alerts = Counter(
            "orchestrator_alerts",
            "Alerts received from Alertmanager, by what became of them.",
            ["outcome", "reason", "runbook"],
            registry=self.registry,
        )
        self._refused = Counter(
            "orchestrator_trigger_requests_refused",
            "HTTP requests the trigger server refused before reading any alert.",
            ["reason"],
            registry=self.registry,
        )

    def alert(self, outcome: str, reason: ReasonCode, runbook: str | None) -> None:
        self._alerts.labels(outcome=outcome, reason=reason, runbook=runbook or "").inc()

    def refused(self, reason: BoundaryReason) -> None:
        self._refused.labels(reason=reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
