"""``orchestrator rebalance``: Taiji-style traffic rebalancing.

``solve`` runs the pure solver on an instance file, so a user can try it on
their own numbers without a fleet or Temporal. The rebalancer workflow's
commands (start, stop, status, pause, resume) join this group as further
``@app.command()`` functions; the loading and printing helpers here are shared.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.table import Table

from orchestrator.commands.output import JSON_OPTION, console, error_reason, fail, print_json
from orchestrator.exceptions import PolicyError
from orchestrator.policy.rebalance.taiji import SolverInstance, SolverResult, solve

__all__ = ["app", "load_instance", "render_result"]

app = typer.Typer(
    help="Taiji-style traffic rebalancing: solve routing tables, run the rebalancer.",
    no_args_is_help=True,
)


def load_instance(path: Path) -> SolverInstance:
    """Read and validate an instance file; exits with one line naming the problem."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        fail(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    try:
        return SolverInstance.model_validate(data)
    except ValidationError as exc:
        fail(f"{path}: {error_reason(exc)}")


def _pct(value: float) -> str:
    return f"{value:.1%}"


def render_result(result: SolverResult) -> None:
    """Print the per-region table and the move's cost for people."""
    table = Table(title="Predicted utilization per region")
    for header in ("region", "status", "util before", "util after", "cap", "share before"):
        table.add_column(header, justify="left" if header in ("region", "status") else "right")
    table.add_column("share after", justify="right")
    for region in result.regions:
        after = _pct(region.utilization_after)
        if region.utilization_after > region.utilization_before + 1e-9:
            after = f"[yellow]{after}[/]"
        table.add_row(
            region.name,
            region.status.value,
            _pct(region.utilization_before),
            after,
            _pct(region.utilization_cap) if region.utilization_cap > 0 else "-",
            _pct(region.share_before),
            _pct(region.share_after),
        )
    console.print(table)
    change = (
        result.latency_cost / result.latency_cost_before - 1
        if result.latency_cost_before > 0
        else 0.0
    )
    # The published max never exceeds max(before, optimum) (taiji_damping), so a table
    # above the optimum is one that moved part of the way there: damping, not a worse table.
    if result.max_utilization <= result.optimal_max_utilization + 1e-6:
        where = "the optimum"
    else:
        where = (
            f"optimum {_pct(result.optimal_max_utilization)}; damping moves part of the way "
            "each epoch"
        )
    console.print(
        f"max utilization  {_pct(result.max_utilization_before)} -> "
        f"{_pct(result.max_utilization)} ({where})"
    )
    console.print(f"latency cost     {result.latency_cost:,.0f} ms^2 x load ({change:+.1%} vs now)")
    console.print(
        f"traffic moved    {result.traffic_moved:,.2f} ({_pct(result.traffic_moved_share)} "
        f"of demand); {len(result.skipped_pops)} PoPs kept their split (move under min_shift)"
    )
    if result.churn is not None:
        console.print(
            f"bucket churn     {result.churn} buckets moved (minimum possible {result.min_churn})"
        )


@app.command("solve")
def solve_command(
    input_path: Path = typer.Option(
        ..., "--input", "-i", help="Instance JSON (see docs/rebalance-instance.md)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Solve one rebalancing epoch for an instance file and print the new table."""
    instance = load_instance(input_path)
    try:
        result = solve(instance)
    except PolicyError as exc:
        fail(str(exc))
    if as_json:
        print_json(result)
    else:
        render_result(result)
