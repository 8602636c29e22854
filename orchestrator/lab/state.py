"""The lab fleet's mutable state and the mutations the fleet API applies to it.

Both physics (live and model) read this state; only the methods here change
it, each through the :class:`~orchestrator.lab.ledger.Ledger` so a key applies
once. Everything runs on the server's event loop, so a mutation is atomic.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi.responses import JSONResponse

from orchestrator.lab.config import LabConfig
from orchestrator.lab.errors import conflict, invalid, not_found
from orchestrator.lab.faults import LabFaults
from orchestrator.lab.ledger import Ledger
from orchestrator.lab.routing import RoutingState
from orchestrator.models import (
    BatchJob,
    BatchJobAction,
    ConfigChange,
    MutationResult,
    RoutingWrite,
    ServiceWeightChange,
    ShardMove,
    Topology,
)

__all__ = ["FleetState", "Mutated"]

#: called after a mutation with its kind and request, so physics can react
Listener = Callable[[str, dict[str, Any]], None]


class Mutated:
    """A mutation's answer: the JSON body, extra headers, and whether it was a replay."""

    def __init__(self, body: dict[str, Any], headers: dict[str, str], replayed: bool) -> None:
        self.body = body
        self.headers = headers
        self.replayed = replayed

    def response(self) -> JSONResponse:
        """The answer as sent: a replay says so (``Idempotent-Replayed: true``)."""
        headers = dict(self.headers)
        if self.replayed:
            headers["Idempotent-Replayed"] = "true"
        return JSONResponse(self.body, headers=headers)


class FleetState:
    def __init__(self, config: LabConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        #: the fleet's time, for the timestamps it answers with (audit, routing, health)
        self.clock = clock
        self.routing = RoutingState(
            pops=[p.name for p in config.pops],
            regions=[r.name for r in config.regions],
            bucket_count=config.bucket_count,
            fractions=config.initial_fractions(),
            clock=clock,
        )
        self.ledger = Ledger(clock)
        self.weights: dict[tuple[str, str], float] = {}
        self.shard_primary: dict[str, str] = {s.id: s.primary for s in config.shard_list()}
        self.shard_service: dict[str, str] = {s.id: s.service for s in config.shard_list()}
        self.batch_running: dict[str, bool] = {j.name: j.running for j in config.batch_jobs}
        self.configs: dict[str, tuple[int, str]] = {}
        self.faults = LabFaults()
        #: buildings without power: their share of every pool in their region serves nothing
        self.unpowered: set[str] = set()
        #: regions none of whose buildings has power (kept here: read on every request)
        self._dark: set[str] = set()
        self._building_region = {b: r.name for r in config.regions for b in r.buildings}
        self._listeners: list[Listener] = []
        self._region_names = {r.name for r in config.regions}
        self._service_names = {s.name for s in config.services}
        self._base_topology = config.topology()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # --- reads -----------------------------------------------------------

    def weight(self, region: str, service: str) -> float:
        return self.weights.get((region, service), 1.0)

    def batch_share(self, region: str) -> float:
        """Share of a region's slots taken by its running batch jobs (capped below 1)."""
        share = sum(
            j.slot_share
            for j in self.config.batch_jobs
            if j.region == region and self.batch_running[j.name]
        )
        return min(share, 0.9)

    def power_share(self, region: str) -> float:
        """Share of a region's serving capacity in buildings that have power."""
        cfg = self.config.region(region)
        return sum(cfg.building_share(b) for b in cfg.buildings if b not in self.unpowered)

    def dark(self, region: str) -> bool:
        """True when none of the region's buildings has power: it serves nothing."""
        return region in self._dark

    def building_region(self, building: str) -> str:
        """The region of ``building``; a 404 naming the field when there is no such building."""
        region = self._building_region.get(building)
        if region is None:
            raise not_found(
                f"unknown building {building!r}; one of {sorted(self._building_region)}",
                "building",
            )
        return region

    def set_power(self, building: str, on: bool) -> str:
        """Cut or restore a building's power (a lab fault, not audited); returns its region."""
        region = self.building_region(building)
        if on:
            self.unpowered.discard(building)
        else:
            self.unpowered.add(building)
        self._dark = {r.name for r in self.config.regions if self.power_share(r.name) <= 1e-9}
        for listener in self._listeners:
            listener("power", {"building": building, "region": region, "on": on})
        return region

    def power_answer(self, building: str, on: bool, training: dict[str, Any]) -> dict[str, Any]:
        """What ``/lab/buildings/<b>/power-loss|restore`` answers, ``training`` being the
        GPU hosts' fault record."""
        region = self.building_region(building)
        return {
            "building": building,
            "region": region,
            "powered": on,
            "power_share": self.power_share(region),
            "training": training,
        }

    def topology(self) -> Topology:
        base = self._base_topology
        return base.model_copy(
            update={
                # A building without power takes its share of the region's capacity with it:
                # a drain's capacity check must not count on it in a receiving region.
                "regions": [
                    r.model_copy(
                        update={
                            "capacity_rps": {
                                s: c * self.power_share(r.name) for s, c in r.capacity_rps.items()
                            }
                        }
                    )
                    if self.unpowered
                    else r
                    for r in base.regions
                ],
                "buildings": [
                    b.model_copy(update={"powered": b.name not in self.unpowered})
                    for b in base.buildings
                ],
                "shards": [
                    s.model_copy(update={"primary": self.shard_primary[s.id]}) for s in base.shards
                ],
                "batch_jobs": [
                    BatchJob(name=j.name, region=j.region, running=self.batch_running[j.name])
                    for j in base.batch_jobs
                ],
                "service_weights": {f"{r}/{s}": w for (r, s), w in sorted(self.weights.items())},
            }
        )

    # --- mutations -------------------------------------------------------

    def _mutate(
        self,
        key: str,
        kind: str,
        request: dict[str, Any],
        apply: Callable[[int], tuple[dict[str, Any], dict[str, Any], dict[str, str]]],
    ) -> Mutated:
        stored = self.ledger.replay(key, kind, request)
        if stored is not None:
            return Mutated(stored.body, stored.headers, replayed=True)
        body, summary, headers = apply(self.ledger.next_seq())
        self.ledger.record(key, kind, request, body, summary=summary, headers=headers)
        for listener in self._listeners:
            listener(kind, request)
        return Mutated(body, headers, replayed=False)

    def mutate(
        self,
        key: str,
        kind: str,
        request: dict[str, Any],
        apply: Callable[[int], tuple[dict[str, Any], dict[str, Any], dict[str, str]]],
    ) -> Mutated:
        """Apply ``apply`` once per ``key`` and log it: for mutations defined elsewhere."""
        return self._mutate(key, kind, request, apply)

    def write_routing(
        self, write: RoutingWrite, *, if_match: int, key: str, include_buckets: bool
    ) -> Mutated:
        request = {"if_match": if_match, **write.model_dump(mode="json")}

        def apply(_seq: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
            if if_match != self.routing.version:
                raise conflict(
                    f"routing is at version {self.routing.version}, not {if_match}", "If-Match"
                )
            self.routing.apply(write)
            table = self.routing.table(include_buckets=include_buckets)
            summary = {"version": table.version}
            return table.model_dump(mode="json"), summary, {"ETag": str(table.version)}

        return self._mutate(key, "routing", request, apply)

    def set_service_weight(self, change: ServiceWeightChange, *, key: str) -> Mutated:
        self._known_region("region", change.region)
        if change.service not in self._service_names:
            raise invalid("service", f"unknown service {change.service!r}")

        def apply(seq: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
            before = self.weight(change.region, change.service)
            self.weights[(change.region, change.service)] = change.weight
            detail = {
                "region": change.region,
                "service": change.service,
                "weight": change.weight,
                "previous": before,
            }
            return self._result(key, seq, "service-weight", detail)

        return self._mutate(key, "service-weight", change.model_dump(mode="json"), apply)

    def move_shards(self, move: ShardMove, *, key: str) -> Mutated:
        self._known_region("to_region", move.to_region)
        for shard in move.shards:
            if shard not in self.shard_primary:
                raise invalid("shards", f"unknown shard {shard!r}")

        def apply(seq: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
            previous = {s: self.shard_primary[s] for s in move.shards}
            for shard in move.shards:
                self.shard_primary[shard] = move.to_region
            moved = sorted(s for s, r in previous.items() if r != move.to_region)
            detail = {"to_region": move.to_region, "moved": moved, "previous": previous}
            return self._result(key, seq, "shard-move", detail)

        return self._mutate(key, "shard-move", move.model_dump(mode="json"), apply)

    def batch_job(self, action: BatchJobAction, *, key: str) -> Mutated:
        if action.job not in self.batch_running:
            raise invalid("job", f"unknown batch job {action.job!r}")

        def apply(seq: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
            was = self.batch_running[action.job]
            self.batch_running[action.job] = action.action == "start"
            detail = {"job": action.job, "running": self.batch_running[action.job], "was": was}
            return self._result(key, seq, "batch-job", detail)

        return self._mutate(key, "batch-job", action.model_dump(mode="json"), apply)

    def change_config(self, change: ConfigChange, *, key: str) -> Mutated:
        def apply(seq: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
            rev, _ = self.configs.get(change.path, (0, ""))
            if change.expected_rev is not None and change.expected_rev != rev:
                raise conflict(
                    f"{change.path} is at revision {rev}, not {change.expected_rev}",
                    "expected_rev",
                )
            self.configs[change.path] = (rev + 1, change.content)
            detail = {"path": change.path, "rev": rev + 1, "previous_rev": rev}
            return self._result(key, seq, "config", detail)

        return self._mutate(key, "config", change.model_dump(mode="json"), apply)

    def set_faults(self, faults: LabFaults) -> None:
        for region in sorted(faults.regions_named()):
            self._known_region("region_outage/added_latency_ms/error_rate", region)
        self.faults = faults

    # --- helpers ---------------------------------------------------------

    def _known_region(self, field: str, region: str) -> None:
        if region not in self._region_names:
            raise invalid(field, f"unknown region {region!r}")

    @staticmethod
    def _result(
        key: str, seq: int, kind: str, detail: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
        result = MutationResult(idempotency_key=key, audit_seq=seq, kind=kind, detail=detail)
        body = result.model_dump(mode="json")
        return body, body, {}
