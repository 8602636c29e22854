"""Load on the trigger server's webhook: bursts of Alertmanager notifications, mostly duplicates.

Run it through ``python benchmarks/triggers.py``, or by hand::

    WEBHOOK_TOKEN=... locust -f loadtests/webhook.py --headless -u 20 -r 20 -t 60s \\
        --host http://127.0.0.1:9095

Environment:

- ``WEBHOOK_TOKEN``: the server's bearer token;
- ``WEBHOOK_RPS``: notifications per second across all Locust users (default 200);
- ``WEBHOOK_USERS``: how many Locust users share that rate (default 20);
- ``WEBHOOK_GROUPS``: distinct alert groups (default 20); every notification is one
  of them, in turn, so each is sent ``requests / groups`` times and all but the
  first of each must be deduplicated;
- ``WEBHOOK_ALERTNAME``: the alertname (default ``RegionErrorRate``; a name no
  runbook triggers on measures the server without Temporal calls);
- ``WEBHOOK_RUN``: a tag put in group keys so repeated runs do not collide.

Any non-2xx answer is a Locust failure named by its status, so 5xx are counted.
It runs in its own process: gevent monkey-patches the interpreter.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from datetime import UTC, datetime
from typing import Any

from locust import constant_throughput, task
from locust.contrib.fasthttp import FastHttpUser

_TOKEN = os.environ.get("WEBHOOK_TOKEN", "")
_RPS = float(os.environ.get("WEBHOOK_RPS", "200"))
_USERS = max(int(os.environ.get("WEBHOOK_USERS", "20")), 1)
_GROUPS = max(int(os.environ.get("WEBHOOK_GROUPS", "20")), 1)
_ALERTNAME = os.environ.get("WEBHOOK_ALERTNAME", "RegionErrorRate")
_RUN = os.environ.get("WEBHOOK_RUN", "load")
#: shared by every user of this process (gevent greenlets), so groups go round-robin
_counter = itertools.count()
_STARTS_AT = datetime.now(UTC).isoformat()


def notification(group: int) -> dict[str, Any]:
    """Alertmanager's version-4 body for group ``group``: one alert in region ``r<group>``."""
    labels = {"alertname": _ALERTNAME, "severity": "critical", "region": f"r{group}"}
    fingerprint = hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{_ALERTNAME}", region="r{group}", run="{_RUN}"}}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "orchestrator",
        "groupLabels": {"alertname": _ALERTNAME, "region": f"r{group}"},
        "commonLabels": labels,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.local:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": {"summary": "error rate above 5%"},
                "startsAt": _STARTS_AT,
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.local/graph",
                "fingerprint": fingerprint,
            }
        ],
    }


class AlertmanagerSender(FastHttpUser):
    wait_time = constant_throughput(_RPS / _USERS)

    @task
    def notify(self) -> None:
        body = json.dumps(notification(next(_counter) % _GROUPS))
        with self.client.post(
            "/v1/alerts/alertmanager",
            data=body,
            headers={"Authorization": f"Bearer {_TOKEN}", "Content-Type": "application/json"},
            name="alertmanager",
            catch_response=True,
        ) as response:
            if not 200 <= response.status_code < 300:
                response.failure(f"status {response.status_code}")
