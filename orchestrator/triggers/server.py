"""The trigger server: Alertmanager webhooks and manual starts over HTTP (FastAPI).

Authentication comes before anything else, parsing included: an unauthenticated
request gets 401 whatever its body, and nothing is started. Bodies are validated
by hand after that (not by FastAPI's body parameters, which would validate
first), and a 422 carries pydantic's ``loc`` so it names the field.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from orchestrator.logging import get_logger
from orchestrator.runbook.spec import Runbook
from orchestrator.triggers.auth import SIGNATURE_HEADER, Credentials, authenticate
from orchestrator.triggers.intake import (
    Intake,
    ManualRun,
    ParameterErrors,
    UnknownRunbook,
)
from orchestrator.triggers.payload import AlertmanagerPayload
from orchestrator.triggers.starter import RunStarter, StartFailed

__all__ = ["MAX_BODY_BYTES", "create_app"]

log = get_logger(__name__)

#: Alertmanager groups rarely exceed a few hundred alerts; this bounds a hostile body.
MAX_BODY_BYTES = 4 * 1024 * 1024


def _validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": ["body", *error["loc"]], "msg": error["msg"], "type": error["type"]}
        for error in exc.errors(include_url=False, include_input=False)
    ]


def _json(status: int, content: Any) -> JSONResponse:
    if isinstance(content, BaseModel):
        content = content.model_dump(mode="json")
    return JSONResponse(status_code=status, content=content)


def create_app(runbooks: list[Runbook], starter: RunStarter, credentials: Credentials) -> FastAPI:
    """The app; ``starter`` starts the runs (Temporal in production, a fake in unit tests)."""
    if not credentials.configured:
        raise ValueError("credentials: the trigger server never runs unauthenticated")
    intake = Intake(runbooks, starter)
    app = FastAPI(title="orchestrator triggers", version="1")
    app.state.intake = intake

    async def authenticated_body(request: Request) -> bytes | JSONResponse:
        body = await request.body()
        method = authenticate(
            credentials,
            authorization=request.headers.get("authorization"),
            signature=request.headers.get(SIGNATURE_HEADER),
            body=body,
        )
        if method is None:
            client = request.client.host if request.client else "?"
            log.warning("unauthenticated request", path=request.url.path, client=client)
            return _json(
                401,
                {"detail": f"authenticate with a bearer token or {SIGNATURE_HEADER}"},
            )
        if len(body) > MAX_BODY_BYTES:
            return _json(413, {"detail": f"body larger than {MAX_BODY_BYTES} bytes"})
        return body

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "runbooks": sorted(intake.runbooks)}

    @app.post("/v1/alerts/alertmanager")
    async def alertmanager(request: Request) -> JSONResponse:
        body = await authenticated_body(request)
        if isinstance(body, JSONResponse):
            return body
        try:
            payload = AlertmanagerPayload.model_validate_json(body)
        except ValidationError as exc:
            return _json(422, {"detail": _validation_detail(exc)})
        result = await intake.alertmanager(payload)
        # 503 makes Alertmanager retry the notification; starts are idempotent.
        return _json(503 if result.retry else 200, result)

    @app.post("/v1/runbooks/{name}/runs")
    async def manual_run(name: str, request: Request) -> JSONResponse:
        body = await authenticated_body(request)
        if isinstance(body, JSONResponse):
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
