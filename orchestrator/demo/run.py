"""``orchestrator demo``: the main scenario, start to finish, on the embedded stack.

Starts a Temporal dev server (with UI), the lab fleet (live traffic, faults on), a
worker and Locust, then runs the rebalancer, a live load test, a drain and restore
under traffic and a training job through two failures; writes an HTML report per
scenario, prints one summary table and stops every process it started (unless
``keep``).

With ``data_plane="haproxy"`` the lab's traffic goes through a real HAProxy (a frontend
per PoP, the routing as a live map, a process per region) at 10x the traffic and the
pools, every scenario as on the Python data plane: its training faults and building power
are the lab's beside HAProxy (``orchestrator/lab/haproxy/``).
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from orchestrator.demo import scenarios
from orchestrator.demo.answers import AnswerCounter, haproxy_answers, lab_truth_answers
from orchestrator.demo.building import BUILDING_JOB, BUILDING_REGION, building_incident
from orchestrator.demo.scenarios import DemoContext, ScenarioSummary
from orchestrator.demo.stack import DataPlane, DemoError, DemoPorts, DemoStack
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DEFAULT_CONFIG_PATH
from orchestrator.reports import write_report
from orchestrator.temporal import data_converter
from orchestrator.waiting import wait_until

__all__ = ["DemoOptions", "demo_lab_config", "haproxy_lab_config", "run_demo"]

#: edge requests per second of Locust traffic by data plane: two regions can take the
#: third's load (HAProxy's lab has every web and sessions pool 10x the Python lab's)
TRAFFIC_RPS: dict[DataPlane, float] = {"python": 120.0, "haproxy": 1200.0}

SCENARIOS: dict[str, Callable[[DemoContext], Awaitable[ScenarioSummary]]] = {
    "rebalance": scenarios.rebalance,
    "loadtest": scenarios.load_test,
    "drain": scenarios.drain_and_restore,
    "training": scenarios.training,
    "building": building_incident,
}


class DemoOptions:
    def __init__(
        self,
        workdir: Path,
        ports: DemoPorts,
        keep: bool,
        console: Console,
        rps: float | None = None,
        only: list[str] | None = None,
        data_plane: DataPlane = "python",
    ) -> None:
        self.workdir, self.ports, self.keep, self.console = workdir, ports, keep, console
        self.data_plane = data_plane
        self.rps = TRAFFIC_RPS[data_plane] if rps is None else rps
        unknown = sorted(set(only or []) - set(SCENARIOS))
        if unknown:
            raise DemoError(f"--only {unknown[0]}: not a scenario; one of {', '.join(SCENARIOS)}")
        self.scenarios = [name for name in SCENARIOS if name in only] if only else list(SCENARIOS)


def demo_lab_config() -> dict[str, Any]:
    """The shipped lab, routed nearest-region first (so there is something to balance) and
    with health windows of seconds, so each step of the demo is judged quickly."""
    config: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    config["initial_routing"] = "nearest"
    config["metrics"] = {"window_s": scenarios.WINDOW_S, "retention_s": 60}
    # Cold buckets cost 1.5x for 2 s: visible in p99, not enough to fail the gates.
    config["cold"].update({"factor": 1.5, "warm_after_s": 2.0})
    # The lab is one asyncio process sharing two cores with Locust, Temporal and the
    # worker: a stall of a few hundred ms lets a burst of arrivals find every web slot
    # held, and a 16-deep queue turns that into 503s at 50% utilization, which is the
    # simulator's jitter rather than the fleet's capacity (measured: every 5xx during the
    # drain was "Overloaded" in a region at 0.45-0.55). A deeper queue shows a burst as
    # latency, which the SLO gates still judge.
    for region in config["regions"]:
        web = region["services"]["web"]
        web["queue_limit"] = max(web["queue_limit"], 4 * web["slots"])
    # The building scenario's job: long enough to be recovered once while its building's
    # traffic moves (1,500 steps of 20 ms, the numpy trainer)
    building_job = dict(config["training"]["jobs"][0])
    building_job.update({"name": BUILDING_JOB, "region": BUILDING_REGION, "total_steps": 1500})
    # The PyTorch job (DDP over gloo, one torchrun agent per host, DCP checkpoints), long
    # enough to be hit twice and recover twice. Ranks beat every second: a rank sharing
    # two cores with Locust, Temporal and the lab can miss a beat without being hung.
    config["training"]["jobs"][0].update(
        {
            "kind": "torch",
            "total_steps": scenarios.TRAINING_STEPS,
            "checkpoint_every": 10,
            "step_ms": 50,
            "heartbeat_s": 1.0,
        }
    )
    config["training"]["jobs"].append(building_job)
    return config


def haproxy_lab_config() -> dict[str, Any]:
    """The demo's lab for the HAProxy data plane: every web and sessions pool (slots and
    queue) 10x the shipped one for 10x the traffic, so utilizations are the Python demo's.
    HAProxy holds a burst in each server's own queue, so the deeper queues the Python lab
    needs against its event loop's stalls are not added. Its training jobs are the Python
    demo's (the PyTorch job and the building's job)."""
    config = demo_lab_config()
    shipped: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    scale = TRAFFIC_RPS["haproxy"] / TRAFFIC_RPS["python"]
    for region, original in zip(config["regions"], shipped["regions"], strict=True):
        for service in ("web", "sessions"):
            pool = original["services"][service]
            region["services"][service].update(
                {k: round(pool[k] * scale) for k in ("slots", "queue_limit")}
            )
    return config


class _Progress:
    """One live status line on a terminal; a line every few seconds otherwise (CI logs)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status = console.status("") if console.is_terminal else None
        self._last = 0.0

    def __enter__(self) -> _Progress:
        if self.status is not None:
            self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)

    def say(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)
        elif time.monotonic() - self._last >= 5.0:
            self._last = time.monotonic()
            self.console.print(f"  {text}", highlight=False)

    def line(self, text: str) -> None:
        self.console.print(text, highlight=False)


def summary_table(rows: list[ScenarioSummary]) -> Table:
    table = Table(title="demo summary", title_justify="left")
    for column in ("scenario", "result", "what happened", "took", "user 5xx", "capacity", "ETTR"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.name,
            "[green]ok[/]" if row.ok else "[red]FAILED[/]",
            row.what,
            f"{row.duration_s:.0f}s",
            f"{row.user_5xx} of {row.user_requests}",
            row.capacity or "-",
            "-" if row.ettr is None else f"{row.ettr:.1%}",
        )
    return table


async def _answers(stack: DemoStack, lab: httpx.AsyncClient) -> AnswerCounter:
    if stack.data_plane == "python":
        return lab_truth_answers(lab)
    served = (await lab.get("/healthz")).json()
    return haproxy_answers(lab, served["haproxy_metrics"], list(served["pops"]))


async def _scenarios(
    stack: DemoStack, progress: _Progress, names: list[str], reports_dir: Path
) -> list[ScenarioSummary]:
    client = await Client.connect(stack.temporal_address, data_converter=data_converter)
    async with (
        HttpFleet(stack.lab_url, timeout=10.0) as fleet,
        httpx.AsyncClient(base_url=stack.lab_url, timeout=10.0) as lab,
    ):
        answers = await _answers(stack, lab)
        ctx = DemoContext(client, fleet, lab, stack.task_queue, progress.say, answers)
        rows: list[ScenarioSummary] = []
        for name in names:
            stack.check_alive()
            row = await SCENARIOS[name](ctx)
            row = row.model_copy(update={"reports": await _reports(client, row, reports_dir)})
            rows.append(row)
            mark = "ok" if row.ok else "FAILED"
            progress.line(f"{row.name}: {mark} in {row.duration_s:.0f}s: {row.what}")
        return rows


async def _reports(client: Client, row: ScenarioSummary, folder: Path) -> list[str]:
    """One HTML report per workflow the scenario ran (a drain and its restore: two)."""
    paths = []
    for workflow_id in row.workflow_ids:
        path = await write_report(client, workflow_id, folder / f"{workflow_id}.html")
        paths.append(str(path))
    return paths


def _wait_for_health(stack: DemoStack, timeout_s: float = 60.0) -> None:
    """Until every region reports utilization: the rebalancer trusts only complete inputs."""

    def every_region_reports() -> bool:
        response = httpx.get(f"{stack.lab_url}/v1/health", timeout=5.0)
        regions = response.json().get("regions", []) if response.status_code == 200 else []
        return bool(regions) and all(r.get("utilization") is not None for r in regions)

    if not wait_until(
        every_region_reports, timeout_s=timeout_s, interval_s=0.5, alive=stack.check_alive
    ):
        raise DemoError(f"the lab reported no health for every region within {timeout_s:g}s")


def run_demo(options: DemoOptions) -> int:
    """Run the whole demo; 0 when every scenario ended as it should."""
    started = time.monotonic()
    # In a log (CI, a pipe) Rich would wrap the summary at 80 columns.
    console = options.console if options.console.is_terminal else Console(width=150)
    options.ports.check_free()
    options.workdir.mkdir(parents=True, exist_ok=True)
    config = options.workdir / "lab.yaml"
    haproxy = options.data_plane == "haproxy"
    config.write_text(yaml.safe_dump(haproxy_lab_config() if haproxy else demo_lab_config()))
    stack = DemoStack(options.workdir, options.ports, data_plane=options.data_plane)
    rows: list[ScenarioSummary] = []
    try:
        with _Progress(console) as progress:
            progress.say("starting the Temporal dev server")
            stack.start_server()
            progress.say("starting the lab fleet")
            stack.start_lab(config)
            stack.start_worker()
            # Traffic runs until the demo stops it; the duration is only a backstop.
            stack.start_traffic(options.rps, 1800)
            plane = "HAProxy data plane" if haproxy else "Python data plane"
            progress.line(
                f"stack up: Temporal {stack.temporal_address} (UI {stack.ui_url}), lab "
                f"{stack.lab_url} ({plane}), worker, Locust at {options.rps:g} rps; logs in "
                f"{options.workdir / 'logs'}"
            )
            progress.say("letting every region serve traffic for a health window")
            _wait_for_health(stack)
            rows = asyncio.run(
                _scenarios(stack, progress, options.scenarios, options.workdir / "reports")
            )
    except DemoError:
        raise
    except Exception as exc:
        trace = options.workdir / "logs" / "demo-error.log"
        trace.write_text(traceback.format_exc())
        raise DemoError(f"the demo failed: {type(exc).__name__}: {exc} (see {trace})") from exc
    finally:
        if rows:
            console.print(summary_table(rows))
            for row in rows:
                if row.detail:
                    console.print(f"{row.name}: {row.detail}", highlight=False)
            reports = [r for row in rows for r in row.reports]
            console.print(f"{len(reports)} HTML reports in {options.workdir / 'reports'}")
        if options.keep:
            _hold(stack, console)
        left = stack.stop()
        if left:
            console.print(f"[red]still running after shutdown: {', '.join(left)}[/]")
    console.print(f"demo finished in {time.monotonic() - started:.0f}s")
    return 0 if rows and all(r.ok for r in rows) and not left else 1


def _hold(stack: DemoStack, console: Console) -> None:
    """``--keep``: leave everything up for the user until Ctrl-C."""
    console.print(
        f"stack left running: Temporal UI {stack.ui_url}, lab {stack.lab_url}. In another "
        f"shell: TEMPORAL_ADDRESS={stack.temporal_address} "
        f"ORCHESTRATOR_FLEET_URL={stack.lab_url} orchestrator status. Ctrl-C stops it all."
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        console.print("stopping")
