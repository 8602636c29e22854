"""The processes the demo runs: Temporal dev server, lab fleet, worker and Locust.

Each is a real child process in its own session (process group), so stopping one
stops whatever it started too (``lab traffic`` runs Locust, the lab runs trainer
processes), and :meth:`DemoStack.stop` can prove nothing it started is left. Each is
also bound to die with the demo (:mod:`orchestrator.processes`), should the demo be
killed before it can stop them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.devserver import DevServer, port_is_free
from orchestrator.exceptions import OrchestratorError
from orchestrator.processes import group_alive, spawn, stop_group
from orchestrator.waiting import http_ok, wait_until

__all__ = ["DataPlane", "DemoError", "DemoPorts", "DemoStack"]

#: python: the lab process serves every PoP; haproxy: a real HAProxy in front of a process
#: per region (``lab serve --data-plane haproxy``); faults on in both
DataPlane = Literal["python", "haproxy"]

_CLI = [sys.executable, "-c", "from orchestrator.cli import app; app()"]


class DemoError(OrchestratorError):
    """A demo step failed; the message is the one line the user sees."""


@dataclass(frozen=True)
class DemoPorts:
    temporal: int = 7233
    ui: int = 8233
    lab: int = 8080

    def check_free(self, host: str = "127.0.0.1") -> None:
        named = {"--temporal-port": self.temporal, "--ui-port": self.ui, "--lab-port": self.lab}
        for option, port in named.items():
            if not port_is_free(host, port):
                raise DemoError(
                    f"port {port} is already in use (another demo or server?); "
                    f"stop it or choose another with {option}"
                )


@dataclass
class _Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class DemoStack:
    """Starts and stops the demo's processes; logs go to ``workdir/logs``."""

    workdir: Path
    ports: DemoPorts = field(default_factory=DemoPorts)
    task_queue: str = "orchestrator"
    data_plane: DataPlane = "python"
    children: list[_Child] = field(default_factory=list)
    server: DevServer | None = None

    @property
    def temporal_address(self) -> str:
        return f"127.0.0.1:{self.ports.temporal}"

    @property
    def lab_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.lab}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.ui}"

    def env(self) -> dict[str, str]:
        """The environment of every child: configured only through variables, as in production."""
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "ORCHESTRATOR_"))
        }
        env.update(
            TEMPORAL_ADDRESS=self.temporal_address,
            TEMPORAL_NAMESPACE="default",
            ORCHESTRATOR_FLEET_URL=self.lab_url,
            ORCHESTRATOR_TASK_QUEUE=self.task_queue,
            ORCHESTRATOR_STATE_DIR=str(self.workdir / "state"),
            ORCHESTRATOR_LOG_LEVEL="WARNING",
        )
        return env

    def start_server(self) -> None:
        self.server = DevServer(
            port=self.ports.temporal,
            ui_port=self.ports.ui,
            log_level="error",
            log_file=self.workdir / "logs" / "temporal.log",
        )
        self.server.start(timeout_s=60.0)

    def start_lab(self, config: Path) -> None:
        plane = ["--faults", "--data-plane", self.data_plane]
        self._spawn(
            "lab",
            ["lab", "serve", *plane, "--port", str(self.ports.lab), "--config", str(config)],
        )
        self._wait_http(f"{self.lab_url}/healthz", "the lab")

    def start_worker(self) -> None:
        self._spawn("worker", ["worker"])

    def start_traffic(self, rps: float, duration_s: float) -> None:
        self._spawn(
            "traffic",
            [
                "lab",
                "traffic",
                "--lab",
                self.lab_url,
                "--rps",
                f"{rps:g}",
                "--duration",
                f"{duration_s:g}",
                # one Locust process tops out at a few hundred rps of CPU
                *(["--processes", "2"] if self.data_plane == "haproxy" else []),
            ],
        )

    def check_alive(self) -> None:
        """A child that died is the demo's failure: name it and point at its log."""
        for child in self.children:
            code = child.process.poll()
            if code is not None:
                raise DemoError(f"{child.name} exited with status {code}; see {child.log}")

    def _spawn(self, name: str, args: list[str]) -> None:
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        path = logs / f"{name}.log"
        with path.open("ab") as log:
            process = spawn([*_CLI, *args], env=self.env(), stdout=log, stderr=log)
        self.children.append(_Child(name, process, path))

    def _wait_http(self, url: str, what: str, timeout_s: float = 30.0) -> None:
        if not wait_until(
            lambda: http_ok(url), timeout_s=timeout_s, interval_s=0.2, alive=self.check_alive
        ):
            raise DemoError(f"{what} did not answer {url} within {timeout_s:g}s")

    def stop(self) -> list[str]:
        """Stop every child (newest first) and the server; the names of any left running."""
        for child in reversed(self.children):
            stop_group(child.process, timeout_s=25.0)
        if self.server is not None:
            self.server.stop()
        left = [c.name for c in self.children if group_alive(c.process.pid)]
        server = self.server.process if self.server is not None else None
        if server is not None and group_alive(server.pid):
            left.append("temporal")
        return left
