"""One running lab: its state, its physics (live or model) and the ground truth."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from orchestrator.lab.config import LabConfig
from orchestrator.lab.errors import invalid
from orchestrator.lab.live import LiveEngine
from orchestrator.lab.model import ModelEngine
from orchestrator.lab.prometheus import ExtraGauges
from orchestrator.lab.state import FleetState
from orchestrator.lab.training.cluster import LabTrainingCluster
from orchestrator.lab.training.faults import FaultRecord
from orchestrator.models import HealthReport, RoutingTable

__all__ = ["AUTO_BUCKETS_LIMIT", "LabRuntime", "Mode"]

Mode = Literal["live", "model"]

#: routing answers carry buckets by default only up to this many (PoPs x buckets)
AUTO_BUCKETS_LIMIT = 262_144


class LabRuntime:
    def __init__(
        self,
        config: LabConfig,
        mode: Mode = "live",
        *,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` is the fleet's time in model mode (live physics run on real time)."""
        self.config = config
        self.mode: Mode = mode
        self.state = FleetState(config, clock)
        self.live: LiveEngine | None = LiveEngine(self.state, seed=seed) if mode == "live" else None
        self.model: ModelEngine | None = ModelEngine(self.state) if mode == "model" else None
        self._routing_cache: dict[bool, tuple[int, bytes]] = {}
        buildings = [(r.name, b) for r in config.regions for b in r.buildings]
        self.training = LabTrainingCluster(config.training, buildings, mode, clock=clock)

    def include_buckets(self, asked: bool | None) -> bool:
        if asked is not None:
            return asked
        return len(self.config.pops) * self.config.bucket_count <= AUTO_BUCKETS_LIMIT

    def routing_json(self, include_buckets: bool) -> bytes:
        """The routing table as JSON, cached per version: big tables are read often."""
        version = self.state.routing.version
        cached = self._routing_cache.get(include_buckets)
        if cached is None or cached[0] != version:
            table: RoutingTable = self.state.routing.table(include_buckets=include_buckets)
            cached = (version, table.model_dump_json().encode())
            self._routing_cache[include_buckets] = cached
        return cached[1]

    def health(self, window_s: float | None) -> HealthReport:
        metrics = self.config.metrics
        window = metrics.window_s if window_s is None else window_s
        if not 0 < window <= metrics.retention_s:
            raise invalid("window_s", f"must be within (0, {metrics.retention_s:g}] seconds")
        if self.live is not None:
            return self.live.health(window)
        assert self.model is not None
        return self.model.health(window)

    def truth(self) -> dict[str, Any]:
        """What benchmarks compare measurements against: configured and effective capacity."""
        cfg = self.config
        state = self.state
        effective: dict[str, dict[str, float]] = {}
        for region in cfg.regions:
            share = state.batch_share(region.name)
            powered = state.power_share(region.name)
            down = region.name in state.faults.region_outage or state.dark(region.name)
            effective[region.name] = {
                s: 0.0
                if down
                else max(round(c.slots * (1 - share) * powered), 1) / (c.service_time_ms / 1e3)
                for s, c in region.services.items()
            }
        out: dict[str, Any] = {
            "mode": self.mode,
            "capacity_rps": {
                r.name: {s: c.capacity_rps for s, c in r.services.items()} for r in cfg.regions
            },
            "effective_capacity_rps": effective,
            "front_capacity_rps": {r.name: cfg.front_capacity(r.name) for r in cfg.regions},
            "pools": {
                r.name: {s: c.model_dump() for s, c in r.services.items()} for r in cfg.regions
            },
            "demand_share": {s.name: s.demand_share for s in cfg.front_services},
            "cold": cfg.cold.model_dump(),
            "sessions_ttl_s": cfg.sessions.ttl_s,
            "bucket_count": cfg.bucket_count,
            "routing_version": state.routing.version,
            "audit_entries": len(state.ledger),
            "shard_primaries": dict(state.shard_primary),
            "batch_running": dict(state.batch_running),
            "service_weights": {f"{r}/{s}": w for (r, s), w in state.weights.items()},
            "faults": state.faults.model_dump(),
            "unpowered_buildings": sorted(state.unpowered),
            "configs": {p: {"rev": rev} for p, (rev, _) in state.configs.items()},
        }
        if self.live is not None:
            out["sessions_open"] = self.live.open_sessions()
            out["edge_requests"] = self.live.served_by_pop()
            out["edge_5xx_by_region"] = dict(self.live.failed_in)
            out["edge_5xx_by_reason"] = dict(self.live.failed_why)
            out["edge_5xx_cold_by_region"] = {
                r: n for r, n in self.live.failed_cold_in.items() if n
            }
        else:
            out["demand_rps"] = cfg.demand.total_rps
        return out

    def set_power(self, building: str, on: bool) -> FaultRecord:
        """A building's power: its GPU hosts and its share of every pool in its region.

        One fault takes both halves, as a real power loss would; restoring brings both back.
        """
        self.state.building_region(building)  # a 404 naming the field before anything moves
        record = self.training.faults.power(building, on)
        self.state.set_power(building, on)
        return record

    def extra_metrics(self) -> ExtraGauges:
        """Lab-only gauges for /metrics: routing version, audit entries, open sessions."""
        extra: dict[str, list[tuple[dict[str, str], float]]] = {
            "lab_routing_version": [({}, float(self.state.routing.version))],
            "lab_audit_entries": [({}, float(len(self.state.ledger)))],
            "lab_building_power": [
                ({"region": r.name, "building": b}, float(b not in self.state.unpowered))
                for r in self.config.regions
                for b in r.buildings
            ],
        }
        if self.live is not None:
            extra["lab_sessions_open"] = [
                ({"region": r}, float(n)) for r, n in self.live.open_sessions().items()
            ]
        return extra
