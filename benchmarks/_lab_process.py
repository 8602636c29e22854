"""``orchestrator lab serve`` in a process of its own, for the benchmarks that drive a live lab.

A separate process keeps the lab's event loop off the benchmark's (which runs
the Temporal worker), so a busy worker does not show up as lab latency.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from orchestrator.waiting import http_ok, wait_until

#: the orchestrator CLI in this interpreter, for ``lab serve`` and ``lab traffic``
CLI = [sys.executable, "-c", "from orchestrator.cli import app; app()"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def open_env() -> dict[str, str]:
    """This environment without ``ORCHESTRATOR_LAB_TOKEN``: the benchmarks' labs run open."""
    return {k: v for k, v in os.environ.items() if k != "ORCHESTRATOR_LAB_TOKEN"}


def spawn_lab(
    config: Path,
    *,
    faults: bool = False,
    env: dict[str, str] | None = None,
    mode: str = "live",
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the lab on a free port; returns the process and its URL (not yet ready)."""
    port = free_port()
    process = subprocess.Popen(
        [
            *CLI,
            "lab",
            "serve",
            "--data-plane",
            "python",
            "--mode",
            mode,
            *(["--faults"] if faults else []),
            "--port",
            str(port),
            "--config",
            str(config),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, f"http://127.0.0.1:{port}"


def wait_healthy(url: str, timeout_s: float = 30.0) -> None:
    """Until ``GET /healthz`` answers 200; RuntimeError naming the URL after ``timeout_s``."""
    if not wait_until(lambda: http_ok(f"{url}/healthz"), timeout_s=timeout_s, interval_s=0.2):
        raise RuntimeError(f"lab on {url} did not start")
