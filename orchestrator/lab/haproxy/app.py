"""The lab's fleet API when HAProxy carries the traffic: HAProxy's truth, nothing faked.

Routing reads and writes, topology and the front services' weights go through the HAProxy
adapter (:class:`~orchestrator.fleet.haproxy.HAProxyFleet`) to the live map and servers.
Internal pools, kv primaries, batch jobs and config writes are the lab's own state beside
the proxy (:mod:`.beside`). Health combines HAProxy's own counters (requests and refusals
per region and PoP, sampled every second: :mod:`.stats`) with each region backend's view
(latency percentiles, pool utilization). Training jobs are the lab's own GPU cluster, as
in the Python lab (its fleet contract under ``/v1``). With ``faults``, ``/lab`` injects the
training faults and cuts or restores a building's power (its GPU hosts and its share of its
region's HAProxy connections). What this mode does not carry over yet (the audit log, the
traffic faults) is refused with ``FleetRejected`` naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from orchestrator.exceptions import (
    FleetError,
    FleetNotFound,
    FleetUnauthorized,
    FleetUnavailable,
    InvalidRequest,
    VersionConflict,
)
from orchestrator.lab.errors import ApiError, invalid, rejected
from orchestrator.lab.haproxy.beside import Beside
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.lab.haproxy.stats import Counters, Counts
from orchestrator.lab.training.cluster import LabTrainingCluster
from orchestrator.lab.training.faults import FaultRecord
from orchestrator.lab.training.routes import mount_training
from orchestrator.logging import get_logger
from orchestrator.models import (
    BatchJobAction,
    ConfigChange,
    HealthReport,
    MutationResult,
    PopHealth,
    RegionHealth,
    RoutingTable,
    RoutingWrite,
    ServiceHealth,
    ServiceWeightChange,
    ShardMove,
    Topology,
)

__all__ = ["create_haproxy_app"]

_ETAG = re.compile(r'^(?:W/)?"?(\d+)"?$')
#: how often HAProxy's counters are sampled for windowed health
SAMPLE_EVERY_S = 1.0
#: how long the lab's shutdown waits for the sampler to end
SAMPLER_STOP_S = 5.0
#: a region backend that does not answer its health read in this long is reported missing
BACKEND_TIMEOUT_S = 1.0

log = get_logger(__name__)

NOT_CARRIED = {
    "audit": "the audit log (HAProxy keeps none; writes compare live state instead)",
}


def _api_error(exc: FleetError) -> ApiError:
    """The adapter's exception as the contract's answer (the client maps it back)."""
    if isinstance(exc, VersionConflict):
        return ApiError(409, "VersionConflict", str(exc))
    if isinstance(exc, InvalidRequest):
        return ApiError(422, "InvalidRequest", str(exc), exc.reason or None)
    if isinstance(exc, FleetNotFound):
        return ApiError(404, "FleetNotFound", str(exc))
    if isinstance(exc, FleetUnauthorized):
        return ApiError(403, "FleetUnauthorized", str(exc))
    if isinstance(exc, FleetUnavailable):
        return ApiError(503, "FleetUnavailable", str(exc))
    # FleetRejected, ProxyStateLost: not retryable; 400 so the client raises FleetRejected
    return ApiError(400, type(exc).__name__, str(exc))


def _key(key: str | None) -> str:
    if not key or not key.strip():
        raise rejected(400, "every mutation needs an Idempotency-Key header", "Idempotency-Key")
    return key


def create_haproxy_app(
    plane: HAProxyDataPlane, *, token: str | None = None, faults: bool = False
) -> FastAPI:
    """``faults``: the lab's training faults and buildings' power under ``/lab``."""
    config = plane.config
    front = [s.name for s in config.front_services]
    pops = [p.name for p in config.pops]
    counters = Counters(config.metrics.retention_s, front, pops)
    beside = Beside(config, plane.layout.beside_path)
    buildings = [(r.name, b) for r in config.regions for b in r.buildings]
    training = LabTrainingCluster(config.training, buildings, "live")

    async def sample() -> None:
        text = await plane.fleet().runtime.command("show stat")
        counters.add(time.monotonic(), text)

    stopping = asyncio.Event()

    async def sampler() -> None:
        # stops on the event, not only on cancel: a cancel that lands as a runtime command
        # completes can be lost (Python 3.11's wait_for), and the lab then never stopped
        while not stopping.is_set():
            with contextlib.suppress(FleetError):
                await sample()
                # a building's power cut by a training fault reaches HAProxy here
                await beside.apply(plane.fleet())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAMPLE_EVERY_S):
                    await stopping.wait()

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # batch jobs the config starts running take their share from the first request
        await beside.apply(plane.fleet(), force=True)
        task = asyncio.create_task(sampler())
        try:
            yield
        finally:
            stopping.set()
            training.close()  # no trainer process outlives its lab
            task.cancel()
            # asyncio.wait neither raises the task's CancelledError nor swallows ours
            await asyncio.wait({task}, timeout=SAMPLER_STOP_S)

    app = FastAPI(
        title="Orchestrator lab fleet (HAProxy data plane)", version="1", lifespan=lifespan
    )
    app.state.plane = plane

    @app.exception_handler(ApiError)
    async def _error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(FleetError)
    async def _fleet_error(_request: Request, exc: FleetError) -> JSONResponse:
        error = _api_error(exc)
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        error = invalid(where, str(first.get("msg", "invalid request")))
        return JSONResponse(error.body(), status_code=error.status)

    async def check_token(authorization: Annotated[str | None, Header()] = None) -> None:
        if token is None:
            return
        if not hmac.compare_digest((authorization or "").encode(), f"Bearer {token}".encode()):
            raise ApiError(401, "FleetUnauthorized", "missing or wrong bearer token")

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(check_token)], tags=["fleet"])

    @v1.get("/topology", response_model=Topology)
    async def topology() -> Topology:
        return beside.topology(await plane.fleet().topology())

    @v1.get("/routing", response_model=RoutingTable)
    async def routing(buckets: bool | None = None) -> JSONResponse:
        return _routing_response(await plane.fleet().routing(), buckets)

    @v1.put("/routing", response_model=RoutingTable)
    async def write_routing(
        write: RoutingWrite,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
        if_match: Annotated[str | None, Header(alias="If-Match")] = None,
        buckets: bool | None = None,
    ) -> JSONResponse:
        key = _key(idempotency_key)
        if if_match is None:
            raise rejected(428, "routing writes need If-Match: <version>", "If-Match")
        match = _ETAG.match(if_match.strip())
        if match is None:
            raise invalid("If-Match", f"not a routing version: {if_match!r}")
        table = await plane.fleet().write_routing(
            write, if_match=int(match.group(1)), idempotency_key=key
        )
        return _routing_response(table, buckets)

    @v1.post("/actions/service-weight", response_model=MutationResult)
    async def service_weight(
        change: ServiceWeightChange,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    ) -> MutationResult | JSONResponse:
        key = _key(idempotency_key)
        if beside.keeps(change.service):
            return beside.set_service_weight(change, key)
        return await plane.fleet().set_service_weight(change, idempotency_key=key)

    @v1.post("/actions/shard-move", response_model=MutationResult)
    async def shard_move(
        move: ShardMove,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    ) -> JSONResponse:
        return await beside.move_shards(move, _key(idempotency_key), plane.fleet())

    @v1.post("/actions/batch-job", response_model=MutationResult)
    async def batch_job(
        action: BatchJobAction,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    ) -> JSONResponse:
        return await beside.batch_job(action, _key(idempotency_key), plane.fleet())

    @v1.post("/actions/config", response_model=MutationResult)
    async def change_config(
        change: ConfigChange,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    ) -> JSONResponse:
        return beside.change_config(change, _key(idempotency_key))

    @v1.get("/health", response_model=HealthReport)
    async def health(window_s: Annotated[float | None, Query(gt=0)] = None) -> HealthReport:
        window = window_s or config.metrics.window_s
        if window > config.metrics.retention_s:
            raise invalid("window_s", f"must be within (0, {config.metrics.retention_s:g}] seconds")
        await sample()  # the newest counters, not up to a second old
        return await _health(plane, counters, window)

    for path, what in NOT_CARRIED.items():
        _refuse(v1, path, what)
    app.include_router(v1)

    def power(building: str, on: bool) -> FaultRecord:
        """A building's power: its GPU hosts and its share of its region's connections
        (HAProxy follows within a sample, :func:`Beside.apply`)."""
        beside.set_power(building, on)  # refuses (404, a dark region) before anything moves
        return training.faults.power(building, on)

    mount_training(
        app,
        beside.state,
        training,
        faults=faults,
        v1_dependencies=[Depends(check_token)],
        lab_dependencies=[Depends(check_token)],
        power=power,
    )
    if faults:
        _mount_power(app, beside, plane, power, check_token)

    @app.get("/healthz", tags=["lab"])
    async def healthz() -> dict[str, Any]:
        return {
            "ok": True,
            "mode": "live",
            "faults": faults,
            "data_plane": "haproxy",
            "pops": {p: plane.pop_url(p) for p in pops},
            "haproxy_metrics": plane.metrics_url,
            # what a Prometheus scrapes for ORCHESTRATOR_HEALTH=prometheus with
            # orchestrator/promhealth/haproxy-lab-queries.yaml (every target serves /metrics)
            "prometheus": {
                "targets": plane.layout.scrape_targets(),
                "config": str(plane.layout.prometheus_path),
            },
            "pids": {
                "haproxy": plane.haproxy.pid if plane.haproxy else None,
                **{r: p.pid for r, p in plane.backends.items()},
            },
        }

    @app.api_route("/edge/{pop}", methods=["GET"], tags=["data plane"])
    async def edge(pop: str) -> JSONResponse:
        # Not proxied here: a second hop would put this process back in the data path.
        if pop not in plane.layout.pop_ports:
            raise ApiError(404, "FleetNotFound", f"unknown PoP {pop!r}", "pop")
        raise ApiError(
            421,
            "FleetRejected",
            f"the data plane is HAProxy: send {pop}'s traffic to {plane.pop_url(pop)}/edge/{pop}",
            "pop",
        )

    return app


def _mount_power(
    app: FastAPI,
    beside: Beside,
    plane: HAProxyDataPlane,
    power: Callable[[str, bool], FaultRecord],
    check_token: Callable[..., Awaitable[None]],
) -> None:
    """``/lab/buildings/<b>/power-loss|restore`` as the Python lab answers them; its
    traffic faults are refused by name."""
    lab = APIRouter(prefix="/lab", dependencies=[Depends(check_token)], tags=["lab faults"])

    async def switch(building: str, on: bool) -> dict[str, Any]:
        record = power(building, on)
        await beside.apply(plane.fleet())
        return beside.state.power_answer(building, on, record.as_json())

    @lab.post("/buildings/{building}/power-loss")
    async def power_loss(building: str) -> dict[str, Any]:
        return await switch(building, False)

    @lab.post("/buildings/{building}/power-restore")
    async def power_restore(building: str) -> dict[str, Any]:
        return await switch(building, True)

    @lab.api_route("/faults", methods=["GET", "POST", "DELETE"], name="refused traffic faults")
    @lab.get("/truth", name="refused truth")
    async def traffic_faults() -> None:
        raise rejected(
            400,
            "not carried over to --data-plane haproxy yet: traffic faults (region outage, "
            "added latency, error rate) and their truth; run the lab with --data-plane "
            "python for them",
            "faults",
        )

    app.include_router(lab)


def _refuse(router: APIRouter, path: str, what: str) -> None:
    async def refuse() -> None:
        raise rejected(
            400,
            f"not carried over to --data-plane haproxy yet: {what}; run the lab without "
            "--data-plane haproxy for it",
            path,
        )

    method = "get" if path == "audit" else "post"
    getattr(router, method)(f"/{path}", name=f"refused {path}")(refuse)


async def _health(plane: HAProxyDataPlane, counters: Counters, window: float) -> HealthReport:
    span, regions = counters.regions.over(window)
    pop_span, by_pop = counters.pops.over(window)
    pool_span, pools = counters.pools.over(window)

    async def backend(region: str) -> dict[str, Any] | None:
        try:
            async with httpx.AsyncClient(timeout=BACKEND_TIMEOUT_S) as client:
                answer = await client.get(
                    f"{plane.region_url(region)}/lab/health", params={"window_s": window}
                )
            return answer.json() if answer.status_code == 200 else None
        except httpx.HTTPError:
            return None  # a stalled backend: its latency is missing, never made up

    views = await asyncio.gather(*(backend(r.name) for r in plane.config.regions))
    region_health: list[RegionHealth] = []
    services: list[ServiceHealth] = []
    for region, view in zip(plane.config.regions, views, strict=True):
        counts = regions.get(region.name, Counts())
        fields: dict[str, Any] = {}
        if view is not None:
            own = RegionHealth.model_validate(view["region"])
            fields |= {"p50_ms": own.p50_ms, "p99_ms": own.p99_ms}
            services += [ServiceHealth.model_validate(s) for s in view["services"]]
            utils = [
                s.utilization
                for s in services
                if s.region == region.name and s.utilization is not None
            ]
            fields["utilization"] = max(utils) if utils else None
        if span > 0 and counts.requests:
            fields |= {
                "rps": counts.requests / span,
                "error_rate": counts.failures / counts.requests,
                "samples": counts.requests,
            }
        region_health.append(RegionHealth(region=region.name, **fields))
    pop_health = []
    for pop in plane.config.pops:
        counts = by_pop.get(pop.name, Counts())
        if pop_span > 0 and counts.requests:
            pop_health.append(
                PopHealth(
                    pop=pop.name,
                    rps=counts.requests / pop_span,
                    error_rate=counts.failures / counts.requests,
                    samples=counts.requests,
                )
            )
        else:
            pop_health.append(PopHealth(pop=pop.name))
    return HealthReport(
        window_s=window,
        observed_at=datetime.now(UTC),
        regions=region_health,
        services=_with_refusals(services, pools, pool_span),
        pops=pop_health,
    )


def _with_refusals(
    services: list[ServiceHealth], pools: dict[str, Counts], span: float
) -> list[ServiceHealth]:
    """A front service's requests, error rate and rps from HAProxy's counters of its server,
    which count the requests HAProxy refused itself (the backend never saw them); latency
    and utilization stay the backend's. Dependencies (not behind HAProxy) stay as served."""
    by_key = {(s.region, s.service): s for s in services}
    for key, counts in pools.items():
        service, _, region = key.partition("/")
        if span <= 0 or not counts.requests:
            continue
        entry = by_key.get((region, service)) or ServiceHealth(region=region, service=service)
        by_key[(region, service)] = entry.model_copy(
            update={
                "rps": counts.requests / span,
                "error_rate": counts.failures / counts.requests,
                "samples": counts.requests,
            }
        )
    return list(by_key.values())


def _routing_response(table: RoutingTable, buckets: bool | None) -> JSONResponse:
    """The table (without its buckets when asked) with its version as the ETag."""
    if buckets is False:
        table = table.model_copy(update={"buckets": None})
    return JSONResponse(table.model_dump(mode="json"), headers={"ETag": str(table.version)})
