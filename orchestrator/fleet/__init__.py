"""The port to infrastructure: the :class:`Fleet` protocol and its HTTP client."""

from __future__ import annotations

from orchestrator.fleet.http import DEFAULT_TIMEOUT_S, HttpFleet
from orchestrator.fleet.protocol import Fleet

__all__ = ["DEFAULT_TIMEOUT_S", "Fleet", "HttpFleet"]
