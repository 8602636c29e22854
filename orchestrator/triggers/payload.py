"""Alertmanager's webhook payload, version 4.

https://prometheus.io/docs/alerting/latest/configuration/#webhook_config. Fields
Alertmanager may add later are ignored rather than refused, so an upgrade of
Alertmanager never turns alerts into 422s; the fields we rely on are required.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Alert", "AlertStatus", "AlertmanagerPayload"]

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
