"""A real Prometheus scraping the live lab gives, through rate(), increase() and
histogram_quantile() over the lab's counters and histograms, the lab's own health read.

Tolerances (stated, not tuned): error rate within 0.01 absolute (a ratio of two
increases: the extrapolation cancels); p99 in the histogram bucket holding the lab's exact
p99 or a neighbour (histogram_quantile interpolates inside a bucket, and near an edge a
sample or two moves the rank across it: testkit.histograms); request count within 10%
(increase() extrapolates up to half a scrape interval at the end).

Both reads cover every request: the window reaches back past Prometheus's scrape of the
zeroed counters, and the lab keeps samples long enough. With a fixed 60 s window, traffic
slowed by a loaded machine ran longer than it, and the lab's window (read first) and
Prometheus's (read after the last scrape) each dropped a different share of the early
requests: p99 609 against 431 ms in one CI run. The Prometheus queries are evaluated at
the moment the window was measured from: evaluated when they arrived, a loaded machine
delayed them past the window's 10 s of slack, the window started after the first requests,
and PromQL counted 1,075 of a region's 1,082 requests (p99 407 against 353 ms, in CI).
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from orchestrator.lab.config import load_config as load_lab_config
from orchestrator.models import HealthReport
from orchestrator.promhealth import LAB_QUERIES, PrometheusHealth, load_config
from orchestrator.waiting import wait_until_async
from testkit.histograms import quantile_range_ms
from tests.fixtures.lab import LabFactory
from tests.triggers.servers import prometheus

pytestmark = pytest.mark.server  # a real Prometheus and a live lab

QUERIES = LAB_QUERIES
#: enough that each region's tail is dense: with ~200 successes a region's p99 sat between
#: its 2nd and 3rd slowest requests, which lay buckets apart, and histogram_quantile (rank
#: 0.99 n, in the bucket of the 2nd) and np.percentile (between the two) differed by 194 ms
REQUESTS = 3000
#: samples the lab keeps: more than the traffic and the scrapes take on a loaded machine
RETENTION_S = 600.0


async def scraped_total(http: httpx.AsyncClient, prom: str) -> float:
    answer = (
        await http.get(f"{prom}/api/v1/query", params={"query": "sum(lab_pop_requests_total)"})
    ).json()
    result = answer["data"]["result"]
    return float(result[0]["value"][1]) if result else -1.0


async def scraped(http: httpx.AsyncClient, prom: str, total: int) -> None:
    async def done() -> bool:
        return await scraped_total(http, prom) == total

    assert await wait_until_async(done, timeout_s=60), f"Prometheus never scraped {total}"


async def test_promql_agrees_with_lab_health(start_lab: LabFactory, tmp_path: Path) -> None:
    config = load_lab_config(None)
    metrics = config.metrics.model_copy(update={"retention_s": RETENTION_S})
    lab = await start_lab(config.model_copy(update={"metrics": metrics}), mode="live", faults=True)
    async with (
        lab.http() as http,
        prometheus(tmp_path, lab.url.removeprefix("http://")) as prom,
        httpx.AsyncClient(timeout=5) as promhttp,
    ):
        # counters exported at zero are scraped before the first request
        await scraped(promhttp, prom, 0)
        zero_scraped = time.monotonic()
        regions = [r["region"] for r in (await http.get("/v1/health")).json()["regions"]]
        faults = {"error_rate": dict.fromkeys(regions, 0.1)}
        assert (await http.post("/lab/faults", json=faults)).status_code == 200
        sem = asyncio.Semaphore(20)

        async def one(i: int) -> None:
            async with sem:
                await http.get("/edge/nyc", params={"user": f"u-{i}"})

        await asyncio.gather(*(one(i) for i in range(REQUESTS)))
        await scraped(promhttp, prom, REQUESTS)
        # back past the zero scrape, with room for the two reads' few seconds apart
        window_s = math.ceil(time.monotonic() - zero_scraped) + 10
        window_end = datetime.now(UTC)
        assert window_s < RETENTION_S, f"traffic took {window_s} s"
        lab_report = HealthReport.model_validate(
            (await http.get("/v1/health", params={"window_s": window_s})).json()
        )
        queries = load_config(QUERIES).model_copy(update={"url": prom})
        source = PrometheusHealth(queries)
        try:
            prom_report = await source.health(window_s, at=window_end)
        finally:
            await source.aclose()
    served = [r for r in lab_report.regions if r.samples]
    assert sum(r.samples or 0 for r in served) == REQUESTS  # the lab's read saw every request
    for lab_region in served:
        from_prom = prom_report.region(lab_region.region)
        assert lab_region.error_rate is not None and lab_region.p99_ms is not None
        assert from_prom.error_rate is not None and from_prom.p99_ms is not None
        assert abs(from_prom.error_rate - lab_region.error_rate) <= 0.01
        low, high = quantile_range_ms(lab_region.p99_ms)
        assert low <= from_prom.p99_ms <= high
        assert from_prom.samples is not None
        assert abs(from_prom.samples - lab_region.samples) <= 0.1 * lab_region.samples
    [nyc] = [p for p in prom_report.pops if p.pop == "nyc"]
    assert nyc.samples is not None and abs(nyc.samples - REQUESTS) <= 0.1 * REQUESTS
