"""Model physics: the same health numbers, computed from demand and routing.

Demand (``demand.total_rps``, split over PoPs by weight and over front services
by demand share) flows through the routing fractions to regions, through pool
weights to the regions that serve it, and through dependencies to their pools
(stateless ones locally, stateful ones at the shard primaries). Each pool is an
M/M/c queue with its slots and service time: utilization is load over capacity
(capped at 1, as a busy pool cannot be busier), waiting time follows
Sakasegawa's approximation, bounded by the queue limit, and load past capacity
is the error rate. Everything is numpy over (PoP x region) and
(region x service) arrays, so a 1,000 x 50 read takes milliseconds.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np

from orchestrator.lab.state import FleetState
from orchestrator.models import (
    HealthReport,
    PopHealth,
    RegionHealth,
    ServiceHealth,
    ServiceKind,
)

__all__ = ["ModelEngine"]

# Quantiles of an exponential wait: P(W > t) = e^{-t/mean}
_P50 = math.log(2.0)
_P99 = math.log(100.0)


class ModelEngine:
    def __init__(self, state: FleetState) -> None:
        self.state = state
        cfg = state.config
        self.config = cfg
        self.regions = [r.name for r in cfg.regions]
        self.services = [s.name for s in cfg.services]
        self.pops = [p.name for p in cfg.pops]
        r_idx = {r: i for i, r in enumerate(self.regions)}
        self._r_idx = r_idx
        shape = (len(self.regions), len(self.services))
        self.base_slots = np.zeros(shape)
        self.service_time_s = np.ones(shape)
        self.queue_limit = np.zeros(shape)
        for i, region in enumerate(cfg.regions):
            for j, service in enumerate(self.services):
                c = region.services[service]
                self.base_slots[i, j] = c.slots
                self.service_time_s[i, j] = c.service_time_ms / 1000.0
                self.queue_limit[i, j] = c.queue_limit
        weights = np.array([p.demand_weight for p in cfg.pops])
        self.pop_share = weights / weights.sum()
        self.pop_rtt_ms = np.array([[p.rtt_ms[r] for r in self.regions] for p in cfg.pops])
        self.inter_rtt_ms = np.array(
            [[cfg.rtt_between(a, b) or 0.0 for b in self.regions] for a in self.regions]
        )
        share = np.array([s.demand_share for s in cfg.services])
        self.front_share = share / share.sum()

    def _slots(self) -> np.ndarray:
        batch = np.array([self.state.batch_share(r) for r in self.regions])
        powered = np.array([self.state.power_share(r) for r in self.regions])
        slots = np.maximum(np.round(self.base_slots * ((1.0 - batch) * powered)[:, None]), 1.0)
        down = [self._r_idx[r] for r in self.state.faults.region_outage]
        down += [self._r_idx[r] for r in self.regions if self.state.dark(r)]
        slots[down, :] = 0.0
        return slots

    def _weights(self) -> np.ndarray:
        w = np.ones((len(self.regions), len(self.services)))
        for (region, service), value in self.state.weights.items():
            w[self._r_idx[region], self.services.index(service)] = value
        return w

    def capacities(self) -> np.ndarray:
        """Requests per second per (region, service) right now (batch jobs, outages)."""
        return self._slots() / self.service_time_s

    def health(self, window_s: float) -> HealthReport:
        cfg = self.config
        routing = self.state.routing.matrix()  # pops x regions
        pop_rps = cfg.demand.total_rps * self.pop_share
        arrivals = pop_rps @ routing  # region
        slots = self._slots()
        capacity = slots / self.service_time_s
        weight = self._weights()
        front = np.outer(arrivals, self.front_share)  # region x service, as routed
        served = self._forward(front, weight, capacity)
        offered = served + self._dependency_load(served)

        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(capacity > 0, offered / capacity, np.where(offered > 0, np.inf, 0.0))
        errors = np.where(rho > 1.0, 1.0 - 1.0 / np.where(rho > 1.0, rho, 1.0), 0.0)
        wait50_s, wait99_s = self._wait(rho, slots)
        faults = self.state.faults
        extra_ms = np.array([faults.added_latency_ms.get(r, 0.0) for r in self.regions])
        injected = np.array([faults.error_rate.get(r, 0.0) for r in self.regions])
        p50_pool = (self.service_time_s + wait50_s) * 1000.0
        p99_pool = (self.service_time_s + wait99_s) * 1000.0

        # A front request's latency: its own pool, then each dependency's pool
        # (plus the RTT to the stateful ones' primaries, weighted by shard share).
        dep_p50 = np.zeros_like(p50_pool)
        dep_p99 = np.zeros_like(p99_pool)
        dep_err = np.zeros_like(errors)
        for j, service_cfg in enumerate(cfg.services):
            for dep in service_cfg.depends_on:
                k = self.services.index(dep)
                if cfg.service(dep).kind == ServiceKind.STATEFUL:
                    where = self._primary_share(dep)
                    rtt = self.inter_rtt_ms @ where
                    dep_p50[:, j] += rtt + where @ p50_pool[:, k]
                    dep_p99[:, j] += rtt + float(np.max(p99_pool[where > 0, k], initial=0.0))
                    dep_err[:, j] = 1 - (1 - dep_err[:, j]) * (1 - where @ errors[:, k])
                else:
                    dep_p50[:, j] += p50_pool[:, k]
                    dep_p99[:, j] += p99_pool[:, k]
                    dep_err[:, j] = 1 - (1 - dep_err[:, j]) * (1 - errors[:, k])
        front_mask = self.front_share > 0
        e2e_err = 1 - (1 - errors) * (1 - dep_err)
        e2e_err = 1 - (1 - e2e_err) * (1 - injected[:, None])
        e2e_p50 = p50_pool + dep_p50 + extra_ms[:, None]
        e2e_p99 = p99_pool + dep_p99 + extra_ms[:, None]
        load = served[:, front_mask]
        region_rps = load.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            mix = np.where(region_rps[:, None] > 0, load / region_rps[:, None], 0.0)
        region_err = (mix * e2e_err[:, front_mask]).sum(axis=1)
        region_p50 = (mix * e2e_p50[:, front_mask]).sum(axis=1)
        region_p99 = np.where(load > 0, e2e_p99[:, front_mask], 0.0).max(axis=1)
        util = np.minimum(rho, 1.0)

        regions = []
        services = []
        for i, region in enumerate(self.regions):
            samples = int(round(region_rps[i] * window_s))
            has = samples > 0
            regions.append(
                RegionHealth.model_construct(
                    region=region,
                    rps=float(region_rps[i]) if has else None,
                    utilization=float(util[i][offered[i] > 0].max()) if has else None,
                    p50_ms=float(region_p50[i]) if has and region_err[i] < 1 else None,
                    p99_ms=float(region_p99[i]) if has and region_err[i] < 1 else None,
                    error_rate=float(region_err[i]) if has else None,
                    samples=samples,
                )
            )
            for j, service in enumerate(self.services):
                n = int(round(offered[i, j] * window_s))
                ok = n > 0 and errors[i, j] < 1
                services.append(
                    ServiceHealth.model_construct(
                        region=region,
                        service=service,
                        rps=float(offered[i, j]) if n else None,
                        utilization=float(util[i, j]) if n else None,
                        p50_ms=float(p50_pool[i, j]) if ok else None,
                        p99_ms=float(p99_pool[i, j]) if ok else None,
                        error_rate=float(errors[i, j]) if n else None,
                        samples=n,
                    )
                )
        pop_err = routing @ region_err
        pop_p50 = (routing * (self.pop_rtt_ms + region_p50[None, :])).sum(axis=1)
        pop_p99 = np.where(routing > 0, self.pop_rtt_ms + region_p99[None, :], 0.0).max(axis=1)
        pop_samples = np.rint(pop_rps * window_s).astype(int)
        pops = [
            PopHealth.model_construct(
                pop=pop,
                rps=float(pop_rps[p]) if pop_samples[p] else None,
                utilization=None,
                p50_ms=float(pop_p50[p]) if pop_samples[p] and pop_err[p] < 1 else None,
                p99_ms=float(pop_p99[p]) if pop_samples[p] and pop_err[p] < 1 else None,
                error_rate=float(pop_err[p]) if pop_samples[p] else None,
                samples=int(pop_samples[p]),
            )
            for p, pop in enumerate(self.pops)
        ]
        return HealthReport.model_construct(
            window_s=window_s,
            observed_at=datetime.fromtimestamp(self.state.clock(), UTC),
            regions=regions,
            services=services,
            pops=pops,
        )

    def _forward(self, front: np.ndarray, weight: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        """Apply pool weights: a region keeps ``w`` of its load and spreads the rest."""
        kept = front * weight
        spill = front * (1.0 - weight)
        # Others take the spill in proportion to weighted capacity, never themselves.
        share = capacity * weight
        total = share.sum(axis=0)
        served = kept.copy()
        for j in range(front.shape[1]):
            if not spill[:, j].any():
                continue
            for i in range(front.shape[0]):
                if spill[i, j] == 0:
                    continue
                others = total[j] - share[i, j]
                if others <= 0:
                    # Nowhere to go: the region keeps it (and fails it if it cannot serve).
                    served[i, j] += spill[i, j] if weight[i, j] > 0 else 0.0
                    continue
                spread = share[:, j] / others
                spread[i] = 0.0
                served[:, j] += spill[i, j] * spread
        return served

    def _dependency_load(self, served: np.ndarray) -> np.ndarray:
        load = np.zeros_like(served)
        for j, service in enumerate(self.config.services):
            for dep in service.depends_on:
                k = self.services.index(dep)
                if self.config.service(dep).kind == ServiceKind.STATEFUL:
                    load[:, k] += served[:, j].sum() * self._primary_share(dep)
                else:
                    load[:, k] += served[:, j]
        return load

    def _primary_share(self, service: str) -> np.ndarray:
        counts = np.zeros(len(self.regions))
        for shard, region in self.state.shard_primary.items():
            if self.state.shard_service[shard] == service:
                counts[self._r_idx[region]] += 1
        if counts.sum() == 0:
            return counts
        return counts / counts.sum()

    def _wait(self, rho: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Median and 99th-percentile queueing delay (s) per pool.

        The mean wait is Sakasegawa's M/M/c approximation; its quantiles are
        those of an exponential; no request waits longer than a full queue
        takes to drain, and a saturated pool makes everyone wait that long.
        """
        c = np.maximum(slots, 1.0)
        max_wait = self.queue_limit / c * self.service_time_s
        safe = np.clip(rho, 0.0, 0.999)
        exponent = np.sqrt(2.0 * (c + 1.0)) - 1.0
        mean = self.service_time_s * safe**exponent / (c * (1.0 - safe))
        saturated = rho >= 1.0
        w50 = np.where(saturated, max_wait, np.minimum(_P50 * mean, max_wait))
        w99 = np.where(saturated, max_wait, np.minimum(_P99 * mean, max_wait))
        return w50, w99
