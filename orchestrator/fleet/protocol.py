"""The port through which the orchestrator changes the world.

Anything that implements :class:`Fleet` can be driven: the HTTP client for the
versioned JSON API (which the lab serves, and which a user implements over
Envoy weights, DNS, Kubernetes or Slurm), or another adapter.

Every mutation takes an ``idempotency_key``: the same key applies once and
returns the first answer, so a retried activity never applies a change twice.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from orchestrator.contracts.training import (
    QuarantineRequest,
    StartJobRequest,
    TrainingCheckpoints,
    TrainingCluster,
)
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

__all__ = ["Fleet"]


@runtime_checkable
class Fleet(Protocol):
    async def topology(self) -> Topology: ...

    async def routing(self) -> RoutingTable: ...

    async def write_routing(
        self, write: RoutingWrite, *, if_match: int, idempotency_key: str
    ) -> RoutingTable:
        """Replace the routing table if its version is still ``if_match``.

        Raises :class:`~orchestrator.exceptions.VersionConflict` otherwise.
        """
        ...

    async def health(self, window_s: float | None = None) -> HealthReport: ...

    async def set_service_weight(
        self, change: ServiceWeightChange, *, idempotency_key: str
    ) -> MutationResult: ...

    async def move_shards(self, move: ShardMove, *, idempotency_key: str) -> MutationResult: ...

    async def batch_job(
        self, action: BatchJobAction, *, idempotency_key: str
    ) -> MutationResult: ...

    async def change_config(
        self, change: ConfigChange, *, idempotency_key: str
    ) -> MutationResult: ...

    async def audit(self, since_seq: int = 0) -> list[AuditEntry]: ...

    # --- training: hosts with GPU health, jobs, checkpoints with digests ------------

    async def training_cluster(self) -> TrainingCluster: ...

    async def training_checkpoints(self, job: str) -> TrainingCheckpoints: ...

    async def stop_training_job(
        self, job: str, *, idempotency_key: str, checkpoint: bool = False
    ) -> MutationResult:
        """Stop ``job``. With ``checkpoint`` (a planned move) it first writes a checkpoint
        at its current step; ``detail["checkpoint_step"]`` is the step to resume from."""
        ...

    async def start_training_job(
        self, request: StartJobRequest, *, idempotency_key: str
    ) -> MutationResult:
        """Start ``request.job`` on ``request.hosts`` from ``request.checkpoint_step``."""
        ...

    async def quarantine_host(
        self, request: QuarantineRequest, *, idempotency_key: str
    ) -> MutationResult: ...

    async def release_host(self, host: str, *, idempotency_key: str) -> MutationResult: ...

    async def aclose(self) -> None: ...
