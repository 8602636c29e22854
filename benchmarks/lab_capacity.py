"""Lab physics check: does the live lab behave like the capacity it is configured with?

Runs ``orchestrator lab serve --faults`` in its own process (its own GIL) and
drives it with an open-loop, constant-rate async httpx load generator:

1. capacity: web traffic at 0.5x, 1x and 2x one region's configured web
   capacity (the baseline, read from /lab/truth in the same run). Targets:
   throughput at 2x within 10% of the setting, p99 rising with load, 503s
   only past capacity (<= 1% at 0.5x and 1x, present at 2x);
2. cold buckets: 60 rps moved from a warm region to a fresh one all at once
   versus in four steps; target: the all-at-once move fails more requests
   (cold buckets cost capacity) and has a higher p99;
3. model mode: a 1,000 PoP x 50 region health read over HTTP, against the
   6-PoP default as the baseline; target: well under a second (< 250 ms).

Also records the load generator's and the lab's CPU use, to show the lab
saturates its configured capacity long before this machine's CPU.
Writes benchmarks/results/lab_capacity.json. ``--quick`` shortens every phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DEFAULT_CONFIG_PATH
from orchestrator.lab.generate import generate_config
from orchestrator.lab.server import LabThread, build_app
from orchestrator.models import RoutingWrite

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._lab_process import spawn_lab, wait_healthy  # noqa: E402
from benchmarks.summary import Claim, Target, claim, dump  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "lab_capacity.json"
REGION = "us-east"
POP = "nyc"


def _start_lab(config_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    process, url = spawn_lab(config_path, faults=True)
    try:
        wait_healthy(url)
    except RuntimeError:
        process.kill()
        raise
    return process, url


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def offered_load(
    client: httpx.AsyncClient, rate: float, duration: float, *, tag: str
) -> dict[str, Any]:
    """Send ``rate`` req/s for ``duration`` s at fixed spacing, whatever the answers."""
    results: list[tuple[int, float, float]] = []

    async def one(i: int, sent: float) -> None:
        try:
            response = await client.get(
                f"/edge/{POP}", params={"user": f"{tag}-{i % 4000}", "service": "web"}
            )
            status = response.status_code
        except httpx.HTTPError:
            status = 0
        results.append((status, (time.perf_counter() - sent) * 1000.0, sent))

    start = time.perf_counter()
    tasks = []
    for i in range(int(rate * duration)):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, time.perf_counter())))
    await asyncio.gather(*tasks)
    ok = [lat for status, lat, _ in results if status == 200]
    return {
        "offered_rps": rate,
        "sent": len(results),
        "ok": len(ok),
        "rejected_503": sum(1 for s, _, _ in results if s == 503),
        "other_errors": sum(1 for s, _, _ in results if s not in (200, 503)),
        "throughput_rps": len(ok) / duration,
        "error_rate": 1 - len(ok) / max(len(results), 1),
        "p50_ms": _p(ok, 50),
        "p99_ms": _p(ok, 99),
        "_raw": results,
    }


async def _route(fleet: HttpFleet, pop_to: dict[str, dict[str, float]], key: str) -> None:
    table = await fleet.routing(include_buckets=False)
    fractions = {**table.fractions, **pop_to}
    await fleet.write_routing(
        RoutingWrite(fractions=fractions, reason=key), if_match=table.version, idempotency_key=key
    )


async def capacity_phase(url: str, quick: bool) -> dict[str, Any]:
    duration = 4.0 if quick else 8.0
    async with (
        HttpFleet(url) as fleet,
        httpx.AsyncClient(
            base_url=url, limits=httpx.Limits(max_connections=600), timeout=10
        ) as client,
    ):
        truth = (await client.get("/lab/truth")).json()
        capacity = truth["capacity_rps"][REGION]["web"]
        await _route(fleet, {POP: {REGION: 1.0}}, "bench-capacity")
        # let the moved buckets warm before measuring capacity
        await asyncio.sleep(truth["cold"]["warm_after_s"] + 0.5)
        runs = []
        for multiple in (0.5, 1.0, 2.0):
            run = await offered_load(client, capacity * multiple, duration, tag=f"cap{multiple}")
            run.pop("_raw")
            run["multiple"] = multiple
            runs.append(run)
            await asyncio.sleep(1.5)
    half, one, two = runs
    p99s = [r["p99_ms"] or 0.0 for r in runs]
    return {
        "region": REGION,
        "configured_capacity_rps": capacity,
        "runs": runs,
        "targets": {
            "saturates_within_10pct": abs(two["throughput_rps"] - capacity) <= 0.10 * capacity,
            "p99_rises_with_load": p99s[0] < p99s[1] < p99s[2],
            "503_only_past_capacity": half["error_rate"] <= 0.01
            and one["error_rate"] <= 0.01
            and two["rejected_503"] > 0,
        },
    }


async def cold_phase(url: str, quick: bool) -> dict[str, Any]:
    rate = 60.0
    settle = 3.5
    step_gap = 3.0
    async with (
        HttpFleet(url) as fleet,
        httpx.AsyncClient(
            base_url=url, limits=httpx.Limits(max_connections=600), timeout=10
        ) as client,
    ):
        warm_after = (await client.get("/lab/truth")).json()["cold"]["warm_after_s"]

        async def move(target: str, steps: int, label: str) -> dict[str, Any]:
            await _route(fleet, {POP: {"eu-west": 1.0}}, f"{label}-home")
            await asyncio.sleep(warm_after + 0.5)
            duration = 1.0 + steps * step_gap + settle
            load = asyncio.create_task(offered_load(client, rate, duration, tag=label))
            await asyncio.sleep(1.0)
            for k in range(1, steps + 1):
                share = k / steps
                split = {target: share, "eu-west": 1 - share} if share < 1 else {target: 1.0}
                await _route(fleet, {POP: split}, f"{label}-step{k}")
                if k < steps:
                    await asyncio.sleep(step_gap)
            run = await load
            run.pop("_raw")
            run["target"] = target
            run["steps"] = steps
            return run

        at_once = await move("us-east", 1, "cold-once")
        stepped = await move("us-west", 4, "cold-steps")
    return {
        "offered_rps": rate,
        "at_once": at_once,
        "in_steps": stepped,
        "targets": {
            "cold_cost_visible": at_once["error_rate"] > stepped["error_rate"]
            and (at_once["p99_ms"] or 0) > (stepped["p99_ms"] or 0),
        },
    }


def model_phase(quick: bool) -> dict[str, Any]:
    reads = 5 if quick else 10

    def time_reads(config: Any) -> tuple[list[float], int]:
        with LabThread(build_app(config, mode="model")) as lab:
            timings = []
            size = 0
            with httpx.Client(base_url=lab.url, timeout=30) as client:
                client.get("/v1/health")
                for _ in range(reads):
                    start = time.perf_counter()
                    response = client.get("/v1/health")
                    timings.append((time.perf_counter() - start) * 1000.0)
                    size = len(response.content)
        return timings, size

    big, big_bytes = time_reads(generate_config(pops=1000, regions=50))
    small, small_bytes = time_reads(None)
    return {
        "big": {"pops": 1000, "regions": 50, "bytes": big_bytes},
        "big_health_read_ms": {"median": statistics.median(big), "max": max(big)},
        "baseline_default_health_read_ms": {"median": statistics.median(small), "max": max(small)},
        "baseline_bytes": small_bytes,
        "targets": {"big_read_under_250ms": max(big) < 250.0},
    }


def summary(capacity: dict[str, Any], cold: dict[str, Any], model: dict[str, Any]) -> list[Claim]:
    """The summary claims, from the same numbers as each phase's targets."""
    half, one, two = capacity["runs"]
    configured = capacity["configured_capacity_rps"]
    p99 = [r["p99_ms"] or 0.0 for r in capacity["runs"]]
    # p99 rising with load: the step (0.5x -> 1x or 1x -> 2x) where it rose least
    low, high = min(((0, 1), (1, 2)), key=lambda i: p99[i[1]] / max(p99[i[0]], 1e-9))
    multiples = [r["multiple"] for r in capacity["runs"]]
    at_once, stepped = cold["at_once"], cold["in_steps"]
    return [
        claim(
            "throughput at 2x the configured capacity",
            two["throughput_rps"],
            "rps",
            Target.between(0.9, 1.1, "within 10% of the setting", on="ratio"),
            baseline=configured,
            baseline_name="configured capacity (/lab/truth)",
        ),
        claim(
            f"p99 rises with load (least rise: {multiples[low]:g}x -> {multiples[high]:g}x)",
            p99[high],
            "ms",
            Target.above(1.0, "higher at more load", on="ratio"),
            baseline=p99[low],
            baseline_name=f"p99 at {multiples[low]:g}x",
        ),
        claim(
            "error rate up to 1x capacity",
            100 * max(half["error_rate"], one["error_rate"]),
            "%",
            Target.at_most(1.0, "<= 1%"),
        ),
        claim("503s at 2x capacity", two["rejected_503"], "requests", Target.above(0, "some")),
        claim(
            "failed requests, move all at once (cold buckets)",
            100 * at_once["error_rate"],
            "%",
            Target.above(100 * stepped["error_rate"], "more than in four steps"),
            baseline=100 * stepped["error_rate"],
            baseline_name="same move in four steps",
        ),
        claim(
            "p99, move all at once (cold buckets)",
            at_once["p99_ms"] or 0.0,
            "ms",
            Target.above(1.0, "higher than in four steps", on="ratio"),
            baseline=stepped["p99_ms"] or 0.0,
            baseline_name="same move in four steps",
        ),
        claim(
            "1000x50 model-mode health read (max)",
            model["big_health_read_ms"]["max"],
            "ms",
            Target.below(250.0, "< 250 ms"),
            baseline=model["baseline_default_health_read_ms"]["max"],
            baseline_name="default 6-PoP lab",
        ),
    ]


async def run(quick: bool) -> dict[str, Any]:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    # Shorter warm-up and eviction than the default so the cold phase fits the
    # time budget: a bucket away from a region for 3 s is cold when it returns.
    data["cold"]["warm_after_s"] = 3.0
    data["cold"]["evict_after_s"] = 3.0
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "bench.yaml"
        config_path.write_text(yaml.safe_dump(data))
        process, url = _start_lab(config_path)
        try:
            lab_cpu0, me_cpu0, wall0 = _cpu_seconds(process.pid), time.process_time(), time.time()
            capacity = await capacity_phase(url, quick)
            cold = await cold_phase(url, quick)
            wall = time.time() - wall0
            cpu = {
                "wall_s": wall,
                "lab_cpu_share_of_one_core": (_cpu_seconds(process.pid) - lab_cpu0) / wall,
                "load_generator_cpu_share_of_one_core": (time.process_time() - me_cpu0) / wall,
                "cores": os.cpu_count(),
            }
        finally:
            process.terminate()
            process.wait(10)
    model = model_phase(quick)
    targets = {**capacity["targets"], **cold["targets"], **model["targets"]}
    return {
        "benchmark": "lab_capacity",
        "quick": quick,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "capacity": capacity,
        "cold_buckets": cold,
        "model_mode": model,
        "cpu": cpu,
        "targets": targets,
        "passed": all(targets.values()),
        "summary": dump(summary(capacity, cold, model)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter phases")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.time()
    result = asyncio.run(run(args.quick))
    result["duration_s"] = time.time() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    for name, ok in result["targets"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    print(f"wrote {args.out} in {result['duration_s']:.0f}s")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
