"""Which PromQL answers which health number, per scope (region, service, PoP).

Each query is an instant-vector expression aggregated by the scope's labels
(``sum by (region) (...)``); ``$window`` in it is replaced by the window asked
for, as a Prometheus duration (``60s``). Example for a service exporting
``http_requests_total`` and a latency histogram::

    url: http://prometheus:9090
    regions:
      rps: sum by (region) (rate(http_requests_total[$window]))
      error_rate: >-
        sum by (region) (rate(http_requests_total{code=~"5.."}[$window]))
        / sum by (region) (rate(http_requests_total[$window]))
      p99_ms: >-
        1000 * histogram_quantile(0.99,
          sum by (region, le) (rate(http_request_duration_seconds_bucket[$window])))
      samples: sum by (region) (increase(http_requests_total[$window]))

``samples`` is required wherever another number is configured: it is how a
region with no traffic in the window is told apart from one with perfect numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator

from orchestrator.exceptions import ConfigError
from orchestrator.models import StrictModel

__all__ = ["WINDOW", "MetricQueries", "PromHealthConfig", "load_config"]

#: replaced in every query by the window, as a Prometheus duration
WINDOW = "$window"
NUMBERS = ("rps", "utilization", "p50_ms", "p99_ms", "error_rate")


class MetricQueries(StrictModel):
    rps: str | None = None
    utilization: str | None = None
    p50_ms: str | None = None
    p99_ms: str | None = None
    error_rate: str | None = None
    samples: str | None = None

    @field_validator("*")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an empty query; leave the metric out instead")
        return value

    @model_validator(mode="after")
    def _samples_when_numbers(self) -> MetricQueries:
        if self.samples is None and any(getattr(self, n) for n in NUMBERS):
            raise ValueError(
                "samples: required when any other metric is configured (it tells "
                "'no traffic in the window' from 'healthy')"
            )
        return self

    def configured(self) -> dict[str, str]:
        return {name: q for name, q in self.model_dump().items() if q is not None}


class PromHealthConfig(StrictModel):
    url: str
    timeout_s: float = Field(default=5.0, gt=0, le=120)
    bearer_token: SecretStr | None = None
    default_window_s: float = Field(default=60.0, gt=0)
    region_label: str = "region"
    service_label: str = "service"
    pop_label: str = "pop"
    regions: MetricQueries = Field(default_factory=MetricQueries)
    services: MetricQueries = Field(default_factory=MetricQueries)
    pops: MetricQueries = Field(default_factory=MetricQueries)
    #: regions reported (as missing) even when Prometheus has no series for them
    expected_regions: list[str] = Field(default_factory=list)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @classmethod
    def for_lab(cls, url: str, **overrides: Any) -> PromHealthConfig:
        """Queries for the gauges the lab exports (``lab_<scope>_<metric>``, already windowed;
        latencies in seconds, read back in ms)."""

        def scope(name: str) -> MetricQueries:
            return MetricQueries(
                rps=f"lab_{name}_rps",
                utilization=f"lab_{name}_utilization",
                p50_ms=f"1000 * lab_{name}_latency_p50_seconds",
                p99_ms=f"1000 * lab_{name}_latency_p99_seconds",
                error_rate=f"lab_{name}_error_rate",
                samples=f"lab_{name}_samples",
            )

        return cls(
            url=url,
            regions=scope("region"),
            services=scope("service"),
            pops=scope("pop"),
            **overrides,
        )


def load_config(path: Path) -> PromHealthConfig:
    """The config in a YAML file; :class:`ConfigError` names the file and the bad field."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(path), exc.strerror or str(exc)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), f"not YAML: {exc}") from None
    try:
        return PromHealthConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "config"
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{path}: {where}", reason) from None
