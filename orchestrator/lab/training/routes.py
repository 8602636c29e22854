"""HTTP routes of the training cluster: the fleet contract under /v1, faults under /lab.

Mutations (stop, start, quarantine, release) go through the lab's ledger like every
other fleet mutation: one Idempotency-Key applies once and is in the audit log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Header, Query
from fastapi.params import Depends
from fastapi.responses import JSONResponse
from pydantic import Field

from orchestrator.contracts.training import (
    QuarantineRequest,
    ReleaseRequest,
    StartJobRequest,
    StopJobRequest,
    TrainingCheckpoints,
    TrainingCluster,
)
from orchestrator.lab.errors import invalid, rejected
from orchestrator.lab.state import FleetState
from orchestrator.lab.training.cluster import LabTrainingCluster
from orchestrator.lab.training.faults import FaultRecord
from orchestrator.models import MutationResult, StrictModel

__all__ = ["FaultRequest", "mount_training"]

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key")]


class FaultRequest(StrictModel):
    host: str | None = None
    building: str | None = None
    job: str | None = None
    gpu: int = Field(default=0, ge=0)
    #: rank-kill: which rank of a PyTorch job
    rank: int = Field(default=0, ge=0)
    factor: float = Field(default=4.0, gt=0)
    #: corrupt-checkpoint: kill the job too (default)
    crash: bool = True


def _key(key: str | None) -> str:
    if not key or not key.strip():
        raise rejected(400, "every mutation needs an Idempotency-Key header", "Idempotency-Key")
    return key


def _need(value: str | None, field: str) -> str:
    if not value:
        raise invalid(field, "required for this fault")
    return value


def mount_training(
    app: FastAPI,
    state: FleetState,
    cluster: LabTrainingCluster,
    *,
    faults: bool,
    v1_dependencies: Sequence[Depends],
    lab_dependencies: Sequence[Depends],
    power: Callable[[str, bool], FaultRecord] | None = None,
) -> None:
    """``power(building, on)`` cuts or restores a whole building (hosts and traffic share);
    without it a power fault reaches the GPU hosts only."""
    if power is None:
        power = cluster.faults.power

    v1 = APIRouter(prefix="/v1", dependencies=list(v1_dependencies), tags=["training"])

    def mutation(key: str, kind: str, request: dict[str, Any], do: Any) -> JSONResponse:
        def apply(seq: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
            detail = do()
            body = MutationResult(
                idempotency_key=key, audit_seq=seq, kind=kind, detail=detail
            ).model_dump(mode="json")
            return body, body, {}

        return state.mutate(key, kind, request, apply).response()

    @v1.get("/training/cluster", response_model=TrainingCluster)
    async def training_cluster() -> TrainingCluster:
        return cluster.cluster()

    @v1.get("/training/checkpoints", response_model=TrainingCheckpoints)
    async def training_checkpoints(job: Annotated[str, Query(min_length=1)]) -> TrainingCheckpoints:
        return TrainingCheckpoints(job=job, checkpoints=cluster.checkpoints(job))

    @v1.post("/actions/training-stop", response_model=MutationResult)
    async def training_stop(req: StopJobRequest, idempotency_key: IdempotencyKey = None) -> Any:
        cluster.job(req.job)
        return mutation(
            _key(idempotency_key),
            "training-stop",
            req.model_dump(mode="json"),
            lambda: cluster.stop(req.job, checkpoint=req.checkpoint),
        )

    @v1.post("/actions/training-start", response_model=MutationResult)
    async def training_start(req: StartJobRequest, idempotency_key: IdempotencyKey = None) -> Any:
        cluster.job(req.job)
        return mutation(
            _key(idempotency_key),
            "training-start",
            req.model_dump(mode="json"),
            lambda: cluster.start(req),
        )

    @v1.post("/actions/host-quarantine", response_model=MutationResult)
    async def host_quarantine(
        req: QuarantineRequest, idempotency_key: IdempotencyKey = None
    ) -> Any:
        return mutation(
            _key(idempotency_key),
            "host-quarantine",
            req.model_dump(mode="json"),
            lambda: cluster.quarantine_host(req.host, req.reason, req.until),
        )

    @v1.post("/actions/host-release", response_model=MutationResult)
    async def host_release(req: ReleaseRequest, idempotency_key: IdempotencyKey = None) -> Any:
        return mutation(
            _key(idempotency_key),
            "host-release",
            req.model_dump(mode="json"),
            lambda: cluster.release_host(req.host),
        )

    app.include_router(v1)
    if not faults:
        return

    lab = APIRouter(
        prefix="/lab/training", dependencies=list(lab_dependencies), tags=["lab faults"]
    )

    @lab.get("/faults")
    async def fault_log() -> list[dict[str, Any]]:
        return [f.as_json() for f in cluster.faults.log]

    @lab.post("/faults/{kind}")
    async def inject(kind: str, req: FaultRequest) -> dict[str, Any]:
        faults = cluster.faults
        actions = {
            "gpu-error": lambda: faults.gpu_error(_need(req.host, "host"), req.gpu),
            "host-down": lambda: faults.host_down(_need(req.host, "host")),
            "host-up": lambda: faults.host_up(_need(req.host, "host")),
            "power-loss": lambda: power(_need(req.building, "building"), False),
            "power-restore": lambda: power(_need(req.building, "building"), True),
            "hang": lambda: faults.hang(_need(req.job, "job")),
            "rank-kill": lambda: faults.rank_kill(_need(req.job, "job"), req.rank),
            "poison": lambda: faults.poison(_need(req.job, "job")),
            "disk-full": lambda: faults.disk_full(_need(req.job, "job")),
            "straggler": lambda: faults.straggler(_need(req.job, "job"), req.factor),
            "corrupt-checkpoint": lambda: faults.corrupt_checkpoint(
                _need(req.job, "job"), req.crash
            ),
        }
        if kind not in actions:
            raise invalid("kind", f"unknown training fault {kind!r}; one of {sorted(actions)}")
        return actions[kind]().as_json()

    app.include_router(lab)
