"""``orchestrator status``: how the fleet is doing, region by region, and where traffic goes."""

from __future__ import annotations

import asyncio
from typing import Any

import typer
from rich.table import Table

from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.exceptions import ConfigError, FleetError
from orchestrator.fleet.protocol import Fleet
from orchestrator.models import HealthReport, RoutingTable, Topology

__all__ = ["fleet_for", "register", "routing_summary", "status_report"]


def fleet_for(url: str | None = None) -> Fleet:
    """The fleet from settings (ORCHESTRATOR_FLEET_URL, token, TLS), ``url`` overriding."""
    from orchestrator.config import load_settings
    from orchestrator.fleet.configured import fleet_from_settings

    settings = load_settings()
    if url:
        settings = settings.model_copy(update={"fleet_url": url.rstrip("/")})
    return fleet_from_settings(settings)


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
    topology: Topology, routing: RoutingTable, health: HealthReport
) -> dict[str, Any]:
    regions = []
    for region in topology.regions:
        h = health.region(region.name)
        regions.append(
            {
                "region": region.name,
                "status": region.status.value,
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
    }


async def _gather(fleet: Fleet) -> dict[str, Any]:
    try:
        topology = await fleet.topology()
        routing = await fleet.routing()
        health = await fleet.health()
    finally:
        await fleet.aclose()
    return status_report(topology, routing, health)


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


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        json_output: bool = JSON_OPTION,
        fleet_url: str | None = typer.Option(
            None, "--fleet", help="Fleet API base URL (default: ORCHESTRATOR_FLEET_URL)."
        ),
    ) -> None:
        """Regions with utilization, rps, p99 and error rate; where the routing sends traffic."""
        try:
            report = asyncio.run(_gather(fleet_for(fleet_url)))
        except (FleetError, ConfigError, ValueError) as exc:
            fail(str(exc))
        if json_output:
            print_json(report)
        else:
            _print(report)
