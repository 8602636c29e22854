"""A real Prometheus scraping the HAProxy lab (HAProxy's exporter and the region backends)
gives, through haproxy-lab-queries.yaml, the lab's own health read (``GET /v1/health``:
HAProxy's ``show stat`` counters and the backends' latency).

p2 sends its users to a region of one slot and one queue place, so HAProxy itself refuses
many of them (503, never reaching a backend): the error rates compared, per region, PoP and
front service pool, include HAProxy's own.
Tolerances as in tests/metrics/test_agreement.py (stated, not tuned): error rate within 0.01
absolute, request counts within 10% (``increase()`` extrapolates), p99 in the histogram
bucket holding the lab's p99 or a neighbour, for regions with at least DENSE successes (with
fewer, the lab's p99 interpolates between the two slowest requests, which may lie buckets
apart). The one-slot region's PromQL p99 must show the wait in HAProxy's queue instead.
The same Prometheus evaluates the lab's recording rules (haproxy-lab.rules.yml): the recorded
region rps and error ratio agree, within the same tolerances (measured: equal), with the
health queries at the rules' 1m window evaluated at the recording's own timestamp.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import yaml

from orchestrator.lab.haproxy.config import RULES
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.models import HealthReport
from orchestrator.promhealth import HAPROXY_LAB_QUERIES, PrometheusHealth, load_config
from orchestrator.waiting import wait_until_async
from testkit.histograms import quantile_range_ms
from tests.lab.haproxy.serving import fleet_api
from tests.lab.haproxy.test_data_plane import lab_config
from tests.triggers.servers import prometheus

pytestmark = pytest.mark.server  # HAProxy, its backends and a real Prometheus

REQUESTS = 2400
#: one in this many requests comes from p2 (all to the one-slot region)
P2_EVERY = 6
TINY_MS = 300
DENSE = 500
#: longer than the whole test even on a loaded machine (2,400 requests took over 60 s at a
#: load of 9 on 2 cores), so both reads count every request
WINDOW_S = 300.0
#: How long Prometheus samples the counters (from their zeros) before the read. increase()
#: extrapolates a counter past its last sample by up to 1.1 scrape intervals (1 s) and, from
#: a zero sample, not before its first: over a 12 s span (2,400 requests, quiet machine)
#: that read 10.7% high; over 40 s, at most 2.75%.
SAMPLED_S = 40.0
#: two scrape intervals of the test's Prometheus
SETTLED_S = 2.0


async def scalar(http: httpx.AsyncClient, prom: str, query: str) -> float:
    answer = (await http.get(f"{prom}/api/v1/query", params={"query": query})).json()
    result = answer["data"]["result"]
    return float(result[0]["value"][1]) if result else -1.0


async def scraped(http: httpx.AsyncClient, prom: str, query: str, value: float) -> None:
    async def done() -> bool:
        return await scalar(http, prom, query) == value

    assert await wait_until_async(done, timeout_s=60), f"Prometheus never saw {query} == {value}"


async def by_region(
    http: httpx.AsyncClient, prom: str, query: str, at: float | None = None
) -> dict[str, float]:
    """region -> value of ``query``'s answer (at time ``at``, else now)."""
    params: dict[str, str | float] = {"query": query} | ({"time": at} if at is not None else {})
    answer = (await http.get(f"{prom}/api/v1/query", params=params)).json()
    return {r["metric"]["region"]: float(r["value"][1]) for r in answer["data"]["result"]}


async def recordings_agree(http: httpx.AsyncClient, prom: str) -> None:
    """The recorded rps and error ratio per region agree with the health queries at 1m
    evaluated at the recording's own time (``timestamp()`` of a recorded sample is its rule's
    evaluation time). Called once every count is scraped; a recording SETTLED_S later saw
    them all (a rule may run before a scrape's samples land, stamped with its start)."""
    queries = yaml.safe_load(HAPROXY_LAB_QUERIES.read_text())["regions"]
    after = time.time() + SETTLED_S
    for record, query, tolerance in (
        ("region:haproxy_server_requests:rate1m", "rps", 0.1),
        ("region:haproxy_server_errors:ratio_rate1m", "error_rate", 0.01),
    ):
        stamp = f"timestamp({record})"

        async def settled(stamp: str = stamp) -> bool:
            stamps = await by_region(http, prom, stamp)
            return bool(stamps) and min(stamps.values()) >= after

        assert await wait_until_async(settled, timeout_s=30), f"{record} never recorded"
        # one evaluation's values and time: the latest before a moment every evaluation
        # up to which has landed (one takes milliseconds)
        before = time.time() - 0.5
        recorded = await by_region(http, prom, record, before)
        assert set(recorded) == {"east", "west", "tiny"}, (record, recorded)
        [at] = set((await by_region(http, prom, stamp, before)).values())
        health = await by_region(http, prom, queries[query].replace("$window", "1m"), at)
        for region, ours in recorded.items():
            theirs = health[region]
            bound = tolerance * theirs if query == "rps" else tolerance
            assert abs(ours - theirs) <= bound, (record, region, ours, theirs)


FRONTEND = 'sum(haproxy_frontend_http_requests_total{proxy!="stats"})'
BACKENDS = "sum(lab_region_requests_total)"


async def send(plane: HAProxyDataPlane) -> dict[str, int]:
    """REQUESTS through the PoPs, 20 at a time; PoP -> how many HAProxy refused itself
    (its answer is not JSON: it never reached a backend)."""
    sem = asyncio.Semaphore(20)
    refused = dict.fromkeys(("p1", "p2"), 0)
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(i: int) -> None:
            pop = "p2" if i % P2_EVERY == 0 else "p1"
            async with sem:
                answer = await client.get(
                    f"{plane.pop_url(pop)}/edge/{pop}", params={"user": f"u-{i}"}
                )
            if not answer.headers.get("content-type", "").startswith("application/json"):
                refused[pop] += 1

        await asyncio.gather(*(one(i) for i in range(REQUESTS)))
    return refused


async def test_promql_agrees_with_the_haproxy_labs_health(tmp_path: Path) -> None:
    config = lab_config(tiny_ms=TINY_MS)
    config = config.model_copy(
        update={"metrics": config.metrics.model_copy(update={"retention_s": WINDOW_S})}
    )
    with HAProxyDataPlane(config, tmp_path / "lab") as plane, fleet_api(plane) as lab:
        targets = [t for group in plane.layout.scrape_targets().values() for t in group]
        async with (
            prometheus(tmp_path, targets, rules=RULES.read_text()) as prom,
            httpx.AsyncClient(base_url=lab, timeout=10) as http,
            httpx.AsyncClient(timeout=5) as promhttp,
        ):
            # every counter scraped at zero before the first request, so increase() sees it all
            await scraped(promhttp, prom, FRONTEND, 0)
            await scraped(promhttp, prom, BACKENDS, 0)
            zeros_at = time.monotonic()
            refused = await send(plane)
            lab_report = HealthReport.model_validate(
                (await http.get("/v1/health", params={"window_s": WINDOW_S})).json()
            )
            await scraped(promhttp, prom, FRONTEND, REQUESTS)
            await scraped(promhttp, prom, BACKENDS, REQUESTS - sum(refused.values()))
            await recordings_agree(promhttp, prom)
            await asyncio.sleep(max(0.0, SAMPLED_S - (time.monotonic() - zeros_at)))
            source = PrometheusHealth(
                load_config(HAPROXY_LAB_QUERIES).model_copy(update={"url": prom})
            )
            try:
                prom_report = await source.health(WINDOW_S)
            finally:
                await source.aclose()
    assert refused["p2"] > 0  # HAProxy refused some of the one-slot region's requests
    served = [r for r in lab_report.regions if r.samples]
    assert {r.region for r in served} == {"east", "west", "tiny"}
    for ours in served:
        theirs = prom_report.region(ours.region)
        assert ours.error_rate is not None and theirs.error_rate is not None, ours.region
        assert abs(theirs.error_rate - ours.error_rate) <= 0.01, (ours, theirs)
        assert theirs.samples is not None
        assert abs(theirs.samples - ours.samples) <= 0.1 * ours.samples, (ours, theirs)
        assert ours.p99_ms is not None and theirs.p99_ms is not None
        successes = ours.samples * (1 - ours.error_rate)
        if successes >= DENSE:
            low, high = quantile_range_ms(ours.p99_ms)
            assert low <= theirs.p99_ms <= high, (ours, theirs)
    # per pool: web's counts are its HAProxy server's (refusals included), cache's the backend's
    pools = [s for s in lab_report.services if s.samples]
    assert {(s.region, s.service) for s in pools} >= {("tiny", "web"), ("east", "cache")}
    for our_pool in pools:
        [their_pool] = [
            s
            for s in prom_report.services
            if (s.region, s.service) == (our_pool.region, our_pool.service)
        ]
        assert our_pool.error_rate is not None and their_pool.error_rate is not None
        assert abs(their_pool.error_rate - our_pool.error_rate) <= 0.01, (our_pool, their_pool)
        assert their_pool.samples is not None
        assert abs(their_pool.samples - our_pool.samples) <= 0.1 * our_pool.samples, (
            our_pool,
            their_pool,
        )
    [tiny_web] = [s for s in prom_report.services if (s.region, s.service) == ("tiny", "web")]
    # every p2 request HAProxy refused itself (none reached a backend) is an error of the
    # one-slot region's pool and of the region, in PromQL's numbers too
    for entry in (tiny_web, prom_report.region("tiny")):
        assert entry.error_rate is not None and entry.samples, entry
        errors = entry.error_rate * entry.samples
        assert abs(errors - refused["p2"]) <= 0.1 * refused["p2"], (entry, refused)
    tiny = prom_report.region("tiny")
    # a served request mostly waited a whole service time for the one slot
    assert tiny.p99_ms is not None and tiny.p99_ms >= 1.5 * TINY_MS, tiny
    for pop in ("p1", "p2"):
        [our_pop] = [p for p in lab_report.pops if p.pop == pop]
        [their_pop] = [p for p in prom_report.pops if p.pop == pop]
        assert our_pop.error_rate is not None and their_pop.error_rate is not None
        assert abs(their_pop.error_rate - our_pop.error_rate) <= 0.01, (our_pop, their_pop)
        assert their_pop.samples is not None
        assert abs(their_pop.samples - our_pop.samples) <= 0.1 * our_pop.samples, (
            our_pop,
            their_pop,
        )
        assert their_pop.p99_ms is not None  # the backends' view; the lab's own read has none
    assert sum(p.samples for p in prom_report.pops) == pytest.approx(REQUESTS, rel=0.1)
