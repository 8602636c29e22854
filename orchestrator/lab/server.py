"""Running the lab: in the foreground (``orchestrator lab serve``) or in a thread (tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from orchestrator.lab.app import create_app
from orchestrator.lab.config import LabConfig, load_config
from orchestrator.lab.runtime import Mode
from orchestrator.waiting import wait_until

__all__ = ["LabThread", "build_app", "serve"]


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


def serve(app: FastAPI, host: str, port: int, *, log_level: str = "warning") -> None:
    """Serve until interrupted. Access logs stay off: they cost more CPU than the lab."""
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
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
