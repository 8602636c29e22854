"""The health source against the real ``prometheus`` binary scraping a small /metrics endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from orchestrator.lab.prometheus import render_metrics
from orchestrator.models import HealthReport, RegionHealth, ServiceHealth
from orchestrator.promhealth import PrometheusHealth, PromHealthConfig
from tests.fixtures.ports import free_port
from tests.triggers.servers import binary_server, serve_app

PROMETHEUS = Path("/usr/bin/prometheus")

REPORT = HealthReport(
    window_s=60,
    observed_at=datetime(2024, 5, 1, tzinfo=UTC),
    regions=[
        RegionHealth(
            region="eu",
            rps=100,
            utilization=0.5,
            p50_ms=20,
            p99_ms=80,
            error_rate=0.01,
            samples=6000,
        ),
        RegionHealth(region="us", samples=0),  # drained: no traffic in the window
    ],
    services=[ServiceHealth(region="eu", service="web", rps=60, p99_ms=90, samples=3600)],
)


def metrics_app() -> FastAPI:
    app = FastAPI()

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> str:
        return render_metrics(REPORT)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


@asynccontextmanager
async def prometheus(tmp: Path, target: str) -> AsyncIterator[str]:
    """A real Prometheus scraping ``target`` every second; yields its base URL."""
    config = tmp / "prometheus.yml"
    config.write_text(
        f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: lab
    static_configs: [{{targets: ["{target}"]}}]
"""
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    async with binary_server(PROMETHEUS, args, f"{base}/-/ready", tmp / "prometheus.log"):
        yield base


@pytest.mark.server  # a real Prometheus
class TestRealPrometheus:
    """Numbers scraped by a real Prometheus come back as the health report; no data stays missing."""

    async def test_health_from_scraped_gauges(self, tmp_path: Path) -> None:
        async with (
            serve_app(metrics_app()) as base,
            prometheus(tmp_path, base.removeprefix("http://")) as prom,
        ):
            async with httpx.AsyncClient(timeout=5) as http:
                for _ in range(150):
                    answer = (
                        await http.get(f"{prom}/api/v1/query", params={"query": "lab_region_rps"})
                    ).json()
                    if answer["data"]["result"]:
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError("prometheus never scraped the endpoint")
            source = PrometheusHealth(PromHealthConfig.for_lab(prom, expected_regions=["ap"]))
            try:
                report = await source.health(60)
            finally:
                await source.aclose()
        eu = report.region("eu")
        assert (eu.rps, eu.utilization, eu.p50_ms, eu.p99_ms, eu.error_rate, eu.samples) == (
            100,
            0.5,
            20,
            80,
            0.01,
            6000,
        )
        assert report.region("us").missing and report.region("us").rps is None
        assert report.region("ap").missing
        [web] = report.services
        assert (web.service, web.rps, web.p99_ms, web.p50_ms, web.samples) == (
            "web",
            60,
            90,
            None,
            3600,
        )
