"""The lab's server stops within its deadline, whatever its shutdown waits on."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator

import httpx
import uvicorn
from fastapi import FastAPI

from orchestrator.lab.server import BoundedShutdownServer
from orchestrator.waiting import wait_until

DEADLINE_S = 1.0


def _hanging_app(*, in_lifespan: bool) -> FastAPI:
    """An app whose shutdown never ends: in its lifespan, or in a request in flight."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if in_lifespan:
            await asyncio.Event().wait()

    app = FastAPI(lifespan=lifespan)

    @app.get("/forever")
    async def forever() -> None:
        await asyncio.Event().wait()

    return app


def _serve_in_thread(app: FastAPI) -> tuple[BoundedShutdownServer, threading.Thread]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical")
    server = BoundedShutdownServer(config, deadline_s=DEADLINE_S)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, timeout_s=15, interval_s=0.02)
    return server, thread


def _stop_time(server: BoundedShutdownServer, thread: threading.Thread) -> float:
    """Seconds from the request to stop until the server returned (unbounded, it never
    does; the 30 s leaves room for a loaded machine)."""
    began = time.monotonic()
    server.should_exit = True
    thread.join(30)
    assert not thread.is_alive(), "the server outlived its shutdown deadline"
    return time.monotonic() - began


class TestBoundedShutdown:
    """A shutdown that would wait forever ends at the deadline, so the caller goes on to
    stop the data plane (HAProxy, the region backends) instead of leaving them running."""

    def test_a_lifespan_that_never_ends_its_shutdown(self) -> None:
        server, thread = _serve_in_thread(_hanging_app(in_lifespan=True))
        assert _stop_time(server, thread) >= DEADLINE_S

    def test_a_request_that_never_ends(self) -> None:
        server, thread = _serve_in_thread(_hanging_app(in_lifespan=False))
        port = server.servers[0].sockets[0].getsockname()[1]
        caller = threading.Thread(
            target=_get_quietly, args=(f"http://127.0.0.1:{port}/forever",), daemon=True
        )
        caller.start()
        assert wait_until(lambda: bool(server.server_state.tasks), timeout_s=10, interval_s=0.02)
        assert _stop_time(server, thread) >= DEADLINE_S


def _get_quietly(url: str) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.get(url, timeout=30)
