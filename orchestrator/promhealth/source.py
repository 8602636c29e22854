"""A health source that reads Prometheus' HTTP API (``/api/v1/query``) with httpx.

Missing data stays missing: an entity with no series for a metric gets ``None``
for it, an entity whose ``samples`` series is absent or zero gets no numbers at
all (``samples=0``), and Prometheus' ``NaN``/``±Inf`` (e.g. a rate ratio over no
traffic) count as no data, never as zero.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel

from orchestrator.exceptions import ConfigError, FleetUnauthorized, FleetUnavailable
from orchestrator.logging import get_logger, register_secret
from orchestrator.models import HealthReport, PopHealth, RegionHealth, ServiceHealth
from orchestrator.promhealth.config import WINDOW, MetricQueries, PromHealthConfig

__all__ = ["PrometheusHealth", "Sample", "prometheus_duration"]

log = get_logger(__name__)

Key = tuple[str, ...]


class Sample(BaseModel):
    labels: dict[str, str]
    #: None for NaN and infinities: no usable number
    value: float | None


def prometheus_duration(seconds: float) -> str:
    """``60s``, or ``1500ms`` when not a whole second (PromQL durations have no decimals)."""
    if seconds <= 0:
        raise ValueError("a window must be positive")
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{max(1, round(seconds * 1000))}ms"


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def parse_result(data: Any, where: str) -> list[Sample]:
    """Samples from the ``data`` of a query answer (vector or scalar)."""
    if not isinstance(data, dict):
        raise FleetUnavailable(f"prometheus: {where}: answer has no data")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        return [Sample(labels={}, value=_number(result[1]))]
    if kind != "vector" or not isinstance(result, list):
        raise ConfigError(where, f"must be an instant vector, Prometheus returned {kind!r}")
    samples = []
    for series in result:
        metric, value = series.get("metric", {}), series.get("value")
        if not isinstance(value, list) or len(value) != 2:
            raise FleetUnavailable(f"prometheus: {where}: a series has no value")
        samples.append(
            Sample(labels={str(k): str(v) for k, v in metric.items()}, value=_number(value[1]))
        )
    return samples


class PrometheusHealth:
    """``health(window_s)`` like a :class:`~orchestrator.fleet.protocol.Fleet`, from Prometheus."""

    def __init__(
        self,
        config: PromHealthConfig,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        headers = {}
        if config.bearer_token is not None:
            token = config.bearer_token.get_secret_value()
            register_secret(token)
            headers["Authorization"] = f"Bearer {token}"
        self._owns_client = client is None
        self._http = client or httpx.AsyncClient(timeout=config.timeout_s)
        self._headers = headers
        self._clock = clock

    async def aclose(self) -> None:
        if self._owns_client:
            await self._http.aclose()

    async def query(
        self, promql: str, *, where: str = "query", at: datetime | None = None
    ) -> list[Sample]:
        """Evaluate one instant query, at ``at`` (default: Prometheus's now); errors name
        ``where`` (the config field)."""
        url = f"{self.config.url}/api/v1/query"
        form = {"query": promql}
        if at is not None:
            form["time"] = f"{at.timestamp():.3f}"
        try:
            response = await self._http.post(url, data=form, headers=self._headers)
        except httpx.HTTPError as exc:
            raise FleetUnavailable(f"prometheus at {self.config.url}: {exc!s}") from None
        if response.status_code in (401, 403):
            raise FleetUnauthorized(
                f"prometheus refused the credentials ({response.status_code})",
                status=response.status_code,
            )
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        if response.status_code in (400, 422):
            # bad_data (a PromQL syntax error) or execution (e.g. many-to-many matching):
            # the configured query is wrong, and retrying will not fix it.
            reason = f"{body.get('errorType', 'error')}: {body.get('error', response.text[:200])}"
            raise ConfigError(where, f"Prometheus refused {promql!r}: {reason}")
        if response.status_code >= 300:
            raise FleetUnavailable(
                f"prometheus answered {response.status_code}", status=response.status_code
            )
        return parse_result(body.get("data"), where)

    async def _scope(
        self,
        scope: str,
        queries: MetricQueries,
        labels: Sequence[str],
        window: str,
        at: datetime | None,
    ) -> dict[Key, dict[str, float | None]]:
        configured = queries.configured()
        names = list(configured)
        answers = await asyncio.gather(
            *(
                self.query(configured[n].replace(WINDOW, window), where=f"{scope}.{n}", at=at)
                for n in names
            )
        )
        values: dict[Key, dict[str, float | None]] = {}
        for name, samples in zip(names, answers, strict=True):
            for sample in samples:
                if any(label not in sample.labels for label in labels):
                    log.warning(
                        "series without scope labels ignored",
                        query=f"{scope}.{name}",
                        labels=sample.labels,
                    )
                    continue
                key = tuple(sample.labels[label] for label in labels)
                entry = values.setdefault(key, {})
                if name in entry:
                    shown = ", ".join(f"{lb}={v}" for lb, v in zip(labels, key, strict=True))
                    raise ConfigError(
                        f"{scope}.{name}",
                        f"returns more than one series for {shown}; aggregate it with "
                        f"sum/max by ({', '.join(labels)})",
                    )
                entry[name] = sample.value
        return values

    @staticmethod
    def _metrics(values: dict[str, float | None]) -> dict[str, Any]:
        samples = values.get("samples")
        if samples is None or samples <= 0:
            return {"samples": 0}
        numbers = {k: v for k, v in values.items() if k != "samples"}
        # increase() extrapolates, so a window with traffic can read 0.4 requests.
        return {**numbers, "samples": max(1, round(samples))}

    async def health(
        self, window_s: float | None = None, *, at: datetime | None = None
    ) -> HealthReport:
        """The health over the ``window_s`` before now, or before ``at``: every query is
        then evaluated at that one instant, so that the windows of a report's numbers are
        exactly the same (an incident's health read again afterwards, or a test that needs
        its window to start before a known moment, whatever the queries' delay)."""
        config = self.config
        window_s = window_s or config.default_window_s
        window = prometheus_duration(window_s)
        observed_at = at or self._clock()
        regions, services, pops = await asyncio.gather(
            self._scope("regions", config.regions, [config.region_label], window, at),
            self._scope(
                "services",
                config.services,
                [config.region_label, config.service_label],
                window,
                at,
            ),
            self._scope("pops", config.pops, [config.pop_label], window, at),
        )
        for region in config.expected_regions:
            regions.setdefault((region,), {})
        return HealthReport(
            window_s=window_s,
            observed_at=observed_at,
            regions=[
                RegionHealth(region=k[0], **self._metrics(v)) for k, v in sorted(regions.items())
            ],
            services=[
                ServiceHealth(region=k[0], service=k[1], **self._metrics(v))
                for k, v in sorted(services.items())
            ],
            pops=[PopHealth(pop=k[0], **self._metrics(v)) for k, v in sorted(pops.items())],
        )
