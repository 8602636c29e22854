"""The fleet the settings describe, its health read from Prometheus when they say so.

With ``ORCHESTRATOR_HEALTH=prometheus`` every health question the orchestrator asks
(runbook gates and pre-conditions, the load test's steps, the rebalancer's epochs)
is answered by PromQL against ``ORCHESTRATOR_PROMETHEUS_URL``, with the queries of
``ORCHESTRATOR_HEALTH_QUERIES`` (default: :data:`LAB_QUERIES`); every other call
goes to the fleet as before. The wrapping lives here, not in
:mod:`orchestrator.fleet`, because the fleet layer sits below this package.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.config import Settings
from orchestrator.fleet.configured import fleet_from_settings as data_plane_from_settings
from orchestrator.fleet.protocol import Fleet
from orchestrator.promhealth.config import PromHealthConfig, load_config
from orchestrator.promhealth.fleet import with_health_source
from orchestrator.promhealth.source import PrometheusHealth

__all__ = ["HAPROXY_LAB_QUERIES", "LAB_QUERIES", "fleet_from_settings", "health_config"]

#: queries for services exporting the lab's counters and histograms
LAB_QUERIES = Path(__file__).with_name("lab-queries.yaml")
#: queries for the lab behind HAProxy: HAProxy's exporter and the region backends' histograms
HAPROXY_LAB_QUERIES = Path(__file__).with_name("haproxy-lab-queries.yaml")


def health_config(settings: Settings) -> PromHealthConfig:
    """The queries file the settings name (or the lab's), at the Prometheus they name."""
    config = load_config(settings.health_queries or LAB_QUERIES)
    if settings.prometheus_url is not None:
        config = config.model_copy(update={"url": settings.prometheus_url})
    return config


def fleet_from_settings(settings: Settings) -> Fleet:
    """The configured fleet; its ``health`` from Prometheus with ``ORCHESTRATOR_HEALTH=prometheus``."""
    if settings.health != "prometheus":
        return data_plane_from_settings(settings)
    # the queries first: a bad file is refused before any connection is opened
    source = PrometheusHealth(health_config(settings))
    return with_health_source(data_plane_from_settings(settings), source)
