"""Running the lab: in the foreground (``orchestrator lab serve``) or in a thread (tests)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from orchestrator.lab.app import create_app
from orchestrator.lab.config import LabConfig, load_config
from orchestrator.lab.runtime import Mode
from orchestrator.logging import get_logger
from orchestrator.waiting import wait_until

__all__ = [
    "SHUTDOWN_DEADLINE_S",
    "BoundedShutdownServer",
    "LabThread",
    "build_app",
    "run_server",
    "serve",
]

#: how long a lab's shutdown may take once asked to stop, before its data plane is stopped
#: anyway (a lab that outlives its SIGTERM keeps its ports and its HAProxy)
SHUTDOWN_DEADLINE_S = 15.0

log = get_logger(__name__)


def build_app(
    config: LabConfig | str | Path | None = None,
    *,
    mode: Mode = "live",
    faults: bool = False,
    token: str | None = None,
    seed: int | None = None,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    cfg = config if isinstance(config, LabConfig) else load_config(config)
    return create_app(cfg, mode=mode, faults=faults, token=token, seed=seed, clock=clock)


class BoundedShutdownServer(uvicorn.Server):
    """A uvicorn server whose shutdown ends within ``deadline_s`` whatever it waits on.

    uvicorn waits without a bound for open connections, request tasks and the lifespan's
    shutdown; one that never ends kept ``lab serve`` alive after its SIGTERM with its
    HAProxy and backends, since the plane is stopped only after the server returns."""

    def __init__(self, config: uvicorn.Config, deadline_s: float = SHUTDOWN_DEADLINE_S) -> None:
        super().__init__(config)
        self.deadline_s = deadline_s

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            async with asyncio.timeout(self.deadline_s):
                await super().shutdown(sockets)
        except TimeoutError:
            log.error(
                "lab.shutdown_deadline_exceeded",
                deadline_s=self.deadline_s,
                open_connections=len(self.server_state.connections),
                running_tasks=len(self.server_state.tasks),
            )


def run_server(
    app: FastAPI,
    host: str,
    port: int,
    *,
    log_level: str = "warning",
    shutdown_deadline_s: float = SHUTDOWN_DEADLINE_S,
) -> None:
    """Serve until SIGINT or SIGTERM, then return within ``shutdown_deadline_s``. Access
    logs stay off: they cost more CPU than the lab. Exits with status 3 (uvicorn's) if the
    server never started (a taken port)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        # half the deadline for requests in flight, the rest for the lifespan's shutdown
        timeout_graceful_shutdown=max(1, round(shutdown_deadline_s / 2)),
    )
    server = BoundedShutdownServer(config, shutdown_deadline_s)
    # uvicorn raises the signal it stopped on again once stopped: that is the way out here
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        raise SystemExit(3)


def serve(app: FastAPI, host: str, port: int, *, log_level: str = "warning") -> None:
    """Serve the Python lab until interrupted."""
    try:
        run_server(app, host, port, log_level=log_level)
    finally:
        app.state.runtime.training.close()  # no trainer process outlives its lab


class LabThread:
    """A lab on a free port in a background thread of this process; always ``stop()`` it."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="lab-server", daemon=True)
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 15.0) -> LabThread:
        self._thread.start()
        if (
            not wait_until(
                lambda: self._server.started or not self._thread.is_alive(),
                timeout_s=timeout_s,
                interval_s=0.02,
            )
            or not self._server.started
        ):
            self.stop()
            raise RuntimeError(f"lab server did not start on {self.host}:{self.port}")
        sockets = [s for server in self._server.servers for s in server.sockets]
        self.port = int(sockets[0].getsockname()[1])
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout_s)
        self.app.state.runtime.training.close()

    def __enter__(self) -> LabThread:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
