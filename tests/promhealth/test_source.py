"""The Prometheus health source against a stand-in of Prometheus' /api/v1/query."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.exceptions import ConfigError, FleetUnavailable
from orchestrator.promhealth import MetricQueries, PrometheusHealth, PromHealthConfig, load_config
from orchestrator.promhealth.source import prometheus_duration

NOW = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)


def vector(*series: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [{"metric": m, "value": [1714557600.0, v]} for m, v in series],
        },
    }


def stand_in(
    answers: dict[str, Any], seen: list[str], times: list[str | None] | None = None
) -> FastAPI:
    """Answers each PromQL text from ``answers``; unknown text is a bad_data 400, like Prometheus.
    Each query's evaluation time (None: not given) goes to ``times``."""
    app = FastAPI()

    @app.post("/api/v1/query")
    async def query(request: Request) -> JSONResponse:
        # Parsed by hand: FastAPI's Form() needs python-multipart, which the project lacks.
        form = parse_qs((await request.body()).decode())
        query = form["query"][0]
        seen.append(query)
        if times is not None:
            times.append(form.get("time", [None])[0])
        if query in answers:
            answer = answers[query]
            status = answer.pop("_status", 200) if isinstance(answer, dict) else 200
            return JSONResponse(answer, status_code=status)
        return JSONResponse(
            {"status": "error", "errorType": "bad_data", "error": "parse error"}, status_code=400
        )

    return app


def source(
    config: PromHealthConfig,
    answers: dict[str, Any],
    seen: list[str],
    times: list[str | None] | None = None,
) -> PrometheusHealth:
    app = stand_in(answers, seen, times)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    return PrometheusHealth(config, client=client, clock=lambda: NOW)


REGION_QUERIES = MetricQueries(
    rps="sum by (region) (rate(req_total[$window]))",
    error_rate="sum by (region) (rate(req_total{code=~'5..'}[$window])) / sum by (region) (rate(req_total[$window]))",
    samples="sum by (region) (increase(req_total[$window]))",
)


def config(**kw: Any) -> PromHealthConfig:
    return PromHealthConfig(url="http://prom.test", regions=REGION_QUERIES, **kw)


def answers_for(window: str, **per_query: Any) -> dict[str, Any]:
    names = REGION_QUERIES.configured()
    return {names[k].replace("$window", window): v for k, v in per_query.items()}


class TestHealth:
    """Each configured query fills its metric; missing series stay missing, never zero."""

    async def test_values_by_region_with_the_window_substituted(self) -> None:
        seen: list[str] = []
        answers = answers_for(
            "30s",
            rps=vector(({"region": "eu"}, "120.5"), ({"region": "us"}, "80")),
            error_rate=vector(({"region": "eu"}, "0.02"), ({"region": "us"}, "0")),
            samples=vector(({"region": "eu"}, "3615"), ({"region": "us"}, "2400")),
        )
        report = await source(config(), answers, seen).health(30)
        assert all("[30s]" in q for q in seen) and len(seen) == 3
        assert report.window_s == 30 and report.observed_at == NOW
        eu, us = report.region("eu"), report.region("us")
        assert (eu.rps, eu.error_rate, eu.samples) == (120.5, 0.02, 3615)
        assert (us.rps, us.error_rate, us.samples) == (80, 0.0, 2400)

    async def test_at_evaluates_every_query_at_that_instant(self) -> None:
        at = datetime(2024, 5, 1, 9, 30, 15, 250000, tzinfo=UTC)
        answers = answers_for(
            "30s", rps=vector(), error_rate=vector(), samples=vector(({"region": "eu"}, "60"))
        )
        times: list[str | None] = []
        report = await source(config(), answers, [], times).health(30, at=at)
        assert times == [f"{at.timestamp():.3f}"] * 3
        assert report.observed_at == at and report.region("eu").samples == 60

    async def test_without_at_prometheus_picks_the_time(self) -> None:
        times: list[str | None] = []
        answers = answers_for("30s", rps=vector(), error_rate=vector(), samples=vector())
        report = await source(config(), answers, [], times).health(30)
        assert times == [None] * 3 and report.observed_at == NOW

    async def test_absent_series_is_none_and_no_samples_is_missing(self) -> None:
        answers = answers_for(
            "60s",
            rps=vector(({"region": "eu"}, "10"), ({"region": "ap"}, "3")),
            error_rate=vector(),  # nobody has errors series
            samples=vector(({"region": "eu"}, "600")),  # ap has no samples series
        )
        report = await source(config(expected_regions=["us"]), answers, []).health()
        eu, ap, us = report.region("eu"), report.region("ap"), report.region("us")
        assert eu.rps == 10 and eu.error_rate is None and not eu.missing
        assert ap.missing and ap.rps is None
        assert us.missing and us.rps is None and us.error_rate is None
        assert sorted(r.region for r in report.regions) == ["ap", "eu", "us"]

    async def test_nan_and_inf_are_no_data(self) -> None:
        answers = answers_for(
            "60s",
            rps=vector(({"region": "eu"}, "0")),
            error_rate=vector(({"region": "eu"}, "NaN")),  # 0/0 over an idle window
            samples=vector(({"region": "eu"}, "+Inf")),
        )
        eu = (await source(config(), answers, []).health()).region("eu")
        assert eu.missing and eu.error_rate is None

    async def test_services_are_keyed_by_region_and_service(self) -> None:
        services = MetricQueries(p99_ms="svc_p99", samples="svc_n")
        answers = {
            "svc_p99": vector(({"region": "eu", "service": "web"}, "120")),
            "svc_n": vector(({"region": "eu", "service": "web"}, "50")),
        }
        cfg = PromHealthConfig(url="http://prom.test", services=services)
        report = await source(cfg, answers, []).health()
        [web] = report.services
        assert (web.region, web.service, web.p99_ms, web.samples) == ("eu", "web", 120, 50)


class TestErrors:
    """A wrong query names its config field; an unreachable Prometheus is retryable."""

    async def test_bad_promql_names_the_field(self) -> None:
        answers = answers_for("60s", rps=vector(), samples=vector())  # error_rate unknown -> 400
        with pytest.raises(ConfigError, match=r"regions\.error_rate.*bad_data"):
            await source(config(), answers, []).health()

    async def test_unaggregated_query_names_the_field(self) -> None:
        answers = answers_for(
            "60s",
            rps=vector(({"region": "eu", "pod": "a"}, "1"), ({"region": "eu", "pod": "b"}, "2")),
            error_rate=vector(),
            samples=vector(),
        )
        with pytest.raises(ConfigError, match=r"regions\.rps.*sum/max by \(region\)"):
            await source(config(), answers, []).health()

    async def test_matrix_result_is_a_config_error(self) -> None:
        matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
        answers = answers_for("60s", rps=matrix, error_rate=vector(), samples=vector())
        with pytest.raises(ConfigError, match="instant vector"):
            await source(config(), answers, []).health()

    async def test_unreachable_and_5xx_are_fleet_unavailable(self) -> None:
        unreachable = PrometheusHealth(
            PromHealthConfig(url="http://127.0.0.1:9", regions=REGION_QUERIES)
        )
        with pytest.raises(FleetUnavailable):
            await unreachable.health()
        await unreachable.aclose()
        overloaded = {"status": "error", "errorType": "timeout", "error": "x", "_status": 503}
        answers = answers_for("60s", rps=overloaded, error_rate=vector(), samples=vector())
        with pytest.raises(FleetUnavailable):
            await source(config(), answers, []).health()


class TestConfig:
    """The config refuses queries it cannot answer honestly and names the field."""

    def test_samples_required_with_numbers(self) -> None:
        with pytest.raises(ValueError, match="samples"):
            MetricQueries(rps="x")

    def test_load_names_file_and_field(self, tmp_path: Path) -> None:
        path = tmp_path / "prom.yaml"
        path.write_text("url: prom:9090\n")
        with pytest.raises(ConfigError, match="url"):
            load_config(path)
        path.write_text("url: http://prom:9090\nregions: {rps: a, samples: b}\n")
        assert load_config(path).regions.rps == "a"

    def test_durations(self) -> None:
        assert prometheus_duration(60) == "60s"
        assert prometheus_duration(1.5) == "1500ms"
        with pytest.raises(ValueError):
            prometheus_duration(0)
