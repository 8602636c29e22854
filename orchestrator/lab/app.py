"""The lab's FastAPI app: the fleet API (v1), the data plane, and lab-only controls.

``create_app`` wires a :class:`~orchestrator.lab.runtime.LabRuntime` to HTTP.
The ``/lab`` routes exist only when faults are enabled, so a lab started
without ``--faults`` cannot be hurt by accident (404, not 403).
"""

from __future__ import annotations

import asyncio
import hmac
import random
import re
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from orchestrator.lab.config import LabConfig
from orchestrator.lab.errors import ApiError, invalid, not_found, rejected
from orchestrator.lab.faults import LabFaults
from orchestrator.lab.prometheus import CONTENT_TYPE as METRICS_CONTENT_TYPE
from orchestrator.lab.prometheus import render_metrics
from orchestrator.lab.runtime import LabRuntime, Mode
from orchestrator.lab.training.routes import mount_training
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
from orchestrator.policy.rebalance.buckets import bucket_of

__all__ = ["create_app"]

_VALUE_ERROR_FIELD = re.compile(r"^(?:Value error, )?([A-Za-z0-9_.\-/]+): ")
_ETAG = re.compile(r'^(?:W/)?"?(\d+)"?$')

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key")]


def _require_key(key: str | None) -> str:
    if not key or not key.strip():
        raise rejected(400, "every mutation needs an Idempotency-Key header", "Idempotency-Key")
    if len(key) > 200:
        raise invalid("Idempotency-Key", "at most 200 characters")
    return key


def _validation_error(exc: RequestValidationError) -> ApiError:
    errors = exc.errors()
    if not errors:
        return invalid("body", "invalid request")
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "header", "path")]
    message = str(first.get("msg", "invalid"))
    field = ".".join(loc) or None
    match = _VALUE_ERROR_FIELD.match(message)
    if match and field is None:
        field = match.group(1)
    return invalid(field or "body", message)


def create_app(
    config: LabConfig,
    *,
    mode: Mode = "live",
    faults: bool = False,
    token: str | None = None,
    seed: int | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    runtime = LabRuntime(config, mode, seed=seed, clock=clock)
    rng = random.Random(seed)
    app = FastAPI(
        title="Orchestrator lab fleet",
        version="1",
        description="The fleet contract (v1) served by a local lab with real or modelled traffic.",
    )
    app.state.runtime = runtime

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        error = _validation_error(exc)
        return JSONResponse(error.body(), status_code=error.status)

    async def check_token(authorization: Annotated[str | None, Header()] = None) -> None:
        if token is None:
            return
        supplied = (authorization or "").encode()
        if not hmac.compare_digest(supplied, f"Bearer {token}".encode()):
            raise ApiError(401, "FleetUnauthorized", "missing or wrong bearer token")

    async def api_faults() -> None:
        current = runtime.state.faults
        if faults and current.any_api_fault:
            roll = rng.random()
            if roll < current.api_error_rate:
                raise ApiError(500, "FleetUnavailable", "injected fleet-API fault")
            if roll < current.api_error_rate + current.api_hang_rate:
                # The call is still served after the hang: a client that timed
                # out does not know whether its mutation applied (as in life).
                await asyncio.sleep(current.api_hang_s)

    v1 = APIRouter(
        prefix="/v1", dependencies=[Depends(check_token), Depends(api_faults)], tags=["fleet"]
    )
    state = runtime.state

    @v1.get("/topology", response_model=Topology)
    async def topology() -> Topology:
        return state.topology()

    @v1.get("/routing", response_model=RoutingTable)
    async def routing(
        buckets: Annotated[
            bool | None, Query(description="include bucket lists (default: small tables only)")
        ] = None,
    ) -> Response:
        body = runtime.routing_json(runtime.include_buckets(buckets))
        return Response(
            body, media_type="application/json", headers={"ETag": str(state.routing.version)}
        )

    @v1.put("/routing", response_model=RoutingTable)
    async def write_routing(
        write: RoutingWrite,
        idempotency_key: IdempotencyKey = None,
        if_match: Annotated[str | None, Header(alias="If-Match")] = None,
        buckets: bool | None = None,
    ) -> JSONResponse:
        key = _require_key(idempotency_key)
        if if_match is None:
            raise rejected(428, "routing writes need If-Match: <version>", "If-Match")
        match = _ETAG.match(if_match.strip())
        if match is None:
            raise invalid("If-Match", f"not a routing version: {if_match!r}")
        result = state.write_routing(
            write,
            if_match=int(match.group(1)),
            key=key,
            include_buckets=runtime.include_buckets(buckets),
        )
        return result.response()

    @v1.get("/health", response_model=HealthReport)
    async def health(
        window_s: Annotated[float | None, Query(gt=0)] = None,
    ) -> HealthReport:
        return runtime.health(window_s)

    @v1.post("/actions/service-weight", response_model=MutationResult)
    async def service_weight(
        change: ServiceWeightChange, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        key = _require_key(idempotency_key)
        return state.set_service_weight(change, key=key).response()

    @v1.post("/actions/shard-move", response_model=MutationResult)
    async def shard_move(move: ShardMove, idempotency_key: IdempotencyKey = None) -> JSONResponse:
        key = _require_key(idempotency_key)
        return state.move_shards(move, key=key).response()

    @v1.post("/actions/batch-job", response_model=MutationResult)
    async def batch_job(
        action: BatchJobAction, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        key = _require_key(idempotency_key)
        return state.batch_job(action, key=key).response()

    @v1.post("/actions/config", response_model=MutationResult)
    async def change_config(
        change: ConfigChange, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        key = _require_key(idempotency_key)
        return state.change_config(change, key=key).response()

    @v1.get("/audit", response_model=list[AuditEntry])
    async def audit(since_seq: Annotated[int, Query(ge=0)] = 0) -> list[AuditEntry]:
        return state.ledger.since(since_seq)

    app.include_router(v1)
    mount_training(
        app,
        state,
        runtime.training,
        faults=faults,
        v1_dependencies=[Depends(check_token), Depends(api_faults)],
        lab_dependencies=[Depends(check_token)],
        power=runtime.set_power,
    )

    @app.get("/healthz", tags=["lab"])
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "mode": runtime.mode, "faults": faults}

    @app.get("/metrics", tags=["lab"], response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        text = render_metrics(
            runtime.health(None),
            runtime.extra_metrics(),
            runtime.live.totals() if runtime.live is not None else (),
        )
        return PlainTextResponse(text, media_type=METRICS_CONTENT_TYPE)

    front = {s.name for s in config.front_services}
    pops = {p.name for p in config.pops}

    @app.get("/edge/{pop}", tags=["data plane"])
    async def edge(
        pop: str,
        user: Annotated[str, Query(min_length=1, max_length=200)],
        service: str = "web",
    ) -> JSONResponse:
        if pop not in pops:
            raise not_found(f"unknown PoP {pop!r}", "pop")
        if service not in front:
            raise invalid("service", f"not an edge service: {service!r}; one of {sorted(front)}")
        if runtime.live is None:
            # Model mode has no data-plane physics: the edge only answers the route.
            bucket = bucket_of(user, config.bucket_count)
            region = state.routing.region_of(pop, bucket)
            return JSONResponse({"region": region, "bucket": bucket, "service": service})
        answer = await runtime.live.serve_edge(pop, user, service)
        return JSONResponse(answer.body, status_code=answer.status)

    if faults:
        _mount_lab_routes(app, runtime, check_token)
    return app


def _mount_lab_routes(app: FastAPI, runtime: LabRuntime, check_token: Any) -> None:
    # The lab controls need the token too, but never suffer the injected API
    # faults: a test must always be able to turn them off.
    lab = APIRouter(prefix="/lab", dependencies=[Depends(check_token)], tags=["lab faults"])
    state = runtime.state

    @lab.get("/faults", response_model=LabFaults)
    async def get_faults() -> LabFaults:
        return state.faults

    @lab.post("/faults", response_model=LabFaults)
    async def set_faults(new: LabFaults) -> LabFaults:
        state.set_faults(new)
        return state.faults

    @lab.delete("/faults", response_model=LabFaults)
    async def clear_faults() -> LabFaults:
        state.set_faults(LabFaults())
        return state.faults

    def power(building: str, on: bool) -> dict[str, Any]:
        return state.power_answer(building, on, runtime.set_power(building, on).as_json())

    @lab.post("/buildings/{building}/power-loss")
    async def power_loss(building: str) -> dict[str, Any]:
        return power(building, False)

    @lab.post("/buildings/{building}/power-restore")
    async def power_restore(building: str) -> dict[str, Any]:
        return power(building, True)

    @lab.get("/truth")
    async def truth() -> dict[str, Any]:
        return runtime.truth()

    app.include_router(lab)
