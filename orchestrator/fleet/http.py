"""``HttpFleet``: the fleet contract (v1) over JSON/HTTP with httpx.

Every mutation carries an ``Idempotency-Key``; routing writes carry
``If-Match: <version>``. Failures become :mod:`orchestrator.exceptions` with
the HTTP status and the server's reason. Mutations are never retried here: the
caller (a Temporal activity) owns the retry policy and the idempotency key
makes its retries safe. Reads (GET) are retried a few times with a short
jittered backoff on timeouts, transport errors and 5xx: they change nothing,
and an activity making three reads would otherwise fail as a whole whenever
any one of them hit a flaky API, and wait out Temporal's (much longer) backoff.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from orchestrator.contracts.training import (
    QuarantineRequest,
    ReleaseRequest,
    StartJobRequest,
    StopJobRequest,
    TrainingCheckpoints,
    TrainingCluster,
)
from orchestrator.exceptions import (
    FleetError,
    FleetNotFound,
    FleetRejected,
    FleetUnauthorized,
    FleetUnavailable,
    InvalidRequest,
    VersionConflict,
)
from orchestrator.logging import redact
from orchestrator.models import (
    API_VERSION,
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

__all__ = ["DEFAULT_TIMEOUT_S", "HttpFleet"]

DEFAULT_TIMEOUT_S = 10.0
#: tries per read (GET) before a FleetUnavailable reaches the caller
DEFAULT_READ_ATTEMPTS = 3

M = TypeVar("M", bound=BaseModel)
_AUDIT = TypeAdapter(list[AuditEntry])


class HttpFleet:
    """A :class:`~orchestrator.fleet.protocol.Fleet` speaking the v1 HTTP API.

    ``verify`` is True (system CAs), False (only for a lab on localhost), or a
    CA bundle path. ``timeout`` bounds connect, read, write and pool waits.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        verify: bool | str = True,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        read_attempts: int = DEFAULT_READ_ATTEMPTS,
    ) -> None:
        if read_attempts < 1:
            raise ValueError(f"read_attempts must be at least 1, got {read_attempts}")
        self._read_attempts = read_attempts
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be http(s)://..., got {base_url!r}")
        headers = {"Accept": "application/json", "User-Agent": "dr-orchestrator/fleet-client"}
        if token:
            _check_token(token)
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=f"{self.base_url}/{API_VERSION}",
            headers=headers,
            timeout=httpx.Timeout(timeout),
            verify=verify,
            transport=transport,
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        # Never show the token.
        return f"HttpFleet({self.base_url!r})"

    async def __aenter__(self) -> HttpFleet:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    # --- reads -----------------------------------------------------------

    async def topology(self) -> Topology:
        return _parse(Topology, await self._call("GET", "/topology"))

    async def routing(self, *, include_buckets: bool | None = None) -> RoutingTable:
        """The routing table; buckets included by the server's default unless asked."""
        params = {} if include_buckets is None else {"buckets": str(include_buckets).lower()}
        return _parse(RoutingTable, await self._call("GET", "/routing", params=params))

    async def health(self, window_s: float | None = None) -> HealthReport:
        params = {} if window_s is None else {"window_s": str(window_s)}
        return _parse(HealthReport, await self._call("GET", "/health", params=params))

    async def audit(self, since_seq: int = 0) -> list[AuditEntry]:
        response = await self._call("GET", "/audit", params={"since_seq": str(since_seq)})
        try:
            return _AUDIT.validate_python(response.json())
        except (ValidationError, ValueError) as exc:
            raise _bad_answer(response, exc) from None

    # --- mutations -------------------------------------------------------

    async def write_routing(
        self, write: RoutingWrite, *, if_match: int, idempotency_key: str
    ) -> RoutingTable:
        response = await self._call(
            "PUT",
            "/routing",
            json=write.model_dump(mode="json", exclude_none=True),
            headers={"If-Match": str(if_match), "Idempotency-Key": _key(idempotency_key)},
        )
        return _parse(RoutingTable, response)

    async def set_service_weight(
        self, change: ServiceWeightChange, *, idempotency_key: str
    ) -> MutationResult:
        return await self._mutate("/actions/service-weight", change, idempotency_key)

    async def move_shards(self, move: ShardMove, *, idempotency_key: str) -> MutationResult:
        return await self._mutate("/actions/shard-move", move, idempotency_key)

    async def batch_job(self, action: BatchJobAction, *, idempotency_key: str) -> MutationResult:
        return await self._mutate("/actions/batch-job", action, idempotency_key)

    async def change_config(self, change: ConfigChange, *, idempotency_key: str) -> MutationResult:
        return await self._mutate("/actions/config", change, idempotency_key)

    # --- training ----------------------------------------------------------

    async def training_cluster(self) -> TrainingCluster:
        return _parse(TrainingCluster, await self._call("GET", "/training/cluster"))

    async def training_checkpoints(self, job: str) -> TrainingCheckpoints:
        response = await self._call("GET", "/training/checkpoints", params={"job": job})
        return _parse(TrainingCheckpoints, response)

    async def stop_training_job(
        self, job: str, *, idempotency_key: str, checkpoint: bool = False
    ) -> MutationResult:
        return await self._mutate(
            "/actions/training-stop",
            StopJobRequest(job=job, checkpoint=checkpoint),
            idempotency_key,
        )

    async def start_training_job(
        self, request: StartJobRequest, *, idempotency_key: str
    ) -> MutationResult:
        return await self._mutate("/actions/training-start", request, idempotency_key)

    async def quarantine_host(
        self, request: QuarantineRequest, *, idempotency_key: str
    ) -> MutationResult:
        return await self._mutate("/actions/host-quarantine", request, idempotency_key)

    async def release_host(self, host: str, *, idempotency_key: str) -> MutationResult:
        return await self._mutate(
            "/actions/host-release", ReleaseRequest(host=host), idempotency_key
        )

    # --- plumbing --------------------------------------------------------

    async def _mutate(self, path: str, body: BaseModel, idempotency_key: str) -> MutationResult:
        response = await self._call(
            "POST",
            path,
            json=body.model_dump(mode="json"),
            headers={"Idempotency-Key": _key(idempotency_key)},
        )
        return _parse(MutationResult, response)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        attempts = self._read_attempts if method == "GET" else 1
        for attempt in range(1, attempts + 1):
            try:
                return await self._call_once(method, path, params, json, headers)
            except FleetUnavailable:
                if attempt == attempts:
                    raise
                await asyncio.sleep(0.1 * 2**attempt * (0.5 + random.random()))
        raise AssertionError("unreachable")

    async def _call_once(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        json: Any,
        headers: Mapping[str, str] | None,
    ) -> httpx.Response:
        where = f"{method} {self.base_url}/{API_VERSION}{path}"
        try:
            response = await self._client.request(
                method, path, params=params, json=json, headers=headers
            )
        except httpx.TimeoutException as exc:
            raise FleetUnavailable(f"{where}: timed out", reason=type(exc).__name__) from None
        except httpx.LocalProtocolError:
            # Its message quotes the offending header whole, Authorization included, and
            # would reach logs and the activity failure in Temporal's history: say what
            # failed, never the value. Sending it again cannot help.
            raise FleetRejected(
                f"{where}: the request could not be sent: a header or the URL holds "
                "characters HTTP does not allow",
                reason="LocalProtocolError",
            ) from None
        except httpx.TransportError as exc:
            reason = redact(str(exc))
            raise FleetUnavailable(
                f"{where}: {type(exc).__name__}: {reason}", reason=reason
            ) from None
        if response.is_success:
            return response
        raise _error(where, response)


def _check_token(token: str) -> None:
    # httpx would raise on the first request with the header quoted in its message.
    if not token.isascii() or not token.isprintable() or token != token.strip():
        raise ValueError(
            "token: must be printable ASCII without surrounding whitespace (the value is not shown)"
        )


def _key(idempotency_key: str) -> str:
    if not idempotency_key or not idempotency_key.strip():
        raise ValueError("idempotency_key must be a non-empty string")
    return idempotency_key


def _error(where: str, response: httpx.Response) -> FleetError:
    status = response.status_code
    reason = response.reason_phrase or ""
    field: str | None = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        reason = str(body.get("reason") or body.get("detail") or reason)
        field = body.get("field") if isinstance(body.get("field"), str) else None
    detail = f"{reason} (field {field})" if field else reason
    message = f"{where}: HTTP {status}: {detail}"
    cls: type[FleetError]
    if status >= 500:
        cls = FleetUnavailable
    elif status in (401, 403):
        cls = FleetUnauthorized
    elif status == 404:
        cls = FleetNotFound
    elif status == 409:
        cls = VersionConflict
    elif status == 422:
        cls = InvalidRequest
    else:
        cls = FleetRejected
    return cls(message, status=status, reason=detail)


def _bad_answer(response: httpx.Response, exc: Exception) -> FleetUnavailable:
    # A 2xx whose body does not match the contract: the fleet is broken, not the request.
    return FleetUnavailable(
        f"{response.request.method} {response.request.url}: answer does not match the "
        f"contract: {exc}",
        status=response.status_code,
        reason="invalid response body",
    )


def _parse(model: type[M], response: httpx.Response) -> M:
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise _bad_answer(response, exc) from None
