"""``orchestrator haproxy``: check and adopt the HAProxy the orchestrator steers.

Both read ``ORCHESTRATOR_HAPROXY_*`` (docs/fleet-contract.md, "HAProxy"); options override
the socket and the map. ``check`` changes nothing and exits 1 when the fleet would refuse
to act; ``adopt`` makes the proxy's live routing and weights the orchestrator's own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer

from orchestrator.commands.output import JSON_OPTION, console, fail, print_json
from orchestrator.exceptions import OrchestratorError

app = typer.Typer(no_args_is_help=True, help="Check and adopt the HAProxy the orchestrator steers.")

SOCKET = typer.Option(None, "--socket", help="Runtime API address (ORCHESTRATOR_HAPROXY_SOCKET).")
MAP = typer.Option(None, "--map", help="The routing map's file name (ORCHESTRATOR_HAPROXY_MAP).")
TOPOLOGY = typer.Option(None, "--topology", help="Topology file (ORCHESTRATOR_HAPROXY_TOPOLOGY).")


def _fleet(socket: str | None, routing_map: str | None, topology: Path | None) -> Any:
    from orchestrator.config import load_settings
    from orchestrator.fleet.configured import haproxy_fleet

    settings = load_settings()
    update: dict[str, Any] = {}
    if socket:
        update["haproxy_socket"] = socket
    if routing_map:
        update["haproxy_map"] = routing_map
    if topology:
        update["haproxy_topology"] = topology
    return haproxy_fleet(settings.model_copy(update=update))


def _show(result: Any, as_json: bool) -> None:
    if as_json:
        print_json({**result.model_dump(mode="json"), "ok": result.ok, "problems": result.problems})
        return
    state = "[green]ok[/]" if result.ok else "[red]refusing to act[/]"
    console.print(f"HAProxy {result.address} map {result.routing_map}: {state}")
    console.print(f"  boot mark {result.boot or '-'}, routing version {result.version}")
    for problem in result.problems:
        console.print(f"  [red]{problem}[/]")
    if result.missing_servers:
        console.print(f"  servers not in HAProxy: {', '.join(result.missing_servers)}")
    for name, weight in sorted(result.weights.items()):
        console.print(f"  {name}: weight {weight:.2f}")


@app.command()
def check(
    socket: str | None = SOCKET,
    routing_map: str | None = MAP,
    topology: Path | None = TOPOLOGY,
    as_json: bool = JSON_OPTION,
) -> None:
    """Report whether the proxy still holds the orchestrator's state; change nothing."""
    from orchestrator.fleet.haproxy.admin import check as run_check

    try:
        result = asyncio.run(run_check(_fleet(socket, routing_map, topology)))
    except OrchestratorError as exc:
        fail(str(exc))
    _show(result, as_json)
    if not result.ok:
        raise typer.Exit(1)


@app.command()
def adopt(
    socket: str | None = SOCKET,
    routing_map: str | None = MAP,
    topology: Path | None = TOPOLOGY,
    yes: bool = typer.Option(False, "--yes", help="Adopt without asking."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Make the proxy's live routing and weights the ones to steer from (new boot mark and
    routing version; no route or weight changes)."""
    from orchestrator.fleet.haproxy.admin import adopt as run_adopt
    from orchestrator.fleet.haproxy.admin import check as run_check

    try:
        fleet = _fleet(socket, routing_map, topology)
        if not yes:
            _show(asyncio.run(run_check(fleet)), as_json=False)
            typer.confirm("Adopt this live state?", abort=True)
        result = asyncio.run(run_adopt(fleet))
    except OrchestratorError as exc:
        fail(str(exc))
    _show(result, as_json)
