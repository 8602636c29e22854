"""``orchestrator status``: how the fleet is doing, region by region, and where traffic goes.

A region's status is the fleet's (its topology: static configuration) unless a run of
ours says more: ``draining`` (or ``restoring``) while a drain (or restore) of it is open,
``drained`` while a drain's rebalancer hold keeps it at 0. Those come from Temporal, best
effort: when it cannot be reached the fleet's status is shown, and one line says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import typer
from rich.table import Table
from temporalio.client import Client
from temporalio.service import RPCError

from orchestrator.clients.overrides import rebalancer_holds
from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.config import Settings
from orchestrator.contracts.runbook import override_owner
from orchestrator.exceptions import ConfigError, FleetError, OrchestratorError
from orchestrator.fleet.protocol import Fleet
from orchestrator.models import HealthReport, RoutingTable, Topology
from orchestrator.policy.rebalance.inputs import Override

__all__ = [
    "RunState",
    "fleet_for",
    "region_states",
    "register",
    "routing_summary",
    "status_report",
]

#: how long status waits on Temporal for the runs and holds before showing the fleet's view
RUNS_TIMEOUT_S = 8.0


class RunState:
    """What Temporal says about drains: open runs (region -> run kind) and the
    rebalancer's holds; ``note`` says why they are unknown (then both are empty)."""

    def __init__(
        self,
        open_runs: Mapping[str, str] | None = None,
        holds: Sequence[Override] = (),
        note: str = "",
    ) -> None:
        self.open_runs = dict(open_runs or {})
        self.holds = list(holds)
        self.note = note

    @property
    def known(self) -> bool:
        return not self.note


def region_states(
    configured: Mapping[str, str], open_runs: Mapping[str, str], holds: Sequence[Override]
) -> dict[str, str]:
    """Region -> the status to show.

    ``configured`` is the fleet's own status per region; ``open_runs`` the kind
    (``drain``/``restore``) of a run of a region still open; ``holds`` the rebalancer's
    overrides. An open drain says ``draining``, an open restore ``restoring``; with no run
    open, a drain's hold (owner ``runbook:<region>``) at 0 says ``drained``, one above 0
    ``held at N%`` (a drain that stopped part-way).
    """
    drains = {
        h.region: h.max_share
        for h in holds
        if h.owner == override_owner(h.region) and h.max_share is not None
    }
    shown: dict[str, str] = {}
    for region, status in configured.items():
        kind = open_runs.get(region)
        share = drains.get(region)
        if kind == "drain":
            shown[region] = "draining"
        elif kind == "restore":
            shown[region] = "restoring"
        elif share is not None and share <= 0.0:
            shown[region] = "drained"
        elif share is not None:
            shown[region] = f"held at {share:.0%}"
        else:
            shown[region] = status
    return shown


def settings_for(url: str | None = None) -> Settings:
    """Settings (ORCHESTRATOR_FLEET_URL, token, TLS, Temporal), ``url`` overriding the fleet's."""
    from orchestrator.config import load_settings

    settings = load_settings()
    if url:
        settings = settings.model_copy(update={"fleet_url": url.rstrip("/")})
    return settings


def fleet_for(url: str | None = None) -> Fleet:
    """The fleet from settings (ORCHESTRATOR_FLEET_URL, token, TLS), ``url`` overriding."""
    from orchestrator.promhealth.configured import fleet_from_settings

    return fleet_from_settings(settings_for(url))


def routing_summary(topology: Topology, routing: RoutingTable) -> dict[str, Any]:
    """Each region's share of all edge demand, weighting PoPs by their demand."""
    total = sum(p.demand_weight for p in topology.pops) or 1.0
    shares = dict.fromkeys(topology.region_names, 0.0)
    for pop in topology.pops:
        for region, fraction in routing.fractions.get(pop.name, {}).items():
            shares[region] = shares.get(region, 0.0) + fraction * pop.demand_weight / total
    return {
        "version": routing.version,
        "updated_at": routing.updated_at,
        "reason": routing.reason,
        "demand_share": shares,
    }


def status_report(
    topology: Topology, routing: RoutingTable, health: HealthReport, runs: RunState | None = None
) -> dict[str, Any]:
    runs = runs if runs is not None else RunState(note="not asked")
    shown = region_states(
        {r.name: r.status.value for r in topology.regions}, runs.open_runs, runs.holds
    )
    regions = []
    for region in topology.regions:
        h = health.region(region.name)
        regions.append(
            {
                "region": region.name,
                "status": shown[region.name],
                "fleet_status": region.status.value,
                "utilization": h.utilization,
                "rps": h.rps,
                "p99_ms": h.p99_ms,
                "error_rate": h.error_rate,
                "samples": h.samples,
            }
        )
    return {
        "window_s": health.window_s,
        "observed_at": health.observed_at,
        "regions": regions,
        "routing": routing_summary(topology, routing),
        "runs": {"known": runs.known, "note": runs.note},
    }


async def _open_runs(client: Client, task_queue: str) -> dict[str, str]:
    from orchestrator.temporal import REGION, RUN_KIND

    found: dict[str, str] = {}
    query = (
        "(RunKind = 'drain' OR RunKind = 'restore') AND ExecutionStatus = 'Running'"
        f" AND TaskQueue = '{task_queue}'"
    )
    async for execution in client.list_workflows(query):
        region = execution.typed_search_attributes.get(REGION)
        kind = execution.typed_search_attributes.get(RUN_KIND)
        # A drain open on a region says more than a restore of it.
        if region and kind and found.get(region) != "drain":
            found[region] = kind
    return found


async def run_state(settings: Settings) -> RunState:
    """Open drains and restores and the rebalancer's holds; best effort (see ``note``)."""
    from orchestrator.temporal import connect

    async def ask() -> RunState:
        client = await connect(settings)
        return RunState(
            await _open_runs(client, settings.task_queue),
            await rebalancer_holds(client, timedelta(seconds=RUNS_TIMEOUT_S / 2)),
        )

    try:
        return await asyncio.wait_for(ask(), timeout=RUNS_TIMEOUT_S)
    except OrchestratorError as exc:
        return RunState(note=str(exc))
    except RPCError as exc:
        return RunState(note=f"Temporal at {settings.temporal.address}: {exc.message}")
    except TimeoutError:
        return RunState(
            note=f"Temporal at {settings.temporal.address} gave no answer within "
            f"{RUNS_TIMEOUT_S:g}s"
        )


async def _gather(fleet: Fleet, settings: Settings) -> dict[str, Any]:
    try:
        topology = await fleet.topology()
        routing = await fleet.routing()
        health = await fleet.health()
    finally:
        await fleet.aclose()
    return status_report(topology, routing, health, await run_state(settings))


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"Regions (window {report['window_s']:g}s)")
    for column in ("region", "status", "utilization", "rps", "p99 ms", "errors", "samples"):
        table.add_column(column, justify="left" if column in ("region", "status") else "right")
    for r in report["regions"]:
        table.add_row(
            r["region"],
            r["status"],
            _fmt(r["utilization"], "{:.0%}"),
            _fmt(r["rps"], "{:.1f}"),
            _fmt(r["p99_ms"], "{:.0f}"),
            _fmt(r["error_rate"], "{:.2%}"),
            str(r["samples"]),
        )
    console.print(table)
    routing = report["routing"]
    shares = ", ".join(f"{r} {s:.0%}" for r, s in routing["demand_share"].items())
    reason = f" ({routing['reason']})" if routing["reason"] else ""
    console.print(f"routing v{routing['version']}{reason}: {shares}", highlight=False)
    if not report["runs"]["known"]:
        console.print(
            f"[yellow]drains unknown[/] (status as the fleet reports it): {report['runs']['note']}",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        json_output: bool = JSON_OPTION,
        fleet_url: str | None = typer.Option(
            None, "--fleet", help="Fleet API base URL (default: ORCHESTRATOR_FLEET_URL)."
        ),
    ) -> None:
        """Regions with utilization, rps, p99 and error rate; where the routing sends traffic.

        A region a drain is moving shows draining, one a drain holds at 0 drained."""
        from orchestrator.promhealth.configured import fleet_from_settings

        try:
            settings = settings_for(fleet_url)
            report = asyncio.run(_gather(fleet_from_settings(settings), settings))
        except (FleetError, ConfigError, ValueError) as exc:
            fail(str(exc))
        if json_output:
            print_json(report)
        else:
            _print(report)
