"""The HAProxy lab for tests: its fleet API in a thread beside a plane (:func:`fleet_api`),
or the whole ``orchestrator lab serve --data-plane haproxy`` command (:func:`lab_serve`)."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess as sp
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from orchestrator.lab.haproxy.app import create_haproxy_app
from orchestrator.lab.haproxy.plane import HAProxyDataPlane
from orchestrator.ports import free_port
from orchestrator.processes import spawn, stop_group
from orchestrator.waiting import exited, http_ok, wait_until
from tests.lab.haproxy.test_data_plane import lab_config

__all__ = ["Served", "fleet_api", "lab_serve", "web_limits"]


class Served:
    def __init__(self, process: sp.Popen[bytes], url: str, info: dict[str, Any]) -> None:
        self.process = process
        self.url = url
        self.info = info


@contextlib.contextmanager
def lab_serve(tmp_path: Path, *extra: str) -> Iterator[Served]:
    """``lab serve --data-plane haproxy`` (and ``extra`` options) on
    ``lab_config(internal=True)`` until the block ends; SIGTERM then."""
    config = tmp_path / "lab.yaml"
    config.write_text(yaml.safe_dump(lab_config(internal=True).model_dump(mode="json")))
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    process = spawn(
        [
            sys.executable,
            "-c",
            "from orchestrator.cli import app; app()",
            "lab",
            "serve",
            "--data-plane",
            "haproxy",
            *extra,
            "--config",
            str(config),
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=sp.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(
            lambda: http_ok(f"{url}/healthz"),
            timeout_s=60,
            alive=exited(process, "lab serve --data-plane haproxy"),
        ), (tmp_path / "serve.log").read_text()
        yield Served(process, url, httpx.get(f"{url}/healthz").json())
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except sp.TimeoutExpired as slow:
                # once, under a load average of 9: fail with what the lab was doing, and
                # leave none of its processes behind
                stop_group(process, timeout_s=5.0)
                log.close()
                tail = (tmp_path / "serve.log").read_text(errors="replace")[-3000:]
                message = f"lab serve did not stop within 30 s of SIGTERM:\n{tail}"
                raise AssertionError(message) from slow
        log.close()


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


async def web_limits(served: Served) -> dict[str, int]:
    """Each web server's connection limit, as HAProxy's own exporter reports it."""
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(served.info["haproxy_metrics"])).text
    found = re.findall(r'haproxy_server_limit_sessions\{proxy="web",server="([^"]+)"\} (\d+)', text)
    return {server: int(limit) for server, limit in found}
