"""Refuse a command that names something the fleet does not have, before anything starts.

A run started for a region, service or training job the fleet does not know used to start
anyway and fail minutes later (``undrain xx-nowhere`` restored kv primaries for two
minutes and ended ``rollback_failed``). Every command that starts a run checks its names
here first: one line, a non-zero exit, and no workflow started.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from orchestrator.config import Settings
from orchestrator.contracts.runbook import RunbookRunInput
from orchestrator.exceptions import OrchestratorError
from orchestrator.models import Topology
from orchestrator.promhealth.configured import fleet_from_settings

__all__ = [
    "UnknownName",
    "buildings_in_runbook",
    "check_known",
    "names_in_runbook",
    "unknown_names",
]

#: region selectors a predicate or argument may use that are not region names
_SELECTORS = ("all",)


class UnknownName(OrchestratorError):
    """A region, service or training job the fleet does not have."""


def _unknown(kind: str, asked: Iterable[str], known: Iterable[str]) -> list[str]:
    have = sorted(set(known))
    missing = sorted({a for a in asked if a not in have})
    if not missing:
        return []
    return [f"unknown {kind} {', '.join(map(repr, missing))} (the fleet has: {', '.join(have)})"]


def unknown_names(
    topology: Topology,
    *,
    regions: Iterable[str] = (),
    services: Iterable[str] = (),
    jobs: Iterable[str] = (),
    known_jobs: Iterable[str] = (),
    buildings: Iterable[str] = (),
) -> list[str]:
    """One line per kind of name the fleet does not have; empty when all are known."""
    regions = [
        r for r in regions if r not in _SELECTORS and not r.startswith(("others-of(", "region-of("))
    ]
    return (
        _unknown("region", regions, topology.region_names)
        + _unknown("building", buildings, (b.name for b in topology.buildings))
        + _unknown("service", services, (s.name for s in topology.services))
        + _unknown("training job", jobs, known_jobs)
    )


def names_in_runbook(inp: RunbookRunInput) -> tuple[set[str], set[str]]:
    """The regions and services a bound runbook's tasks name in their arguments."""
    regions: set[str] = set()
    services: set[str] = set()
    for task in inp.runbook.tasks:
        args: dict[str, Any] = task.args
        if isinstance(args.get("region"), str):
            regions.add(args["region"])
        if isinstance(args.get("service"), str) and args["service"]:
            services.add(args["service"])
    return regions, services


def buildings_in_runbook(inp: RunbookRunInput) -> set[str]:
    """The buildings a bound runbook's tasks name (``building:`` arguments)."""
    return {
        str(task.args["building"])
        for task in inp.runbook.tasks
        if isinstance(task.args.get("building"), str)
    }


async def check_known(
    settings: Settings,
    *,
    regions: Iterable[str] = (),
    services: Iterable[str] = (),
    jobs: Iterable[str] = (),
    buildings: Iterable[str] = (),
) -> None:
    """Raise :class:`UnknownName` naming what the fleet does not have; nothing to check, no
    fleet call."""
    regions, services, jobs = list(regions), list(services), list(jobs)
    buildings = list(buildings)
    if not (regions or services or jobs or buildings):
        return
    fleet = fleet_from_settings(settings)
    try:
        topology = await fleet.topology()
        known_jobs = [j.spec.name for j in (await fleet.training_cluster()).jobs] if jobs else []
    finally:
        await fleet.aclose()
    problems = unknown_names(
        topology,
        regions=regions,
        services=services,
        jobs=jobs,
        known_jobs=known_jobs,
        buildings=buildings,
    )
    if problems:
        raise UnknownName("; ".join(problems) + ": nothing was started")
