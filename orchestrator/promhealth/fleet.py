"""Use Prometheus as the health source of a fleet whose other calls stay as they are.

A user whose traffic is shifted through the fleet API but whose metrics live in
Prometheus wraps the fleet: ``with_health_source(fleet, PrometheusHealth(cfg))``.
Every mutation and read other than ``health`` goes to the wrapped fleet unchanged.
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.contracts.training import (
    QuarantineRequest,
    StartJobRequest,
    TrainingCheckpoints,
    TrainingCluster,
)
from orchestrator.fleet.protocol import Fleet
from orchestrator.models import (
    AuditEntry,
    BatchJobAction,
    ConfigChange,
    HealthReport,
    MutationResult,
    RoutingTable,
    RoutingWrite,
    ServiceWeightChange,
    ShardMove,
    Topology,
)

__all__ = ["HealthSource", "with_health_source"]


class HealthSource(Protocol):
    async def health(self, window_s: float | None = None) -> HealthReport: ...

    async def aclose(self) -> None: ...


class _HealthFromSource:
    def __init__(self, fleet: Fleet, source: HealthSource) -> None:
        self._fleet = fleet
        self._source = source

    async def health(self, window_s: float | None = None) -> HealthReport:
        return await self._source.health(window_s)

    async def topology(self) -> Topology:
        return await self._fleet.topology()

    async def routing(self) -> RoutingTable:
        return await self._fleet.routing()

    async def write_routing(
        self, write: RoutingWrite, *, if_match: int, idempotency_key: str
    ) -> RoutingTable:
        return await self._fleet.write_routing(
            write, if_match=if_match, idempotency_key=idempotency_key
        )

    async def set_service_weight(
        self, change: ServiceWeightChange, *, idempotency_key: str
    ) -> MutationResult:
        return await self._fleet.set_service_weight(change, idempotency_key=idempotency_key)

    async def move_shards(self, move: ShardMove, *, idempotency_key: str) -> MutationResult:
        return await self._fleet.move_shards(move, idempotency_key=idempotency_key)

    async def batch_job(self, action: BatchJobAction, *, idempotency_key: str) -> MutationResult:
        return await self._fleet.batch_job(action, idempotency_key=idempotency_key)

    async def change_config(self, change: ConfigChange, *, idempotency_key: str) -> MutationResult:
        return await self._fleet.change_config(change, idempotency_key=idempotency_key)

    async def audit(self, since_seq: int = 0) -> list[AuditEntry]:
        return await self._fleet.audit(since_seq)

    async def training_cluster(self) -> TrainingCluster:
        return await self._fleet.training_cluster()

    async def training_checkpoints(self, job: str) -> TrainingCheckpoints:
        return await self._fleet.training_checkpoints(job)

    async def stop_training_job(
        self, job: str, *, idempotency_key: str, checkpoint: bool = False
    ) -> MutationResult:
        return await self._fleet.stop_training_job(
            job, idempotency_key=idempotency_key, checkpoint=checkpoint
        )

    async def start_training_job(
        self, request: StartJobRequest, *, idempotency_key: str
    ) -> MutationResult:
        return await self._fleet.start_training_job(request, idempotency_key=idempotency_key)

    async def quarantine_host(
        self, request: QuarantineRequest, *, idempotency_key: str
    ) -> MutationResult:
        return await self._fleet.quarantine_host(request, idempotency_key=idempotency_key)

    async def release_host(self, host: str, *, idempotency_key: str) -> MutationResult:
        return await self._fleet.release_host(host, idempotency_key=idempotency_key)

    async def aclose(self) -> None:
        try:
            await self._source.aclose()
        finally:
            await self._fleet.aclose()


def with_health_source(fleet: Fleet, source: HealthSource) -> Fleet:
    """``fleet`` with its health answered by ``source``."""
    return _HealthFromSource(fleet, source)
