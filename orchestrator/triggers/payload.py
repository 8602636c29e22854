"""Alertmanager's webhook payload, version 4.

https://prometheus.io/docs/alerting/latest/configuration/#webhook_config. Fields
Alertmanager may add later are ignored rather than refused, so an upgrade of
Alertmanager never turns alerts into 422s; the fields we rely on are required.

:func:`oversize` is the boundary for what reaches Temporal: an alert's labels go
into the run's input and its region into a search attribute (Temporal refuses a
keyword over 2,048 bytes and warns at 512 KB of input), and a refusal from Temporal
would be a 503, which Alertmanager retries forever. So labels, fingerprint, group
key and receiver are held to sizes far inside those limits and far beyond any real
alert's, and an alert past them is refused (4xx) with the field named.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LIMITS", "Alert", "AlertStatus", "AlertmanagerPayload", "oversize"]

AlertStatus = Literal["firing", "resolved"]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class Alert(_Lenient):
    status: AlertStatus
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: datetime = Field(alias="startsAt")
    #: "0001-01-01T00:00:00Z" while the alert has no known end
    ends_at: datetime | None = Field(default=None, alias="endsAt")
    generator_url: str = Field(default="", alias="generatorURL")
    fingerprint: str = Field(min_length=1)

    @property
    def alertname(self) -> str:
        return self.labels.get("alertname", "")


class AlertmanagerPayload(_Lenient):
    version: Literal["4"]
    group_key: str = Field(alias="groupKey", min_length=1)
    truncated_alerts: int = Field(default=0, ge=0, alias="truncatedAlerts")
    status: AlertStatus
    receiver: str
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str = Field(default="", alias="externalURL")
    alerts: list[Alert]


#: bytes (UTF-8) per field, and the number of labels per alert
LIMITS = {
    "label_name": 256,
    "label_value": 1024,
    "labels": 128,
    "fingerprint": 128,
    "groupKey": 8192,
    "receiver": 1024,
}


def oversize(payload: AlertmanagerPayload, index: int, alert: Alert) -> list[dict[str, Any]]:
    """Why ``alert`` (the ``index``-th of ``payload``) is too large to start a run, in
    FastAPI's 422 ``detail`` shape; empty when it fits."""
    errors: list[dict[str, Any]] = []

    def check(loc: list[str | int], text: str, limit: str) -> None:
        size = len(text.encode())
        if size > LIMITS[limit]:
            msg = f"{size} bytes; at most {LIMITS[limit]} are accepted"
            errors.append({"loc": ["body", *loc], "msg": msg, "type": "too_long"})

    check(["groupKey"], payload.group_key, "groupKey")
    check(["receiver"], payload.receiver, "receiver")
    where: list[str | int] = ["alerts", index]
    check([*where, "fingerprint"], alert.fingerprint, "fingerprint")
    if len(alert.labels) > LIMITS["labels"]:
        msg = f"{len(alert.labels)} labels; at most {LIMITS['labels']} are accepted"
        errors.append({"loc": ["body", *where, "labels"], "msg": msg, "type": "too_long"})
    for name, value in alert.labels.items():
        check([*where, "labels", name[:64]], name, "label_name")
        check([*where, "labels", name[:64]], value, "label_value")
    return errors
