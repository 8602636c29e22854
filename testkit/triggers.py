"""The trigger server in memory: a starter that keeps runs in a dict, and the app over it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from fastapi import FastAPI

from orchestrator.contracts.runbook import AlertResolvedInput
from orchestrator.runbook.spec import Runbook
from orchestrator.triggers.auth import load_credentials
from orchestrator.triggers.rules import parameters_key
from orchestrator.triggers.server import create_app
from orchestrator.triggers.starter import RunInfo, StartFailed, StartRequest, StartResult
from testkit.trigger_payloads import HMAC_SECRET, TOKEN

__all__ = ["AUTH", "AppClient", "MemoryStarter", "asgi_client", "make_app"]


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class MemoryStarter:
    """Temporal's id rules in a dict; ``delay_s`` widens races, ``fail`` simulates Temporal down.

    A start with ``once`` (an alert episode's run) is refused for an id that ever ran;
    any other start only while a run with the id is open. :meth:`close` ends a run.
    """

    delay_s: float = 0.0
    fail: bool = False
    open: dict[str, str] = field(default_factory=dict)
    closed: dict[str, str] = field(default_factory=dict)
    started: list[StartRequest] = field(default_factory=list)
    signals: list[tuple[str, AlertResolvedInput]] = field(default_factory=list)
    #: (runbook, parameters key) -> start time, as visibility would find it
    history: dict[tuple[str, str], datetime] = field(default_factory=dict)

    async def start(self, request: StartRequest) -> StartResult:
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise StartFailed("temporal refused to start: UNAVAILABLE: test")
        existing = self.open.get(request.workflow_id)
        if existing is None and request.once:
            existing = self.closed.get(request.workflow_id)
        if existing is not None:
            return StartResult(workflow_id=request.workflow_id, run_id=existing, started=False)
        run_id = uuid.uuid4().hex
        self.open[request.workflow_id] = run_id
        self.started.append(request)
        return StartResult(workflow_id=request.workflow_id, run_id=run_id, started=True)

    def close(self, workflow_id: str) -> None:
        self.closed[workflow_id] = self.open.pop(workflow_id)

    async def signal_resolved(self, workflow_id: str, signal: AlertResolvedInput) -> str | None:
        run_id = self.open.get(workflow_id)
        if run_id is not None:
            self.signals.append((workflow_id, signal))
        return run_id

    async def find_run(self, workflow_id: str) -> RunInfo | None:
        if workflow_id in self.open:
            return RunInfo(run_id=self.open[workflow_id], open=True)
        if workflow_id in self.closed:
            return RunInfo(run_id=self.closed[workflow_id], open=False)
        return None

    async def last_start(
        self, runbook: str, parameters: Mapping[str, Any], region: str | None, since: datetime
    ) -> datetime | None:
        found = self.history.get((runbook, parameters_key(parameters)))
        return found if found is not None and found >= since else None


AppClient = Callable[..., Awaitable[httpx.AsyncClient]]


def asgi_client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://triggers")


def make_app(runbooks: list[Runbook], starter: object) -> FastAPI:
    creds = load_credentials(token=TOKEN, hmac_secret=HMAC_SECRET)
    return create_app(runbooks, starter, creds)  # type: ignore[arg-type]
