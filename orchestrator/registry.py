"""What the worker runs. A capability registers here by adding to these two functions;
the worker itself never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.config import Settings
from orchestrator.fleet.protocol import Fleet

__all__ = ["ActivityContext", "activities", "workflows"]


@dataclass(frozen=True)
class ActivityContext:
    """Long-lived resources that activity instances share within one worker."""

    settings: Settings
    fleet: Fleet


def workflows() -> list[type]:
    from workflows.fleet_snapshot import FleetSnapshotWorkflow

    return [FleetSnapshotWorkflow]


def activities(ctx: ActivityContext) -> list[Callable[..., Any]]:
    from orchestrator.activities.fleet_reads import FleetReadActivities

    reads = FleetReadActivities(ctx.fleet)
    return [reads.read_topology, reads.read_routing, reads.read_health]
