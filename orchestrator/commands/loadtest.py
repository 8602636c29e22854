"""``orchestrator loadtest REGION``: a Kraken-style live load test; ``report`` / ``abort`` ID.

``orchestrator loadtest eu-west --wait`` starts LiveLoadTestWorkflow and follows
its progress query step by step; without ``--wait`` it prints the workflow id. A
test that ends before its first load step (the baseline already over a threshold)
found no capacity: it exits non-zero, saying why.
``orchestrator loadtest report ID`` shows a finished test's result (or a running
one's progress) and ``orchestrator loadtest abort ID`` ends one, returning once
the routing found at its start is back.
"""

from __future__ import annotations

import asyncio
import getpass
import time
import uuid
from typing import Any

import typer
from rich.table import Table
from temporalio.client import (
    Client,
)
from temporalio.service import RPCError
from typer._click.core import Context
from typer.core import TyperGroup

from orchestrator.clients.reads import result_or_query
from orchestrator.commands.known import check_known
from orchestrator.commands.output import JSON_OPTION, console, error_reason, fail, print_json
from orchestrator.commands.temporal_call import with_client
from orchestrator.config import Settings
from orchestrator.contracts.load_test import (
    DEFAULT_MAX_ERROR_RATE,
    DEFAULT_MAX_UTILIZATION,
    DEFAULT_P99_SLO_MS,
    DEFAULT_SETTLE_S,
    DEFAULT_WINDOW_S,
    AbortInput,
    LoadTestInput,
    LoadTestProgress,
    LoadTestResult,
    PolicyChoice,
    StepSummary,
)
from orchestrator.policy.health_metrics import HealthMetric, default_lab_metrics

__all__ = ["app", "parse_metrics"]


#: metric keys ``--metric`` knows, and the threshold option of default_lab_metrics each sets
METRIC_THRESHOLDS = {
    "p99_ms": "p99_slo_ms",
    "error_rate": "max_error_rate",
    "utilization": "max_utilization",
}


class _RegionFirst(TyperGroup):
    """``loadtest REGION ...`` runs a test; ``loadtest report|abort ID`` are subcommands."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_RegionFirst,
    help=(
        "Live load tests: move traffic onto a region step by step and find its capacity.\n\n"
        "orchestrator loadtest REGION [--metric KEY[=NOMORE]] [--wait] [--json]"
    ),
    no_args_is_help=True,
)


def parse_metrics(
    specs: list[str], region: str, service: str, window_s: float
) -> list[HealthMetric] | None:
    """``KEY`` or ``KEY=NOMORE`` specs as banded metrics (None: the whole default set)."""
    if not specs:
        return None
    thresholds: dict[str, float] = {
        "p99_slo_ms": DEFAULT_P99_SLO_MS,
        "max_error_rate": DEFAULT_MAX_ERROR_RATE,
        "max_utilization": DEFAULT_MAX_UTILIZATION,
    }
    keys: list[str] = []
    for spec in specs:
        key, sep, value = spec.partition("=")
        key = key.strip()
        if key not in METRIC_THRESHOLDS:
            fail(f"--metric {spec!r}: key must be one of {sorted(METRIC_THRESHOLDS)}")
        if sep:
            try:
                thresholds[METRIC_THRESHOLDS[key]] = float(value)
            except ValueError:
                fail(f"--metric {spec!r}: the NOMORE threshold must be a number")
        keys.append(key)
    try:
        metrics = default_lab_metrics(region, service=service, window_s=window_s, **thresholds)
    except ValueError as exc:
        fail(f"--metric: {error_reason(exc)}")
    return [m for m in metrics if m.key in keys]


@app.command("run", hidden=True)
def run(
    region: str = typer.Argument(..., help="The region to load."),
    service: str = typer.Option("web", help="The service pool whose capacity is measured."),
    metric: list[str] = typer.Option(
        [],
        "--metric",
        "-m",
        help=(
            "Watch KEY (p99_ms, error_rate, utilization) or KEY=NOMORE [default: all three, "
            f"p99_ms={DEFAULT_P99_SLO_MS:g}, error_rate={DEFAULT_MAX_ERROR_RATE:g}, "
            f"utilization={DEFAULT_MAX_UTILIZATION:g}]."
        ),
    ),
    window: float = typer.Option(
        DEFAULT_WINDOW_S, "--window", min=0.1, help="Seconds judged per step."
    ),
    settle: float = typer.Option(
        DEFAULT_SETTLE_S, "--settle", min=0.0, help="Seconds to settle per step."
    ),
    max_steps: int = typer.Option(20, "--max-steps", min=1, max=200),
    policy: str = typer.Option("adaptive", help="adaptive, or kraken_fixed (15%/1% steps)."),
    workflow_id: str | None = typer.Option(None, "--id", help="Workflow id to use."),
    reason: str = typer.Option("", help="Recorded with the override."),
    wait: bool = typer.Option(False, "--wait", help="Follow the test until it ends."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Start a load test on REGION (and with --wait, follow it to the end)."""
    if policy not in ("adaptive", "kraken_fixed"):
        fail(f"--policy must be adaptive or kraken_fixed, not {policy!r}")
    try:
        inp = LoadTestInput(
            region=region,
            service=service,
            metrics=parse_metrics(metric, region, service, window),
            window_s=window,
            settle_s=settle,
            max_steps=max_steps,
            policy=PolicyChoice.model_validate({"kind": policy}),
            reason=reason or f"load test by {getpass.getuser()}",
        )
    except ValueError as exc:
        fail(f"invalid load test: {error_reason(exc)}")
    wid = workflow_id or f"loadtest-{region}-{uuid.uuid4().hex[:8]}"

    async def body(client: Client, settings: Settings) -> LoadTestResult | None:
        await check_known(settings, regions=[region], services=[service])
        handle = await client.start_workflow(
            "LiveLoadTestWorkflow",
            inp,
            id=wid,
            task_queue=settings.task_queue,
            result_type=LoadTestResult,
        )
        if not wait:
            return None
        if not as_json:
            await _follow(client, wid)
        return await handle.result()

    result = with_client(body, "load test")
    if result is None:
        if as_json:
            print_json({"workflow_id": wid})
        else:
            console.print(f"load test started: {wid}  (orchestrator loadtest report {wid})")
        return
    if as_json:
        print_json(result)
    else:
        _print_result(result)
    if result.steps == 0:
        # Nothing was measured past the baseline: the estimate is no capacity at all.
        fail(f"{result.workflow_id} took no load step, so it found no capacity: {result.reason}")


@app.command("report")
def report(
    workflow_id: str = typer.Argument(..., metavar="ID", help="The load test's workflow id."),
    as_json: bool = JSON_OPTION,
) -> None:
    """A finished test's result, or a running test's progress."""

    async def body(client: Client, _settings: Settings) -> LoadTestResult | LoadTestProgress:
        answer: LoadTestResult | LoadTestProgress = await result_or_query(
            client, workflow_id, LoadTestResult, "progress", LoadTestProgress
        )
        return answer

    answer = with_client(body, "load test")
    if as_json:
        print_json(answer)
    elif isinstance(answer, LoadTestResult):
        _print_result(answer)
    else:
        _print_progress(answer)


@app.command("abort")
def abort(
    workflow_id: str = typer.Argument(..., metavar="ID"),
    reason: str = typer.Option("aborted from the CLI", help="Recorded in the result."),
    as_json: bool = JSON_OPTION,
) -> None:
    """End a running test; returns once the routing found at its start is back."""

    async def body(client: Client, _settings: Settings) -> LoadTestProgress:
        handle = client.get_workflow_handle(workflow_id)
        return await handle.execute_update(
            "abort",
            AbortInput(by=getpass.getuser(), reason=reason),
            result_type=LoadTestProgress,
        )

    progress = with_client(body, "load test")
    if as_json:
        print_json(progress)
    else:
        console.print(f"{workflow_id} aborted; routing restored ({progress.steps} steps taken)")


async def _follow(client: Client, workflow_id: str) -> None:
    """Print each step as the progress query reports it, until the test ends."""
    handle = client.get_workflow_handle(workflow_id)
    shown = 0
    last_phase = last_reason = ""
    started = time.monotonic()
    while True:
        try:
            progress = await handle.query("progress", result_type=LoadTestProgress)
        except RPCError:
            await asyncio.sleep(1.0)
            continue
        for step in progress.history[shown:]:
            console.print(_step_line(step, progress.theoretical_capacity), highlight=False)
        shown = len(progress.history)
        if progress.phase != last_phase or (
            progress.phase == "waiting" and progress.last_reason != last_reason
        ):
            why = f": {progress.last_reason}" if progress.phase == "waiting" else ""
            console.print(
                f"[dim]{time.monotonic() - started:6.1f}s  {progress.phase}{why}[/]",
                highlight=False,
            )
            last_phase, last_reason = progress.phase, progress.last_reason
        if progress.phase in ("done", "failed"):
            return
        await asyncio.sleep(1.0)


def _step_line(step: StepSummary, theoretical: float | None) -> str:
    of = f" ({step.load / theoretical:.0%} of theoretical)" if theoretical else ""
    pin = "baseline" if step.pin_share is None else f"pin {step.pin_share:.1%}"
    values = ", ".join(
        f"{r.key}={r.value:.3g}" if r.value is not None else f"{r.key}=missing"
        for r in step.readings
    )
    return f"step {step.index:2d}  {pin:10s} load {step.load:8.1f}{of}  {step.band.name}  {values}"


def _print_progress(p: LoadTestProgress) -> None:
    console.print(
        f"{p.workflow_id}: {p.phase}, {p.steps} steps on {p.region}/{p.service}; {p.last_reason}",
        highlight=False,
    )
    for step in p.history:
        console.print(_step_line(step, p.theoretical_capacity), highlight=False)


def _print_result(r: LoadTestResult) -> None:
    console.print(
        f"{r.workflow_id}: {r.outcome} after {r.steps} steps: {r.reason}", highlight=False
    )
    table = Table("step", "pin", "load", "band", *(x.key for x in r.history[0].readings))
    for step in r.history:
        table.add_row(
            str(step.index),
            "-" if step.pin_share is None else f"{step.pin_share:.1%}",
            f"{step.load:.1f}",
            step.band.name,
            *(_value(x.value) for x in step.readings),
        )
    console.print(table)
    summary: list[tuple[str, Any]] = [
        ("capacity estimate", f"{r.estimate.load:.1f} rps ({r.estimate.method})"),
        ("theoretical", f"{r.theoretical_capacity:.1f} rps"),
        ("ratio", f"{r.capacity_ratio:.1%}"),
        ("bottleneck", r.bottleneck or "-"),
        ("load reached", f"{r.load_reached:.1f} rps"),
        ("routing written by", "the rebalancer" if r.writer == "rebalancer" else "the test"),
        ("routing restored", _restored(r)),
    ]
    for name, value in summary:
        console.print(f"{name:>18}: {value}", highlight=False)


def _restored(r: LoadTestResult) -> str:
    how = r.routing_check or f"largest difference {r.routing_max_difference}"
    return f"{'yes' if r.routing_restored else 'NO'} ({how})"


def _value(value: float | None) -> str:
    return "missing" if value is None else f"{value:.4g}"
