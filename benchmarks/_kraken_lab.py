"""The live lab and its users for benchmarks/kraken.py, each in its own process.

Users are open-loop Poisson arrivals from async httpx clients, split over
several generator processes of at most ``RPS_PER_GENERATOR`` each (the sum of
independent Poisson streams is the same Poisson stream). One process at 250
rps melted down here: httpx's connection pool costs more per request the more
are in flight, so a burst made it fall behind, which made more in flight; it
sent 250 rps but the lab answered 20-160 while the generator sat at 100% CPU
and 2,000+ requests in flight. Four processes at 63 rps each held 250 rps at
13% CPU apiece.

    python benchmarks/_kraken_lab.py URL --rps R --duration S --pops JSON --seed N
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

# Run as a script for the generators: the benchmarks package is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._lab_process import open_env, spawn_lab, wait_healthy  # noqa: E402

#: one generator process keeps up comfortably below this on the 2-core machine
RPS_PER_GENERATOR = 70.0
#: per process: bounds the pool's per-request cost if the lab stalls
MAX_CONNECTIONS = 250


def generator_count(rps: float) -> int:
    return max(1, math.ceil(rps / RPS_PER_GENERATOR))


class Lab:
    """``orchestrator lab serve --faults`` and its users, each in their own processes."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        path = workdir / f"lab-{uuid.uuid4().hex[:8]}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.env = open_env()
        self.server, self.url = spawn_lab(path, faults=True, env=self.env)
        self.traffic: list[subprocess.Popen[bytes]] = []

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        wait_healthy(self.url, timeout_s)

    def start_traffic(self, rps: float, duration_s: float, pops: dict[str, float]) -> None:
        count = generator_count(rps)
        for seed in range(count):
            self.traffic.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        self.url,
                        "--rps",
                        f"{rps / count:.2f}",
                        "--duration",
                        str(duration_s),
                        "--pops",
                        json.dumps(pops),
                        "--seed",
                        str(seed),
                    ],
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

    def truth(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/lab/truth", timeout=5.0).json())

    def answered(self) -> int:
        """Edge requests the lab has answered since it started, any status."""
        served = self.truth().get("edge_requests", {})
        return sum(sum(by_status.values()) for by_status in served.values())

    def stop(self) -> None:
        for process in [*self.traffic, self.server]:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


async def generate(
    url: str, rps: float, duration_s: float, pops: dict[str, float], seed: int
) -> None:
    """Open-loop Poisson traffic: a request is sent on schedule whatever the last one did."""
    rng = random.Random(seed)
    names, weights = list(pops), list(pops.values())
    limits = httpx.Limits(
        max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS
    )
    pending: set[asyncio.Task[None]] = set()
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0) as client:

        async def visit(pop: str, user: str) -> None:
            # The lab counts what it served; a lost request is the lab's failure, not ours.
            with contextlib.suppress(httpx.HTTPError):
                await client.get(f"/edge/{pop}", params={"user": user, "service": "web"})

        loop = asyncio.get_running_loop()
        start = next_at = loop.time()
        while next_at - start < duration_s:
            next_at += rng.expovariate(rps)
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            pop = rng.choices(names, weights)[0]
            task = asyncio.create_task(visit(pop, f"user-{rng.randrange(20_000)}"))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--rps", type=float, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--pops", type=json.loads, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(generate(args.url, args.rps, args.duration, args.pops, args.seed))


if __name__ == "__main__":
    main()
