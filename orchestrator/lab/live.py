"""Live physics: every request is really queued, served (asleep) and measured.

A request arrives at a PoP, hashes to a bucket, is routed to a region, pays the
PoP->region RTT, may be forwarded by the service's pool weight (paying the
inter-region RTT), waits for a slot in the region's service pool (503 when the
bounded queue is full), holds the slot for the service time (x the cold factor
while its bucket is new to the region), then calls its dependencies: stateless
ones in the same region, stateful ones at the user's shard primary. Capacity is
``slots / service_time`` by construction, whatever this machine's CPU.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from orchestrator.lab.metrics import MetricsStore, Summary, Totals
from orchestrator.lab.prometheus import ScopeTotals
from orchestrator.lab.slots import SlotPool
from orchestrator.lab.state import FleetState
from orchestrator.models import (
    HealthReport,
    PopHealth,
    RegionHealth,
    ServiceHealth,
    ServiceKind,
)
from orchestrator.policy.rebalance.buckets import bucket_of

__all__ = ["EdgeAnswer", "LiveEngine"]


class EdgeAnswer:
    __slots__ = ("body", "status")

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body


class LiveEngine:
    def __init__(self, state: FleetState, *, seed: int | None = None) -> None:
        self.state = state
        cfg = state.config
        self.config = cfg
        self.rng = random.Random(seed)
        self.metrics = MetricsStore(cfg.metrics.retention_s)
        self.pools = {
            (r.name, s): SlotPool(c.slots, c.queue_limit)
            for r in cfg.regions
            for s, c in r.services.items()
        }
        self.service_time_s = {
            (r.name, s): c.service_time_ms / 1000.0
            for r in cfg.regions
            for s, c in r.services.items()
        }
        self.services = {s.name: s for s in cfg.services}
        self.pop_rtt_s = {p.name: {r: ms / 1000.0 for r, ms in p.rtt_ms.items()} for p in cfg.pops}
        self.shards_by_service: dict[str, list[str]] = {}
        for shard in cfg.shard_list():
            self.shards_by_service.setdefault(shard.service, []).append(shard.id)
        #: user -> (region, session end) for sticky services
        self.sessions: dict[str, tuple[str, float]] = {}
        #: (region, pop, bucket) -> [arrived_at, requests served, left_at (inf while routed)]
        self.warmth: dict[tuple[str, str, int], list[float]] = {}
        #: the bucket layout warmth was last updated for, per PoP
        self._routed: dict[str, list[str]] = {}
        #: (pop, HTTP status) -> edge requests answered since start: benchmarks count the
        #: 5xx of a period exactly from differences, where windowed health would blur them
        self.served: Counter[tuple[str, int]] = Counter()
        #: region -> edge answers with a 5xx there: where the failures happened
        self.failed_in: Counter[str] = Counter()
        #: "region/reason" -> edge 5xx answers, so a benchmark can tell overload from a fault
        self.failed_why: Counter[str] = Counter()
        #: region -> those of them whose bucket was still cold there (new to the region,
        #: as after a routing move): the failures a move can be blamed for
        self.failed_cold_in: Counter[str] = Counter()
        for pop in state.routing.pops:
            self._routed[pop] = list(state.routing.buckets_of(pop))
            for bucket, region in enumerate(self._routed[pop]):
                self.warmth[(region, pop, bucket)] = [-math.inf, 0.0, math.inf]
        state.subscribe(self._on_mutation)
        self._refresh_slots()

    # --- reacting to mutations -------------------------------------------

    def _on_mutation(self, kind: str, request: dict[str, Any]) -> None:
        if kind == "routing":
            self._buckets_moved()
        elif kind in ("batch-job", "power"):
            self._refresh_slots()
        elif kind == "service-weight" and request["weight"] == 0:
            service = self.services.get(request["service"])
            if service is not None and service.kind == ServiceKind.STICKY:
                self.tear_down_sessions(request["region"])

    def _buckets_moved(self) -> None:
        """A bucket arrives in its new region cold, the moment the routing moves it.

        One that comes back to a region it left less than ``evict_after_s`` ago
        finds its cache still warm.
        """
        now = self.metrics.now()
        evict = self.config.cold.evict_after_s
        for pop in self.state.routing.pops:
            before = self._routed[pop]
            after = list(self.state.routing.buckets_of(pop))
            for bucket, (old, new) in enumerate(zip(before, after, strict=True)):
                if old == new:
                    continue
                left = self.warmth.get((old, pop, bucket))
                if left is not None:
                    left[2] = now
                entry = self.warmth.get((new, pop, bucket))
                if entry is None or now - entry[2] > evict:
                    self.warmth[(new, pop, bucket)] = [now, 0.0, math.inf]
                else:
                    entry[2] = math.inf
            self._routed[pop] = after

    def _refresh_slots(self) -> None:
        # Batch jobs take a share of what the powered buildings hold; a request already
        # holding a slot that goes away finishes (SlotPool.set_slots keeps its hold).
        for (region, _service), pool in self.pools.items():
            share = self.state.batch_share(region)
            powered = self.state.power_share(region)
            pool.set_slots(round(pool.base_slots * (1.0 - share) * powered))

    def tear_down_sessions(self, region: str) -> int:
        doomed = [u for u, (r, _) in self.sessions.items() if r == region]
        for user in doomed:
            del self.sessions[user]
        return len(doomed)

    def served_by_pop(self) -> dict[str, dict[str, int]]:
        """Edge answers since start, per PoP and HTTP status (as strings, for JSON)."""
        out: dict[str, dict[str, int]] = {}
        for (pop, status), count in sorted(self.served.items()):
            out.setdefault(pop, {})[str(status)] = count
        return out

    def open_sessions(self) -> dict[str, int]:
        now = self.metrics.now()
        for user in [u for u, (_, end) in self.sessions.items() if end <= now]:
            del self.sessions[user]
        counts = dict.fromkeys(self.state.routing.regions, 0)
        for region, _ in self.sessions.values():
            counts[region] += 1
        return counts

    # --- the data plane --------------------------------------------------

    async def serve_edge(self, pop: str, user: str, service: str) -> EdgeAnswer:
        start = self.metrics.now()
        bucket = bucket_of(user, self.config.bucket_count)
        sticky = self.services[service].kind == ServiceKind.STICKY
        region: str | None = None
        rtt_s = 0.0
        session = "none"
        if sticky:
            pinned = self.sessions.get(user)
            if pinned is not None and pinned[1] > start and self._can_serve(pinned[0], service):
                region, session = pinned[0], "kept"
                rtt_s = self.pop_rtt_s[pop][region]
        if region is None:
            routed = self.state.routing.region_of(pop, bucket)
            target = self._forward(routed, service)
            if target is None:
                self.metrics.record(("pop", pop), 0.0, 0.0, False)
                self.served[(pop, 503)] += 1
                self.failed_in[routed] += 1
                self.failed_why[f"{routed}/NoCapacity"] += 1
                return EdgeAnswer(503, {"error": "NoCapacity", "region": routed, "bucket": bucket})
            region = target
            rtt_s = self.pop_rtt_s[pop][routed] + self._inter_rtt_s(routed, region)
            if sticky:
                self.sessions[user] = (region, start + self.config.sessions.ttl_s)
                session = "new"
        await asyncio.sleep(rtt_s)
        status, error = await self._serve_in_region(region, pop, bucket, service, user)
        latency_ms = (self.metrics.now() - start) * 1000.0
        ok = status == 200
        self.metrics.record(("pop", pop), latency_ms, 0.0, ok)
        self.served[(pop, status)] += 1
        if status >= 500:
            self.failed_in[region] += 1
            self.failed_why[f"{region}/{error}"] += 1
        body: dict[str, Any] = {"region": region, "bucket": bucket, "service": service}
        if sticky:
            body["session"] = session
        if not ok:
            body["error"] = error
            if sticky and session == "new":
                self.sessions.pop(user, None)
        return EdgeAnswer(status, body)

    def _can_serve(self, region: str, service: str) -> bool:
        return not self._down(region) and self.state.weight(region, service) > 0

    def _down(self, region: str) -> bool:
        return region in self.state.faults.region_outage or self.state.dark(region)

    def _inter_rtt_s(self, a: str, b: str) -> float:
        rtt = self.config.rtt_between(a, b)
        return (rtt or 0.0) / 1000.0

    def _forward(self, routed: str, service: str) -> str | None:
        """Where a request routed to ``routed`` is served, by the service's pool weights."""
        weight = self.state.weight(routed, service)
        if weight >= 1.0 or self._down(routed):
            return routed
        if weight > 0 and self.rng.random() < weight:
            return routed
        others = [
            (r, self.pools[(r, service)].slots / self.service_time_s[(r, service)] * w)
            for r in self.state.routing.regions
            if r != routed
            and (w := self.state.weight(r, service)) > 0
            and self._can_serve(r, service)
        ]
        if not others:
            return routed if weight > 0 else None
        total = sum(c for _, c in others)
        pick = self.rng.random() * total
        for region, share in others:
            pick -= share
            if pick <= 0:
                return region
        return others[-1][0]

    async def _serve_in_region(
        self, region: str, pop: str, bucket: int, service: str, user: str
    ) -> tuple[int, str]:
        arrived = self.metrics.now()
        status, error = await self._serve_front(region, pop, bucket, service, user)
        latency_ms = (self.metrics.now() - arrived) * 1000.0
        self.metrics.record(("region", region), latency_ms, 0.0, status == 200)
        return status, error

    async def _serve_front(
        self, region: str, pop: str, bucket: int, service: str, user: str
    ) -> tuple[int, str]:
        faults = self.state.faults
        if region in faults.region_outage:
            return 503, "RegionDown"
        if self.state.dark(region):
            return 503, "PowerLost"
        if self.rng.random() < faults.error_rate.get(region, 0.0):
            return 500, "InjectedError"
        extra_ms = faults.added_latency_ms.get(region, 0.0)
        if extra_ms:
            await asyncio.sleep(extra_ms / 1000.0)
        cold = self._touch(region, pop, bucket)
        factor = self.config.cold.factor if cold else 1.0
        if not await self._use_pool(region, service, factor):
            self.failed_cold_in[region] += cold
            return 503, "Overloaded"
        for dependency in self.services[service].depends_on:
            if not await self._call_dependency(region, dependency, user):
                self.failed_cold_in[region] += cold
                return 503, f"DependencyFailed:{dependency}"
        return 200, ""

    def _touch(self, region: str, pop: str, bucket: int) -> bool:
        """Record a request for the bucket in the region; True while it is still cold."""
        cold = self.config.cold
        now = self.metrics.now()
        key = (region, pop, bucket)
        entry = self.warmth.get(key)
        if entry is None or now - entry[2] > cold.evict_after_s:
            # Served here without being routed here (forwarded, or a sticky
            # session): cold on arrival, kept fresh while such traffic lasts.
            entry = self.warmth[key] = [now, 0.0, now]
        elif entry[2] != math.inf:
            entry[2] = now
        is_cold = now - entry[0] < cold.warm_after_s and entry[1] < cold.warm_after_requests
        entry[1] += 1
        return is_cold

    async def _use_pool(self, region: str, service: str, factor: float = 1.0) -> bool:
        pool = self.pools[(region, service)]
        queued_at = self.metrics.now()
        booking = pool.admit(queued_at, self.service_time_s[(region, service)] * factor)
        if booking is None:
            self.metrics.record(("service", region, service), 0.0, 0.0, False)
            return False
        try:
            await asyncio.sleep(max(0.0, booking.finish - self.metrics.now()))
        finally:
            # Booked time is busy time even when the client went away mid-hold.
            self.metrics.record(
                ("service", region, service),
                (booking.finish - queued_at) * 1000.0,
                booking.finish - booking.start,
                True,
            )
        return True

    async def _call_dependency(self, region: str, dependency: str, user: str) -> bool:
        target = region
        if self.services[dependency].kind == ServiceKind.STATEFUL:
            shards = self.shards_by_service.get(dependency)
            if shards:
                shard = shards[bucket_of(f"{dependency}:{user}", len(shards))]
                target = self.state.shard_primary[shard]
        if self._down(target):
            self.metrics.record(("service", target, dependency), 0.0, 0.0, False)
            return False
        if target != region:
            await asyncio.sleep(self._inter_rtt_s(region, target))
        return await self._use_pool(target, dependency)

    # --- health ----------------------------------------------------------

    def totals(self) -> ScopeTotals:
        """Cumulative totals of every region, service and PoP, zero before any request."""
        regions = self.state.routing.regions
        out: list[tuple[str, dict[str, str], Totals]] = [
            ("region", {"region": r}, self.metrics.totals(("region", r))) for r in regions
        ]
        out += [
            ("service", {"region": r, "service": s}, self.metrics.totals(("service", r, s)))
            for r in regions
            for s in self.services
        ]
        out += [
            ("pop", {"pop": p}, self.metrics.totals(("pop", p))) for p in self.state.routing.pops
        ]
        return out

    def health(self, window_s: float) -> HealthReport:
        regions: list[RegionHealth] = []
        services: list[ServiceHealth] = []
        for region in self.state.routing.regions:
            worst: float | None = None
            for service in self.services:
                pool = self.pools[(region, service)]
                s = self.metrics.summary(("service", region, service), window_s, pool.slots)
                services.append(ServiceHealth(region=region, service=service, **_fields(s)))
                if s.utilization is not None:
                    worst = s.utilization if worst is None else max(worst, s.utilization)
            r = self.metrics.summary(("region", region), window_s)
            r.utilization = worst if r.samples else None
            regions.append(RegionHealth(region=region, **_fields(r)))
        pops = [
            PopHealth(pop=p, **_fields(self.metrics.summary(("pop", p), window_s)))
            for p in self.state.routing.pops
        ]
        return HealthReport(
            window_s=window_s,
            observed_at=datetime.now(UTC),
            regions=regions,
            services=services,
            pops=pops,
        )


def _fields(summary: Summary) -> dict[str, Any]:
    return summary.as_dict()
