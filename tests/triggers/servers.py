"""Real processes and servers for the end-to-end tests: Alertmanager and the trigger server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI

from orchestrator.triggers.boundary import uvicorn_config
from orchestrator.waiting import exited, http_ok_async, wait_until_async
from tests.fixtures.ports import free_port

ALERTMANAGER = Path("/usr/bin/prometheus-alertmanager")


async def wait_http(
    url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    alive = None if proc is None else exited(proc, f"the server of {url}")
    if not await wait_until_async(lambda: http_ok_async(url), timeout_s=timeout_s, alive=alive):
        raise TimeoutError(f"{url} did not answer within {timeout_s}s")


@contextlib.asynccontextmanager
async def serve_app(app: FastAPI, header_timeout_s: float = 10.0) -> AsyncIterator[str]:
    """``app`` served as ``orchestrator triggers serve`` serves it, on 127.0.0.1:<free port>
    in this event loop; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn_config(
            app, host="127.0.0.1", port=port, header_timeout_s=header_timeout_s, lifespan="off"
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        await wait_http(f"http://127.0.0.1:{port}/healthz", 10.0)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10.0)


def alertmanager_config(webhook_url: str, token: str, repeat: str = "2s") -> str:
    """A single route to the trigger server, authenticated the way real deployments do."""
    return f"""
route:
  receiver: orchestrator
  group_by: [alertname, region]
  group_wait: 500ms
  group_interval: 1s
  repeat_interval: {repeat}
receivers:
  - name: orchestrator
    webhook_configs:
      - url: {webhook_url}
        send_resolved: true
        http_config:
          authorization:
            type: Bearer
            credentials: {token}
"""


def _spawn(binary: Path, args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    if not binary.is_file():
        pytest.fail(
            f"{binary} missing: run scripts/install-system-deps.sh (make test does)",
            pytrace=False,
        )
    with log_path.open("wb") as log:
        return subprocess.Popen([str(binary), *args], stdout=log, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.asynccontextmanager
async def binary_server(
    binary: Path, args: list[str], ready_url: str, log_path: Path
) -> AsyncIterator[None]:
    """Runs ``binary args`` until the block ends, once ``ready_url`` answers 200."""
    proc = _spawn(binary, args, log_path)
    try:
        await wait_http(ready_url, 30.0, proc)
        yield
    finally:
        _stop(proc)


@contextlib.asynccontextmanager
async def alertmanager(tmp: Path, config: str) -> AsyncIterator[str]:
    """A real Alertmanager (clustering off) on a free port; yields its base URL."""
    config_file = tmp / "alertmanager.yml"
    config_file.write_text(config)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [
        f"--config.file={config_file}",
        f"--storage.path={tmp / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
    async with binary_server(ALERTMANAGER, args, f"{base}/-/ready", tmp / "alertmanager.log"):
        yield base


PROMETHEUS = Path("/usr/bin/prometheus")


@contextlib.asynccontextmanager
async def prometheus(
    tmp: Path,
    target: str | Sequence[str],
    *,
    rules: str = "",
    alertmanager_url: str | None = None,
    query_log: Path | None = None,
) -> AsyncIterator[str]:
    """A real Prometheus scraping ``target`` (host:port, or several) and evaluating ``rules`` every
    second, sending alerts to ``alertmanager_url``, logging every query it answers to
    ``query_log`` (JSON lines); yields its base URL."""
    targets = [target] if isinstance(target, str) else list(target)
    log = f", query_log_file: {query_log}" if query_log else ""
    config = [
        f"global: {{scrape_interval: 1s, evaluation_interval: 1s{log}}}",
        "scrape_configs:",
        f"  - {{job_name: lab, static_configs: [{{targets: {json.dumps(targets)}}}]}}",
    ]
    if rules:
        (tmp / "rules.yml").write_text(rules)
        config += ["rule_files:", f"  - {tmp / 'rules.yml'}"]
    if alertmanager_url:
        am = alertmanager_url.removeprefix("http://")
        config += ["alerting:", f'  alertmanagers: [{{static_configs: [{{targets: ["{am}"]}}]}}]']
    (tmp / "prometheus.yml").write_text("\n".join(config) + "\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = [
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    async with binary_server(PROMETHEUS, args, f"{base}/-/ready", tmp / "prometheus.log"):
        yield base
