"""The fleet over HAProxy's runtime API: routing in a live map, service pools as server weights."""

from __future__ import annotations

from orchestrator.fleet.haproxy.fleet import HAProxyFleet, load_topology
from orchestrator.fleet.haproxy.runtime import RuntimeApi

__all__ = ["HAProxyFleet", "RuntimeApi", "load_topology"]
