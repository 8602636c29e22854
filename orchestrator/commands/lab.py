"""``orchestrator lab``: serve the lab fleet, and drive live user traffic at it."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from pathlib import Path
from typing import Literal

import typer

from orchestrator.commands.output import console, fail
from orchestrator.config import clean_secret
from orchestrator.exceptions import ConfigError, FleetError

app = typer.Typer(help="The local lab fleet: a fleet you can hurt.", no_args_is_help=True)

TOKEN_ENV = "ORCHESTRATOR_LAB_TOKEN"
DEFAULT_LOCUSTFILE = Path(__file__).resolve().parents[2] / "loadtests" / "lab_traffic.py"


@app.command()
def serve(
    config: Path | None = typer.Option(
        None, "--config", help="Lab YAML config (default: the shipped 3-region lab)."
    ),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8080, "--port", min=0, max=65535),
    faults: bool = typer.Option(False, "--faults", help="Enable /lab/faults and /lab/truth."),
    mode: str = typer.Option("live", "--mode", help="live (real traffic) or model (analytic)."),
    token: str | None = typer.Option(
        None, "--token", help=f"Require this bearer token on /v1 (or set {TOKEN_ENV})."
    ),
    data_plane: str = typer.Option(
        "auto",
        "--data-plane",
        help="haproxy (a real HAProxy in front of a process per region; "
        "docs/fleet-contract.md), python (this process serves every PoP) or auto: haproxy "
        "for live traffic without --faults when it is installed, else python.",
    ),
    edge_port_base: int = typer.Option(
        0,
        "--edge-port-base",
        min=0,
        max=65535,
        help="With --data-plane haproxy: PoP frontends on this port, +1, ... (0: free ports).",
    ),
) -> None:
    """Serve the fleet API, the edge data plane and (with --faults) the lab controls."""
    from orchestrator.lab.server import build_app
    from orchestrator.lab.server import serve as run
    from orchestrator.processes import interrupt_on_signals

    if mode not in ("live", "model"):
        fail(f"--mode must be live or model, not {mode!r}")
    if data_plane not in ("auto", "python", "haproxy"):
        fail(f"--data-plane must be auto, python or haproxy, not {data_plane!r}")
    token = _token(token)
    if data_plane == "auto":
        data_plane, why = _auto_data_plane(mode, faults)
        console.print(f"data plane: {data_plane} ({why})", highlight=False)
    if data_plane == "haproxy":
        if mode != "live":
            fail("--data-plane haproxy is live traffic only (--mode model is the Python lab's)")
        _serve_haproxy(config, host, port, token, edge_port_base, faults)
        return
    chosen: Literal["live", "model"] = "live" if mode == "live" else "model"
    try:
        lab = build_app(config, mode=chosen, faults=faults, token=token)
    except ConfigError as exc:
        fail(str(exc))
    auth = "token required" if token else "no token"
    console.print(
        f"lab ({chosen} mode, faults {'on' if faults else 'off'}, {auth}) on http://{host}:{port}",
        highlight=False,
    )
    # as KeyboardInterrupt, uvicorn's re-raised SIGTERM lets serve() close the trainers
    with interrupt_on_signals():
        run(lab, host, port)


def _auto_data_plane(mode: str, faults: bool) -> tuple[str, str]:
    """``--data-plane auto``: HAProxy where it can carry the lab, and why not otherwise."""
    from orchestrator.lab.haproxy.plane import haproxy_binary

    if mode != "live":
        return "python", f"--mode {mode}"
    if faults:
        return "python", "--faults: its traffic faults are the Python lab's"
    if haproxy_binary() is None:
        return "python", "haproxy is not installed: scripts/install-system-deps.sh"
    return "haproxy", "--data-plane python for the lab's own"


def _serve_haproxy(
    config: Path | None,
    host: str,
    port: int,
    token: str | None,
    edge_port_base: int,
    faults: bool,
) -> None:
    """HAProxy and a process per region, the fleet API here; all stopped on the way out."""
    import tempfile

    from orchestrator.lab.config import load_config
    from orchestrator.lab.haproxy.app import create_haproxy_app
    from orchestrator.lab.haproxy.config import RULES
    from orchestrator.lab.haproxy.plane import HAProxyDataPlane
    from orchestrator.lab.server import run_server
    from orchestrator.processes import interrupt_on_signals

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        fail(str(exc))
    with tempfile.TemporaryDirectory(prefix="lab-haproxy-") as directory:
        plane = HAProxyDataPlane(cfg, Path(directory), edge_port_base=edge_port_base)
        try:
            plane.start()
        except (ConfigError, RuntimeError, FleetError) as exc:
            fail(f"cannot start the HAProxy data plane: {exc}")
        try:
            pops = ", ".join(f"{p} {plane.pop_url(p)}" for p in plane.layout.pop_ports)
            console.print(
                f"lab (live, HAProxy data plane, faults {'on' if faults else 'off'}) fleet "
                f"API on http://{host}:{port}; PoPs: {pops}",
                highlight=False,
            )
            console.print(
                f"Prometheus: scrape config {plane.layout.prometheus_path} (HAProxy "
                f"{plane.metrics_url}, region backends' /metrics; rules {RULES}); health "
                "queries for it: orchestrator/promhealth/haproxy-lab-queries.yaml",
                highlight=False,
            )
            # uvicorn re-raises the SIGTERM/SIGINT it stopped on; as KeyboardInterrupt
            # here, so HAProxy and the backends are stopped before this process ends,
            # and its shutdown has a deadline, so they are stopped even if it hangs.
            with interrupt_on_signals():
                run_server(create_haproxy_app(plane, token=token, faults=faults), host, port)
        finally:
            plane.stop()


@app.command()
def traffic(
    rps: float = typer.Option(..., "--rps", min=0.1, help="Total requests per second."),
    duration: float | None = typer.Option(
        None, "--duration", min=1.0, help="Seconds to run [default: until Ctrl-C or SIGTERM]."
    ),
    lab: str = typer.Option(
        "http://127.0.0.1:8080",
        "--lab",
        envvar="ORCHESTRATOR_FLEET_URL",
        help="The lab's base URL (the fleet the orchestrator uses).",
    ),
    users: int = typer.Option(
        0, "--users", min=0, help="Locust users (default: one per 2 rps, at least one per PoP)."
    ),
    sessions_share: float = typer.Option(
        0.2, "--sessions-share", min=0.0, max=1.0, help="Share of requests to the sticky service."
    ),
    locustfile: Path = typer.Option(DEFAULT_LOCUSTFILE, "--locustfile"),
    pop_weights: str | None = typer.Option(
        None,
        "--pop-weights",
        help='Demand mix instead of the topology\'s weights, e.g. "nyc=1,lon=4" (others 0).',
    ),
    shift_after: float | None = typer.Option(
        None, "--shift-after", min=0.0, help="Seconds in, move users to the --shift-weights mix."
    ),
    shift_weights: str | None = typer.Option(
        None, "--shift-weights", help='The mix after --shift-after, e.g. "lon=3,fra=2,nyc=1".'
    ),
    processes: int = typer.Option(
        1,
        "--processes",
        min=1,
        help="Locust worker processes sharing the users (one process tops out at a few "
        "hundred rps of CPU).",
    ),
) -> None:
    """Run Locust headless in its own process: users spread over PoPs by demand weight."""
    if not locustfile.is_file():
        fail(f"locustfile not found: {locustfile}")
    if (shift_after is None) != (shift_weights is None):
        fail("--shift-after and --shift-weights go together")
    token = _token(None)
    try:
        pops, sticky = asyncio.run(_pop_weights(lab, token))
    except FleetError as exc:
        fail(f"cannot read the lab topology: {exc}")
    known = dict(pops)
    if pop_weights is not None:
        pops = _parse_weights("--pop-weights", pop_weights, known)
    shift = None
    if shift_weights is not None:
        shift = {
            "after_s": shift_after,
            "pops": _parse_weights("--shift-weights", shift_weights, known),
        }
    count = users or max(len(pops), math.ceil(rps / 2.0))
    env = dict(os.environ)
    env.update(
        {
            "LAB_TRAFFIC_POPS": json.dumps(pops),
            "LAB_TRAFFIC_RPS": str(rps),
            "LAB_TRAFFIC_USERS": str(count),
            "LAB_TRAFFIC_MIX": json.dumps(
                {"web": 1.0 - sessions_share, sticky: sessions_share} if sticky else {"web": 1.0}
            ),
            "LAB_TRAFFIC_SHIFT": json.dumps(shift),
            # --data-plane haproxy: requests go to each PoP's frontend, not to the lab
            "LAB_TRAFFIC_POP_URLS": json.dumps(_pop_urls(lab)),
        }
    )
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "--host",
        lab,
        "-u",
        str(count),
        "-r",
        str(count),
        *(["--run-time", f"{math.ceil(duration)}s"] if duration is not None else []),
        "--only-summary",
        "--stop-timeout",
        "5",
        *(_processes_args(processes) if processes > 1 else []),
    ]
    until = f"for {duration:g}s" if duration is not None else "until stopped"
    console.print(
        f"locust: {count} users in {processes} process(es), {rps:g} rps total {until} against {lab}"
    )
    code = _run_until_signal(command, env)
    if code == 130:
        raise typer.Exit(130)  # stopped by a signal, as asked: Locust is stopped too
    # Locust exits 1 when any request failed; with a lab you can hurt that is expected.
    if code not in (0, 1):
        fail(f"locust exited with status {code}", code)


def _processes_args(processes: int) -> list[str]:
    """Locust's workers in ``processes`` forks, talking to their master on a free port:
    the default 5557 is taken by any other multi-process Locust on the machine."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    return ["--processes", str(processes), "--master-bind-port", port, "--master-port", port]


def _run_until_signal(command: list[str], env: dict[str, str]) -> int:
    """Run Locust to its end; SIGTERM or SIGINT stops it (and all it started) first.

    Python's default for SIGTERM is to die at once, which left Locust running and
    sending traffic to the lab after ``lab traffic`` was stopped.
    """
    from orchestrator.processes import interrupt_on_signals, spawn, stop_group

    with interrupt_on_signals():
        process = spawn(command, env=env)
        try:
            return process.wait()
        except KeyboardInterrupt:
            console.print("stopping locust")
            return 130
        finally:
            # Locust answers SIGTERM by stopping its users within --stop-timeout (5 s).
            stop_group(process, timeout_s=10.0)


def _token(option: str | None) -> str | None:
    """The lab token from ``--token`` or the environment, stripped; one line if it is unusable."""
    try:
        if option:
            return clean_secret("--token", option)
        return clean_secret(TOKEN_ENV, os.environ.get(TOKEN_ENV))
    except ConfigError as exc:
        fail(str(exc), code=2)


def _parse_weights(option: str, text: str, known: dict[str, float]) -> dict[str, float]:
    """``"nyc=1,lon=4"`` -> ``{"nyc": 1.0, "lon": 4.0}``, every PoP a known one."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or name not in known:
            fail(f"{option}: {part!r} is not POP=WEIGHT with a PoP of {sorted(known)}")
        try:
            weight = float(value)
        except ValueError:
            fail(f"{option}: weight of {name} is not a number: {value!r}")
        if not weight >= 0:
            fail(f"{option}: weight of {name} must be at least 0")
        weights[name] = weight
    if sum(weights.values()) <= 0:
        fail(f"{option}: at least one PoP needs a weight above 0")
    return {p: w for p, w in weights.items() if w > 0}


async def _pop_weights(lab: str, token: str | None) -> tuple[dict[str, float], str | None]:
    from orchestrator.fleet.http import HttpFleet

    async with HttpFleet(lab, token=token, timeout=10.0) as fleet:
        topology = await fleet.topology()
    sticky = next((s.name for s in topology.services if s.kind == "sticky"), None)
    return {p.name: p.demand_weight for p in topology.pops}, sticky


def _pop_urls(lab: str) -> dict[str, str]:
    """Each PoP's own URL when the lab's data plane is HAProxy (a port per PoP), else {}."""
    import httpx

    try:
        answer = httpx.get(f"{lab.rstrip('/')}/healthz", timeout=10.0).json()
    except (httpx.HTTPError, ValueError):
        return {}
    if not isinstance(answer, dict) or answer.get("data_plane") != "haproxy":
        return {}
    return {str(p): str(u) for p, u in answer.get("pops", {}).items()}
