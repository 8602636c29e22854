"""The trigger server in memory: a starter that keeps runs in a dict, and the app over it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

import httpx
from fastapi import FastAPI

from orchestrator.contracts.runbook import AlertResolvedInput
from orchestrator.runbook.spec import Runbook
from orchestrator.triggers.auth import load_credentials
from orchestrator.triggers.server import create_app
from orchestrator.triggers.starter import StartFailed, StartRequest, StartResult
from testkit.trigger_payloads import HMAC_SECRET, TOKEN

__all__ = ["AUTH", "AppClient", "MemoryStarter", "asgi_client", "make_app"]


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class MemoryStarter:
    """Keeps open runs in a dict; ``delay_s`` widens races, ``fail`` simulates Temporal down."""

    delay_s: float = 0.0
    fail: bool = False
    open: dict[str, str] = field(default_factory=dict)
    started: list[StartRequest] = field(default_factory=list)
    signals: list[tuple[str, AlertResolvedInput]] = field(default_factory=list)
    history: dict[str, datetime] = field(default_factory=dict)

    async def start(self, request: StartRequest) -> StartResult:
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise StartFailed("temporal refused to start: UNAVAILABLE: test")
        if request.workflow_id in self.open:
            run_id = self.open[request.workflow_id]
            return StartResult(workflow_id=request.workflow_id, run_id=run_id, started=False)
        run_id = uuid.uuid4().hex
        self.open[request.workflow_id] = run_id
        self.started.append(request)
        return StartResult(workflow_id=request.workflow_id, run_id=run_id, started=True)

    async def signal_resolved(self, workflow_id: str, signal: AlertResolvedInput) -> str | None:
        run_id = self.open.pop(workflow_id, None)
        if run_id is not None:
            self.signals.append((workflow_id, signal))
        return run_id

    async def open_run(self, workflow_id: str) -> str | None:
        return self.open.get(workflow_id)

    async def last_start(self, runbook: str, since: datetime) -> datetime | None:
        found = self.history.get(runbook)
        return found if found is not None and found >= since else None


AppClient = Callable[..., Awaitable[httpx.AsyncClient]]


def asgi_client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://triggers")


def make_app(runbooks: list[Runbook], starter: object) -> FastAPI:
    creds = load_credentials(token=TOKEN, hmac_secret=HMAC_SECRET)
    return create_app(runbooks, starter, creds)  # type: ignore[arg-type]
