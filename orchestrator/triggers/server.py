"""The trigger server: Alertmanager webhooks and manual starts over HTTP (FastAPI).

Authentication comes before anything else, reading the body included: a request
with no valid bearer token, and no signature whose timestamp is inside the window,
gets 401 before a byte of its body is read; a declared ``Content-Length`` over the
cap gets 413 the same way. A signed request's body is read as a stream under the
cap and a deadline (:mod:`orchestrator.triggers.boundary`), then its signature is
checked. Bodies are validated by hand after that (not by FastAPI's body
parameters, which would read and validate first), and a 422 carries pydantic's
``loc`` so it names the field.

``/healthz`` answers anyone, and lists the runbooks only to an authenticated
caller; ``/metrics`` (Prometheus text) needs authentication, as it names runbooks.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from orchestrator.logging import get_logger
from orchestrator.runbook.spec import Runbook
from orchestrator.triggers.auth import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Credentials,
    bearer_ok,
    signature_ok,
    timestamp_problem,
)
from orchestrator.triggers.boundary import (
    BODY_TIMEOUT_S,
    MAX_BODY_BYTES,
    BodyRefused,
    read_body,
)
from orchestrator.triggers.intake import Intake
from orchestrator.triggers.manual import ManualRun, ParameterErrors, UnknownRunbook
from orchestrator.triggers.metrics import CONTENT_TYPE, TriggerMetrics
from orchestrator.triggers.payload import AlertmanagerPayload
from orchestrator.triggers.starter import RunStarter, StartFailed

__all__ = ["MAX_BODY_BYTES", "create_app"]

log = get_logger(__name__)

_HOW = f"authenticate with a bearer token or {SIGNATURE_HEADER} and {TIMESTAMP_HEADER}"


def _validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ["body", *error["loc"]], "msg": error["msg"], "type": error["type"]}
        for error in exc.errors(include_url=False, include_input=False)
    ]


def _json(status: int, content: Any) -> JSONResponse:
    if isinstance(content, BaseModel):
        content = content.model_dump(mode="json")
    return JSONResponse(status_code=status, content=content)


def create_app(
    runbooks: list[Runbook],
    starter: RunStarter,
    credentials: Credentials,
    *,
    body_timeout_s: float = BODY_TIMEOUT_S,
) -> FastAPI:
    """The app; ``starter`` starts the runs (Temporal in production, a fake in unit tests)."""
    if not credentials.configured:
        raise ValueError("credentials: the trigger server never runs unauthenticated")
    metrics = TriggerMetrics()
    intake = Intake(runbooks, starter, metrics=metrics)
    app = FastAPI(title="orchestrator triggers", version="1")
    app.state.intake = intake
    app.state.metrics = metrics

    def unauthenticated(request: Request, detail: str = _HOW) -> JSONResponse:
        client = request.client.host if request.client else "?"
        log.warning("unauthenticated request", path=request.url.path, client=client, why=detail)
        metrics.refused("unauthenticated")
        return _json(401, {"detail": detail})

    async def authenticated_body(request: Request) -> bytes | Response:
        """The body of an authenticated request, or the answer that refuses it."""
        headers = request.headers
        signature = headers.get(SIGNATURE_HEADER)
        signed = credentials.hmac_secret is not None and bool(signature)
        bearer = bearer_ok(credentials, headers.get("authorization"))
        if not bearer:
            if not signed:
                return unauthenticated(request)
            problem = timestamp_problem(headers.get(TIMESTAMP_HEADER), time.time())
            if problem is not None:
                return unauthenticated(request, problem)
        body = await read_body(request, MAX_BODY_BYTES, body_timeout_s)
        if isinstance(body, BodyRefused):
            metrics.refused(body.reason)
            if body.status is None:
                return Response(status_code=400)  # the client is gone; nobody reads this
            if body.status == 413:
                log.warning("request refused", path=request.url.path, why=body.detail)
            return _json(body.status, {"detail": body.detail})
        if not bearer and not signature_ok(
            credentials, signature, headers.get(TIMESTAMP_HEADER), body
        ):
            return unauthenticated(request)
        return body

    @app.get("/healthz")
    async def healthz(request: Request) -> dict[str, Any]:
        if bearer_ok(credentials, request.headers.get("authorization")):
            return {"status": "ok", "runbooks": sorted(intake.runbooks)}
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus_metrics(request: Request) -> Response:
        if not bearer_ok(credentials, request.headers.get("authorization")):
            return unauthenticated(request, "authenticate with a bearer token")
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    @app.post("/v1/alerts/alertmanager")
    async def alertmanager(request: Request) -> Response:
        body = await authenticated_body(request)
        if isinstance(body, Response):
            return body
        try:
            payload = AlertmanagerPayload.model_validate_json(body)
        except ValidationError as exc:
            return _json(422, {"detail": _validation_detail(exc)})
        result = await intake.alertmanager(payload)
        # 503 makes Alertmanager retry the notification (starts are idempotent); a 4xx
        # tells it that retrying cannot help.
        status = 503 if result.retry else 422 if result.refused else 200
        return _json(status, result)

    @app.post("/v1/runbooks/{name}/runs")
    async def manual_run(name: str, request: Request) -> Response:
        body = await authenticated_body(request)
        if isinstance(body, Response):
            return body
        try:
            run = ManualRun.model_validate_json(body or b"{}")
        except ValidationError as exc:
            return _json(422, {"detail": _validation_detail(exc)})
        try:
            result = await intake.manual(name, run)
        except UnknownRunbook as exc:
            return _json(404, {"detail": str(exc)})
        except ParameterErrors as exc:
            return _json(422, {"detail": exc.errors})
        except StartFailed as exc:
            return _json(503, {"detail": str(exc)})
        return _json(201 if result.started else 200, result)

    return app
