"""The lab fleet in this process, with no server: for workflow tests on Temporal's clock.

:class:`MemoryFleet` is the lab's app (model mode unless told otherwise) behind httpx's
in-memory ASGI transport, spoken to by the ordinary :class:`~orchestrator.fleet.http.HttpFleet`
client: the same contract, validation, errors, idempotency and audit log as a lab on a
port, but no thread, no socket and no port. Its timestamps (audit entries, routing
versions, health reports) come from ``clock``, by default :func:`activity_clock`: inside an
activity that is the workflow's time, so on the time-skipping server a test of a
rebalancer's epochs or a runbook's steps waits for none of them in real time.

Model mode computes health from demand and routing alone, so nothing in this fleet moves
by itself between two calls: what an activity reads depends only on what was written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.clock import Clock, activity_clock
from orchestrator.lab.config import LabConfig
from orchestrator.lab.runtime import LabRuntime, Mode
from orchestrator.lab.server import build_app

__all__ = ["MemoryFleet"]

#: where requests seem to go (nothing listens there: the transport answers them)
URL = "http://lab.memory"


class MemoryFleet(HttpFleet):
    """A lab fleet served in memory; ``runtime`` is its state for a test to look at."""

    def __init__(
        self,
        config: LabConfig | str | Path | None = None,
        *,
        mode: Mode = "model",
        faults: bool = False,
        seed: int | None = 0,
        clock: Clock | None = None,
    ) -> None:
        app = build_app(
            config, mode=mode, faults=faults, seed=seed, clock=clock or activity_clock()
        )
        self._transport = httpx.ASGITransport(app=app)
        super().__init__(URL, transport=self._transport, read_attempts=1)
        self.app = app
        self.runtime: LabRuntime = app.state.runtime

    def http(self, **kwargs: Any) -> httpx.AsyncClient:
        """A raw client for the lab's own routes (``/lab/faults``...); the caller closes it."""
        return httpx.AsyncClient(base_url=URL, transport=self._transport, **kwargs)

    async def aclose(self) -> None:
        await super().aclose()
        self.runtime.training.close()
