"""The HAProxy fleet's cost on a real HAProxy (Debian's 2.6): one runtime API command, and
a full routing write (every bucket moves) at 3 PoPs x 64 and 3 PoPs x 1,024 buckets.

A full write is what ``HAProxyFleet.write_routing`` does end to end: read the whole map,
compute the diff, claim the version (``del map``), send every changed entry in
``;``-batched lines, publish the new version. Its baseline, measured in the same run on
the same proxy, is the naive client: one connection per ``set map`` command. The same
target re-applied (nothing to write: one read) is measured too. Every write is checked:
the map HAProxy holds afterwards is the target, entry for entry.

    python benchmarks/haproxy_runtime.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.fleet.haproxy import HAProxyFleet  # noqa: E402
from orchestrator.fleet.haproxy.admin import adopt  # noqa: E402
from orchestrator.fleet.haproxy.state import parse_map  # noqa: E402
from orchestrator.models import RoutingWrite  # noqa: E402
from testkit.haproxy import HAPROXY, region_servers, running_haproxy  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "haproxy_runtime.json"
REGIONS = ("us-east", "eu-west", "ap-south")
POPS = ("edge-1", "edge-2", "edge-3")


def stats_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
    }


async def timed(coro: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await coro
    return time.perf_counter() - start, result


async def one_command(fleet: HAProxyFleet, n: int) -> dict[str, Any]:
    reads, writes = [], []
    for i in range(n):
        elapsed, _ = await timed(fleet.runtime.command("get map " + fleet.routing_map + " x"))
        reads.append(elapsed)
        weight = 50 + i % 50
        elapsed, _ = await timed(fleet.runtime.writes([f"set server web/eu-west weight {weight}"]))
        writes.append(elapsed)
    return {"get_map": stats_ms(reads), "set_server_weight": stats_ms(writes)}


async def full_writes(fleet: HAProxyFleet, buckets: int, trials: int) -> dict[str, Any]:
    await adopt(fleet)
    batched, noop, naive = [], [], []
    correct = True
    for trial in range(trials):
        table = await fleet.routing()
        assert table.buckets is not None
        # The next region after the one every bucket is in now: every entry moves.
        now = REGIONS.index(table.buckets[POPS[0]][0])
        region = REGIONS[(now + 1) % len(REGIONS)]
        write = RoutingWrite(fractions={p: {region: 1.0} for p in POPS})
        key = f"bench/{buckets}/{trial}"
        elapsed, new = await timed(
            fleet.write_routing(write, if_match=table.version, idempotency_key=key)
        )
        batched.append(elapsed)
        live = parse_map(await fleet.runtime.command(f"show map {fleet.routing_map}"))
        correct &= (
            all(live.entries[f"{p}/{b}"] == region for p in POPS for b in range(buckets))
            and not live.duplicates
        )
        elapsed, again = await timed(
            fleet.write_routing(write, if_match=table.version, idempotency_key=key)
        )
        noop.append(elapsed)
        correct &= again.version == new.version
        # The naive client: the same full move, one connection per command.
        back = REGIONS[(now + 2) % len(REGIONS)]
        start = time.perf_counter()
        for p in POPS:
            for b in range(buckets):
                await fleet.runtime.command(f"set map {fleet.routing_map} {p}/{b} {back}")
        naive.append(time.perf_counter() - start)
        # Put the version keys back in step with the map the naive client changed.
        await adopt(fleet)
    return {
        "entries_moved": len(POPS) * buckets,
        "fleet_write_routing": stats_ms(batched),
        "same_target_again": stats_ms(noop),
        "naive_one_connection_per_command": stats_ms(naive),
        "map_correct_after_every_write": correct,
    }


async def run(quick: bool) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "haproxy_runtime",
        "quick": quick,
        "setup": {"haproxy": HAPROXY, "pops": len(POPS), "regions": len(REGIONS)},
    }
    for buckets in (64, 1024):
        with (
            tempfile.TemporaryDirectory() as tmp,
            region_servers(REGIONS) as servers,
            running_haproxy(
                Path(tmp), pops=POPS, regions=servers.ports, bucket_count=buckets
            ) as proxy,
        ):
            fleet = proxy.fleet()
            if buckets == 64:
                result["one_command"] = await one_command(fleet, 100 if quick else 1000)
            result[f"full_write_3x{buckets}"] = await full_writes(
                fleet, buckets, 3 if quick else 10
            )
    return result


def summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    from benchmarks.summary import Target, claim, dump

    claims = [
        claim(
            "one runtime command (set server weight), p50",
            result["one_command"]["set_server_weight"]["p50_ms"],
            "ms",
            Target.below(5.0, "< 5 ms"),
        ),
    ]
    for buckets, bound in ((64, 50.0), (1024, 500.0)):
        block = result[f"full_write_3x{buckets}"]
        claims += [
            claim(
                f"full routing write 3x{buckets} buckets, median",
                block["fleet_write_routing"]["p50_ms"],
                "ms",
                Target.below(bound, f"< {bound:g} ms"),
                baseline=block["naive_one_connection_per_command"]["p50_ms"],
                baseline_name="one connection per set map",
            ),
            claim(
                f"full routing write 3x{buckets} buckets, worst",
                block["fleet_write_routing"]["max_ms"],
                "ms",
                Target.below(2 * bound, f"< {2 * bound:g} ms"),
            ),
            claim(
                f"same target re-applied 3x{buckets} (no write), median",
                block["same_target_again"]["p50_ms"],
                "ms",
                Target.below(bound, f"< {bound:g} ms"),
            ),
            claim(
                f"map equals the target after every write 3x{buckets}",
                1.0 if block["map_correct_after_every_write"] else 0.0,
                "bool",
                Target.equal(1.0, "yes"),
            ),
        ]
    return dump(claims)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and trials")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.quick))
    result["summary"] = summary(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(c["met"] for c in result["summary"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
