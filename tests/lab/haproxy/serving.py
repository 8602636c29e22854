"""The HAProxy lab's fleet API served in a thread, for tests that run it beside the plane."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import uvicorn

from orchestrator.lab.haproxy.app import create_haproxy_app
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.ports import free_port
from orchestrator.waiting import wait_until

__all__ = ["fleet_api"]


@contextlib.contextmanager
def fleet_api(plane: HAProxyDataPlane) -> Iterator[str]:
    """The fleet API over ``plane`` on a free port until the block ends; yields its URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_haproxy_app(plane), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: server.started, timeout_s=30, interval_s=0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
