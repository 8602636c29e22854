"""One region's backend process: serves what HAProxy sends it, with the lab's physics.

HAProxy admits the region's capacity (a server's ``maxconn`` is the pool's slots plus room
for the requests in dependency calls: :func:`~orchestrator.lab.haproxy.config.server_maxconn`),
and the slots themselves are here, a :class:`~orchestrator.lab.slots.SlotPool` per front
service: a request holds one for its service time, three times longer (the lab's
``cold.factor``) while its bucket is new to the region, so cold requests are not served more
at once than the pool's slots (HAProxy's connections alone would let a cold burst through
at the warm rate's concurrency). Then it calls its dependencies: a stateless one in this
region's pool; a stateful one (kv) at the user's shard primary, paying the inter-region
RTT and the primary's service time when that is another region. One process per region,
so a stalled region (even a SIGSTOPped one) costs no other region a request.

The shards' primaries and the share of slots a region has (less its running batch jobs'
share, times its powered share) are the lab's own state (:mod:`.beside`), written to a
file the backend reads with the routing, so a move of primaries changes who pays RTT
within a poll. A remote primary's service time is slept here, not booked in that region's
kv pool (kv, 2,000 rps a region in the shipped lab, is nobody's bottleneck): the primary
region's kv utilization counts its own backend's calls only.

A request's latency in the region counts from its arrival there (the PoP frontend's
``x-lab-accept-us`` stamp after the RTT, same host and clock), so time queued in HAProxy for
a slot is in it; its PoP's latency counts from the edge (``x-lab-edge-us``), RTT included.
``/metrics`` exports, for a real Prometheus, the region's cumulative counters and latency
histograms per region, service and PoP (:mod:`orchestrator.lab.prometheus`'s shape) and
the windowed pool utilization.

A bucket is cold here as in the Python lab: from the moment the routing moves it here
until ``warm_after_s`` or ``warm_after_requests``, and warm while routed here however
quiet it is; one routed away is evicted ``evict_after_s`` after it left. The process
learns the routing by reading HAProxy's live map (``show map`` on the admin socket) every
:data:`ROUTING_POLL_S`, so whoever writes the map, a move is seen within that.

Run by :mod:`orchestrator.lab.haproxy.plane`:
``python -m orchestrator.lab.haproxy.backend --config lab.yaml --region R --port P``
``--map routing.map --socket admin.sock --beside beside.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

# uvicorn loads it by name (http="httptools"); imported here so a missing install fails
# the backend at start, not at its first request
import httptools  # noqa: F401
import uvicorn
import uvloop
from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from orchestrator.exceptions import FleetError
from orchestrator.fleet.haproxy import RuntimeApi
from orchestrator.fleet.haproxy.state import parse_map
from orchestrator.lab.config import LabConfig, load_config
from orchestrator.lab.haproxy.config import ACCEPT_HEADER, EDGE_HEADER, primaries_of
from orchestrator.lab.metrics import MetricsStore
from orchestrator.lab.prometheus import CONTENT_TYPE, render_metrics
from orchestrator.lab.slots import SlotPool
from orchestrator.models import HealthReport, RegionHealth, ServiceHealth, ServiceKind
from orchestrator.policy.rebalance.buckets import bucket_of

__all__ = ["ROUTING_POLL_S", "RegionBackend", "create_backend_app", "main", "routed_to"]

#: how often a backend reads HAProxy's map to learn which buckets are routed to it
ROUTING_POLL_S = 1.0

#: ``warmth`` entry's "left at" while the bucket is routed here: never evicted
ROUTED_HERE = math.inf

#: a front pool's queue here: HAProxy's ``maxconn`` bounds what can wait, so never full
_UNBOUNDED = 1 << 30


class RegionBackend:
    """The data plane of one region: cold buckets, its slots, dependencies (kv at the
    user's shard primary)."""

    def __init__(self, config: LabConfig, region: str, warm: set[tuple[str, int]]) -> None:
        self.config = config
        self.region = region
        pools = next(r for r in config.regions if r.name == region).services
        self.slots = {s: c.slots for s, c in pools.items()}
        self.service_time_s = {s: c.service_time_ms / 1000.0 for s, c in pools.items()}
        self.dependency_pools = {s: SlotPool(c.slots, c.queue_limit) for s, c in pools.items()}
        self.front_pools = {
            s.name: SlotPool(pools[s.name].slots, _UNBOUNDED)
            for s in config.front_services
            if s.name in pools
        }
        self.depends_on = {s.name: s.depends_on for s in config.services}
        #: stateful service -> its shard ids, in config order (a user's shard is a hash)
        self.shards: dict[str, list[str]] = {}
        for shard in config.shard_list():
            if config.service(shard.service).kind is ServiceKind.STATEFUL:
                self.shards.setdefault(shard.service, []).append(shard.id)
        #: shard id -> primary region, followed from the lab's state (:meth:`follow_beside`)
        self.primaries = primaries_of(config)
        #: the beside file's modification time last read
        self._beside_mtime: float | None = None
        self.metrics = MetricsStore(config.metrics.retention_s)
        now = self.metrics.now()
        #: (pop, bucket) -> [arrived_at, requests served, left at (ROUTED_HERE while it
        #: is, else when it left or was last served here)]; the boot map's buckets of
        #: this region start warm, as in the Python lab
        self.warmth: dict[tuple[str, int], list[float]] = {
            key: [now - config.cold.warm_after_s, config.cold.warm_after_requests, ROUTED_HERE]
            for key in warm
        }
        self.routed: set[tuple[str, int]] = set(warm)
        #: (service, routed region, status) -> answers since start
        self.served: Counter[tuple[str, str, int]] = Counter()

    def follow_routing(self, routed: set[tuple[str, int]]) -> None:
        """The buckets now routed here: one that arrives is cold from now (warm still if it
        left less than ``evict_after_s`` ago); one that leaves starts its eviction clock."""
        now = self.metrics.now()
        evict = self.config.cold.evict_after_s
        for key in self.routed - routed:
            left = self.warmth.get(key)
            if left is not None:
                left[2] = now
        for key in routed - self.routed:
            entry = self.warmth.get(key)
            if entry is None or now - entry[2] > evict:
                self.warmth[key] = [now, 0.0, ROUTED_HERE]
            else:
                entry[2] = ROUTED_HERE
        self.routed = routed

    def follow_beside(self, path: Path) -> None:
        """Take the primaries and this region's share of slots from the lab's state file
        when it changed; a missing or half-written file keeps what is known."""
        try:
            mtime = path.stat().st_mtime
            if mtime == self._beside_mtime:
                return
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self._beside_mtime = mtime
        self.primaries = {**self.primaries, **state.get("primaries", {})}
        share = float(state.get("slot_share", {}).get(self.region, 1.0))
        for pool in self.front_pools.values():
            pool.set_slots(round(pool.base_slots * share))

    def primary_of(self, service: str, user: str) -> str:
        """Where ``user``'s request to ``service`` is served: its shard's primary for a
        stateful service with shards, else this region."""
        shards = self.shards.get(service)
        if not shards or not user:
            return self.region
        return self.primaries.get(shards[bucket_of(f"{service}:{user}", len(shards))], self.region)

    def cold(self, pop: str, bucket: int) -> bool:
        """Record a request of the bucket here; True while the bucket is still cold."""
        cold = self.config.cold
        now = self.metrics.now()
        entry = self.warmth.get((pop, bucket))
        if entry is None or now - entry[2] > cold.evict_after_s:
            # served here without being routed here (balanced over from a drained or
            # partly weighted region): cold on arrival, kept fresh while such traffic lasts
            entry = self.warmth[(pop, bucket)] = [now, 0.0, now]
        elif entry[2] != ROUTED_HERE:
            entry[2] = now
        is_cold = now - entry[0] < cold.warm_after_s and entry[1] < cold.warm_after_requests
        entry[1] += 1
        return is_cold

    async def serve(
        self,
        pop: str,
        bucket: int,
        routed: str,
        service: str,
        accepted_us: int | None = None,
        edge_us: int | None = None,
        user: str = "",
    ) -> tuple[int, dict[str, Any]]:
        """``accepted_us``: when the request reached the region in HAProxy (µs since the
        epoch), the region's latency counts from it; ``edge_us``: when it reached the PoP,
        the PoP's latency counts from it. Either missing: from now. ``user`` picks the
        shard of a stateful dependency."""
        now, wall = self.metrics.now(), time.time()
        # the waits HAProxy held it for (RTT, queue), on the wall clock both processes share
        start = now - (max(0.0, wall - accepted_us / 1e6) if accepted_us is not None else 0.0)
        edge = now - (max(0.0, wall - edge_us / 1e6) if edge_us is not None else 0.0)
        body: dict[str, Any] = {
            "region": self.region,
            "routed": routed,
            "pop": pop,
            "bucket": bucket,
            "service": service,
        }
        if service not in self.service_time_s:
            return 404, {**body, "error": "FleetNotFound", "reason": f"no pool {service!r} here"}
        cold = self.cold(pop, bucket)
        body["cold"] = cold
        hold = self.service_time_s[service] * (self.config.cold.factor if cold else 1.0)
        pool = self.front_pools.get(service)
        if pool is None:  # an internal pool asked for directly: no slot of a front pool
            await asyncio.sleep(hold)
            busy, finish = hold, self.metrics.now()
        else:
            booking = pool.admit(now, hold)
            assert booking is not None  # an unbounded queue admits every request
            await asyncio.sleep(max(0.0, booking.finish - self.metrics.now()))
            busy, finish = booking.finish - booking.start, booking.finish
        # as the lab's pools count it: from queueing for the slot (in HAProxy, then here) to
        # the end of the hold, dependencies after it not included
        self.metrics.record(("service", service), (finish - start) * 1000.0, busy, True)
        status = 200
        for dependency in self.depends_on.get(service, []):
            if not await self._call(dependency, user):
                status = 503
                body["error"] = f"DependencyFailed:{dependency}"
                break
        done = self.metrics.now()
        self.metrics.record(("region",), (done - start) * 1000.0, 0.0, status == 200)
        self.metrics.record(("pop", pop), (done - edge) * 1000.0, 0.0, status == 200)
        self.served[(service, routed, status)] += 1
        return status, body

    async def _call(self, dependency: str, user: str = "") -> bool:
        target = self.primary_of(dependency, user)
        if target != self.region:
            remote = self.config.region(target).services.get(dependency)
            rtt_ms = self.config.rtt_between(self.region, target) or 0.0
            await asyncio.sleep((rtt_ms + (remote.service_time_ms if remote else 0.0)) / 1000.0)
            return True
        pool = self.dependency_pools.get(dependency)
        if pool is None:
            return True
        queued_at = self.metrics.now()
        booking = pool.admit(queued_at, self.service_time_s[dependency])
        if booking is None:
            self.metrics.record(("service", dependency), 0.0, 0.0, False)
            return False
        await asyncio.sleep(max(0.0, booking.finish - self.metrics.now()))
        self.metrics.record(
            ("service", dependency),
            (booking.finish - queued_at) * 1000.0,
            booking.finish - booking.start,
            True,
        )
        return True

    def health(self, window_s: float) -> dict[str, Any]:
        """The region's own view over ``window_s``: what it served (HAProxy's own 503s,
        for a full queue, never reach it: the control app adds them from HAProxy)."""
        services = []
        for service, configured in self.slots.items():
            # a front pool's slots now (a batch job or a dark building takes a share), as
            # the Python lab's pools count utilization
            front = self.front_pools.get(service)
            slots = configured if front is None else front.slots
            s = self.metrics.summary(("service", service), window_s, slots)
            services.append(ServiceHealth(region=self.region, service=service, **s.as_dict()))
        r = self.metrics.summary(("region",), window_s)
        region = RegionHealth(region=self.region, **r.as_dict())
        return {
            "region": region.model_dump(mode="json"),
            "services": [s.model_dump(mode="json") for s in services],
        }

    def exposition(self) -> str:
        """``/metrics``: counters and histograms since start (at zero before the first
        request, so ``rate()`` counts it) and the windowed gauges over the default window."""
        view = self.health(self.config.metrics.window_s)
        services = [ServiceHealth.model_validate(s) for s in view["services"]]
        utils = [s.utilization for s in services if s.utilization is not None]
        region = RegionHealth.model_validate(view["region"]).model_copy(
            update={"utilization": max(utils) if utils else None}
        )
        report = HealthReport(
            window_s=self.config.metrics.window_s,
            observed_at=datetime.now(UTC),
            regions=[region],
            services=services,
            pops=[],
        )
        totals = [
            ("region", {"region": self.region}, self.metrics.totals(("region",))),
            *(
                (
                    "service",
                    {"region": self.region, "service": s},
                    self.metrics.totals(("service", s)),
                )
                for s in self.slots
            ),
            *(
                ("pop", {"pop": p.name}, self.metrics.totals(("pop", p.name)))
                for p in self.config.pops
            ),
        ]
        return render_metrics(report, totals=totals)


def routed_to(map_text: str, region: str) -> set[tuple[str, int]]:
    """``(pop, bucket)`` routed to ``region`` in ``show map`` output or a map file."""
    if map_text.startswith("0x"):
        entries = parse_map(map_text).entries
    else:
        entries = dict(line.split(None, 1) for line in map_text.splitlines() if " " in line)
    routed = set()
    for key, value in entries.items():
        pop, _, bucket = key.rpartition("/")
        if value.strip() == region and bucket.isdigit():
            routed.add((pop, int(bucket)))
    return routed


async def follow_haproxy(
    backend: RegionBackend, runtime: RuntimeApi, map_path: Path, beside: Path | None = None
) -> None:
    """Keep ``backend.routed`` to HAProxy's live map and (``beside``) its primaries and slots
    to the lab's state file, both read every :data:`ROUTING_POLL_S`. A failed read (HAProxy
    not up yet, restarting) keeps the last routing known."""
    while True:
        if beside is not None:
            backend.follow_beside(beside)
        with contextlib.suppress(FleetError, OSError):
            text = await runtime.command(f"show map {map_path}")
            if text.startswith("0x"):
                backend.follow_routing(routed_to(text, backend.region))
        await asyncio.sleep(ROUTING_POLL_S)


def create_backend_app(
    backend: RegionBackend,
    runtime: RuntimeApi | None = None,
    map_path: Path | None = None,
    beside: Path | None = None,
) -> FastAPI:
    """``runtime`` and ``map_path``: HAProxy's admin socket and its routing map, followed
    while the app runs (without them, the boot map's routing stays); ``beside``: the lab's
    state file (primaries, slots), followed with them."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if runtime is None or map_path is None:
            yield
            return
        follower = asyncio.create_task(follow_haproxy(backend, runtime, map_path, beside))
        try:
            yield
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower

    app = FastAPI(title=f"lab region {backend.region}", lifespan=lifespan)

    @app.get("/lab/health")
    async def health(window_s: Annotated[float, Query(gt=0)] = 10.0) -> dict[str, Any]:
        return backend.health(window_s)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(backend.exposition(), media_type=CONTENT_TYPE)

    @app.get("/lab/served")
    async def served() -> list[dict[str, Any]]:
        return [
            {"service": s, "routed": r, "status": c, "count": n}
            for (s, r, c), n in sorted(backend.served.items())
        ]

    async def edge(request: Request) -> Response:
        # A plain Starlette endpoint, not FastAPI's parameter parsing: this is every
        # request of the data plane, and the parsing was about a fifth of its CPU.
        headers = request.headers
        numbers: dict[str, int | None] = {}
        for name in ("x-lab-bucket", ACCEPT_HEADER, EDGE_HEADER):
            value = headers.get(name)
            try:
                numbers[name] = None if value is None else int(value)
            except ValueError:
                reason = f"must be an integer, got {value!r}"
                return JSONResponse(
                    {"error": "InvalidRequest", "field": name, "reason": reason}, status_code=422
                )
        bucket = numbers["x-lab-bucket"]
        status, body = await backend.serve(
            headers.get("x-lab-pop", ""),
            -1 if bucket is None else bucket,
            headers.get("x-lab-routed", ""),
            request.query_params.get("service", "web"),
            numbers[ACCEPT_HEADER],
            numbers[EDGE_HEADER],
            request.query_params.get("user", ""),
        )
        return JSONResponse(body, status_code=status)

    # last: it takes every path the routes above do not
    app.router.add_route("/{path:path}", edge, methods=["GET"], include_in_schema=False)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--region", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--map", type=Path, required=True)
    parser.add_argument("--socket", help="HAProxy's admin socket: follow its live map")
    parser.add_argument("--beside", type=Path, help="the lab's state file: follow it")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    boot = routed_to(args.map.read_text(encoding="utf-8"), args.region)
    backend = RegionBackend(config, args.region, boot)
    runtime = RuntimeApi(args.socket, timeout_s=5.0) if args.socket else None
    server_config = uvicorn.Config(
        create_backend_app(backend, runtime, args.map, args.beside),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        # Enough connections for a pool's slots and its dependency calls: HAProxy limits them.
        limit_concurrency=None,
        # httptools' parser (C) instead of h11's, on uvloop's event loop below: less CPU per
        # request, so less event-loop lag holding HAProxy's connections at 1,200 rps
        http="httptools",
        loop="none",
    )
    uvloop.run(uvicorn.Server(server_config).serve())


if __name__ == "__main__":
    main()
