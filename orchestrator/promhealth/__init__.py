"""Health from Prometheus: the fleet's health questions answered with configured PromQL."""

from __future__ import annotations

from orchestrator.promhealth.config import MetricQueries, PromHealthConfig, load_config
from orchestrator.promhealth.configured import (
    HAPROXY_LAB_QUERIES,
    LAB_QUERIES,
    fleet_from_settings,
    health_config,
)
from orchestrator.promhealth.fleet import HealthSource, with_health_source
from orchestrator.promhealth.source import PrometheusHealth, Sample

__all__ = [
    "HAPROXY_LAB_QUERIES",
    "LAB_QUERIES",
    "HealthSource",
    "MetricQueries",
    "PrometheusHealth",
    "PromHealthConfig",
    "Sample",
    "fleet_from_settings",
    "health_config",
    "load_config",
    "with_health_source",
]
