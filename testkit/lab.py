"""Labs started for a test or a benchmark run: on a free port, waited for, stopped by the caller.

In-process labs run uvicorn in a thread (fast, and ``lab.runtime`` lets a test look at
the fleet's state directly); ``subprocess=True`` starts ``orchestrator lab serve`` for real.
"""

from __future__ import annotations

import os
import subprocess as sp
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import LabConfig, load_config
from orchestrator.lab.runtime import LabRuntime
from orchestrator.lab.server import LabThread, build_app
from orchestrator.ports import free_port
from orchestrator.waiting import exited, http_ok, wait_until

__all__ = ["ROOMY_RPS", "LabClock", "Mode", "RunningLab", "lab_config", "launch_lab"]

#: edge demand low enough that two regions take the third's load under 75%, so the drain
#: capacity check lets a drain of any one region start (the default demand leaves no room)
ROOMY_RPS = 120.0


def lab_config(**changes: Any) -> LabConfig:
    """The shipped lab config with ``changes``."""
    return load_config(None).model_copy(update=changes)


Mode = Literal["live", "model"]


@dataclass
class RunningLab:
    url: str
    mode: Mode
    faults: bool
    token: str | None = None
    #: the in-process lab's state and physics (None for a subprocess lab)
    runtime: LabRuntime | None = None
    _thread: LabThread | None = None
    _process: sp.Popen[bytes] | None = None
    _fleets: list[HttpFleet] = field(default_factory=list)

    def fleet(
        self, *, token: str | None | Literal["lab"] = "lab", timeout: float = 5.0
    ) -> HttpFleet:
        """An HttpFleet to this lab (with the lab's token unless told otherwise)."""
        chosen = self.token if token == "lab" else token
        client = HttpFleet(self.url, token=chosen, timeout=timeout)
        self._fleets.append(client)
        return client

    def http(self, **kwargs: Any) -> httpx.AsyncClient:
        """A raw client for the lab's endpoints (the caller closes it)."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10.0, **kwargs)

    async def aclose(self) -> None:
        for client in self._fleets:
            await client.aclose()
        self._fleets.clear()

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except sp.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)


def _wait_healthy(url: str, process: sp.Popen[bytes] | None, timeout_s: float = 30.0) -> None:
    alive = None if process is None else exited(process, "the lab")
    if not wait_until(lambda: http_ok(f"{url}/healthz"), timeout_s=timeout_s, alive=alive):
        raise RuntimeError(f"lab at {url} did not answer /healthz within {timeout_s:g}s")


class LabClock:
    """A model lab's clock: real time plus what a test skipped. A job in a model lab steps
    on its lab's clock, and a test that has seen what it came for (the faults, moves and
    recoveries) skips the lab to the job's end instead of waiting out the rest of its steps."""

    def __init__(self) -> None:
        self.skipped = 0.0

    def __call__(self) -> float:
        return time.time() + self.skipped

    def skip(self, seconds: float) -> None:
        self.skipped += seconds


def launch_lab(
    config: LabConfig | str | Path | None = None,
    *,
    mode: Mode = "live",
    faults: bool = False,
    token: str | None = None,
    seed: int | None = 0,
    subprocess: bool = False,
    clock: Callable[[], float] | None = None,
) -> RunningLab:
    """Start a lab and wait until /healthz answers. The caller must ``stop()`` it.
    ``clock``: the fleet's time in model mode (a :class:`LabClock`); in-process labs only."""
    if not subprocess:
        app = build_app(
            config, mode=mode, faults=faults, token=token, seed=seed, clock=clock or time.time
        )
        thread = LabThread(app).start()
        lab = RunningLab(thread.url, mode, faults, token, app.state.runtime, _thread=thread)
        _wait_healthy(lab.url, None)
        return lab
    if isinstance(config, LabConfig):
        raise TypeError("a subprocess lab takes a config file path, not a LabConfig")
    if clock is not None:
        raise TypeError("a subprocess lab runs on its own clock")
    port = free_port()
    command = [
        sys.executable,
        "-c",
        "from orchestrator.cli import app; app()",
        "lab",
        "serve",
        "--data-plane",
        "python",
        "--port",
        str(port),
        "--mode",
        mode,
    ]
    if config is not None:
        command += ["--config", str(config)]
    if faults:
        command.append("--faults")
    env = dict(os.environ)
    env.pop("ORCHESTRATOR_LAB_TOKEN", None)
    if token:
        env["ORCHESTRATOR_LAB_TOKEN"] = token  # not on the command line: ps would show it
    process = sp.Popen(command, env=env, stdout=sp.DEVNULL, stderr=sp.PIPE)
    lab = RunningLab(f"http://127.0.0.1:{port}", mode, faults, token, _process=process)
    try:
        _wait_healthy(lab.url, process)
    except RuntimeError:
        lab.stop()
        raise
    return lab
