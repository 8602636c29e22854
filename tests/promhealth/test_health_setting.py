"""``ORCHESTRATOR_HEALTH=prometheus`` turns Prometheus on as the health source by settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import load_settings
from orchestrator.exceptions import ConfigError
from orchestrator.fleet.http import HttpFleet
from orchestrator.promhealth import LAB_QUERIES, fleet_from_settings, health_config, load_config

BASE = {"HOME": "/nonexistent", "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml"}
PROM = "http://prometheus.example:9090"


def env(**extra: str) -> dict[str, str]:
    return {**BASE, **extra}


class TestHealthSetting:
    """The fleet answers health itself unless the settings name a Prometheus to ask."""

    def test_default_is_the_fleets_own_health(self) -> None:
        settings = load_settings(env())
        assert settings.health == "fleet"
        assert isinstance(fleet_from_settings(settings), HttpFleet)

    def test_prometheus_without_a_url_is_refused_by_name(self) -> None:
        with pytest.raises(ConfigError) as raised:
            load_settings(env(ORCHESTRATOR_HEALTH="prometheus"))
        assert raised.value.setting == "ORCHESTRATOR_PROMETHEUS_URL"
        assert "ORCHESTRATOR_HEALTH=prometheus" in raised.value.reason

    @pytest.mark.parametrize(
        ("var", "value"),
        [("ORCHESTRATOR_HEALTH", "graphite"), ("ORCHESTRATOR_PROMETHEUS_URL", "prom:9090")],
    )
    def test_a_bad_value_names_its_setting(self, var: str, value: str) -> None:
        with pytest.raises(ConfigError) as raised:
            load_settings({**env(ORCHESTRATOR_HEALTH="prometheus"), var: value})
        assert raised.value.setting == var

    def test_the_url_setting_overrides_the_queries_file(self) -> None:
        settings = load_settings(
            env(ORCHESTRATOR_HEALTH="prometheus", ORCHESTRATOR_PROMETHEUS_URL=PROM)
        )
        config = health_config(settings)
        assert config.url == PROM
        assert config.regions == load_config(LAB_QUERIES).regions
        # gates read utilization and per-service numbers, so the default queries answer them
        assert config.regions.utilization and config.services.p99_ms

    def test_a_queries_file_of_ones_own(self, tmp_path: Path) -> None:
        queries = tmp_path / "queries.yaml"
        queries.write_text(f"url: {PROM}\nregions:\n  rps: sum by (region) (rate(x[$window]))\n")
        with pytest.raises(ConfigError) as raised:
            fleet_from_settings(
                load_settings(
                    env(ORCHESTRATOR_HEALTH="prometheus", ORCHESTRATOR_HEALTH_QUERIES=str(queries))
                )
            )
        assert raised.value.setting == f"{queries}: regions"
        assert "samples" in raised.value.reason
