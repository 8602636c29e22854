"""``orchestrator demo``: every capability once, on the embedded stack, in a few minutes."""

from __future__ import annotations

from pathlib import Path

import typer

from orchestrator.commands.output import console, fail
from orchestrator.exceptions import OrchestratorError

__all__ = ["register"]


def demo(
    keep: bool = typer.Option(False, "--keep", help="Leave the stack running until Ctrl-C."),
    workdir: Path = typer.Option(
        Path("demo-output"), "--out", help="Logs, lab config and HTML reports go here."
    ),
    temporal_port: int = typer.Option(7233, "--temporal-port", min=1, max=65535),
    ui_port: int = typer.Option(8233, "--ui-port", min=1, max=65535),
    lab_port: int = typer.Option(8080, "--lab-port", min=1, max=65535),
    rps: float | None = typer.Option(
        None,
        "--rps",
        min=10.0,
        help="Locust traffic, requests/s [default: 120; 1,200 with --data-plane haproxy].",
    ),
    data_plane: str = typer.Option(
        "python",
        "--data-plane",
        help="python (the lab serves every PoP) or haproxy (a real HAProxy in front of a "
        "process per region, every scenario at 10x the traffic).",
    ),
    only: list[str] = typer.Option(
        [],
        "--only",
        help="Run only these scenarios: rebalance, loadtest, drain, training, building.",
    ),
) -> None:
    """Run the main scenario: rebalance, load test, drain and restore, training recovery."""
    from orchestrator.demo.run import DemoOptions, run_demo
    from orchestrator.demo.stack import DataPlane, DemoPorts
    from orchestrator.processes import interrupt_on_signals

    if data_plane not in ("python", "haproxy"):
        fail(f"--data-plane must be python or haproxy, not {data_plane!r}")
    plane: DataPlane = "haproxy" if data_plane == "haproxy" else "python"
    ports = DemoPorts(temporal=temporal_port, ui=ui_port, lab=lab_port)
    # SIGTERM takes Ctrl-C's path, through the demo's finally that stops its stack.
    try:
        with interrupt_on_signals():
            code = run_demo(DemoOptions(workdir, ports, keep, console, rps, only, plane))
    except OrchestratorError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted; the demo's processes are stopped", 130)
    if code:
        fail("the demo did not end as it should; see the summary above", code)


def register(app: typer.Typer) -> None:
    app.command()(demo)
