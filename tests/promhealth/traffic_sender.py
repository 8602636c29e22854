"""Steady traffic to the HAProxy lab's PoPs, run as a script in a process of its own
(``haproxy_rig.open_rig`` starts it): ``traffic_sender.py --rps R --url U [--url U ...]``.

Its own process, not a task beside the test's Temporal worker: the worker's threads hold the
GIL for up to 0.7 s at a time (the workflow sandbox re-imports a workflow's modules for each
new run), and a sender on that event loop fell silent, then caught up in one burst. That
happened as the load test started, in its 3 s baseline window: HAProxy received 18, then 92
requests/s of the 60 sent, and the baseline's demand read 0.3x (hogged) to 2.2x what was sent.

Standard library and httpx only, so it starts by path from any working directory.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import httpx

#: printed (and flushed) once the first request is on its way
READY = "sending"


async def send(urls: list[str], rps: float, users: int) -> None:
    """``rps`` over ``urls`` in turn, each request for the next of ``users`` users, on a
    schedule whatever the answers take (an overloaded region must not slow the demand)."""
    pending: set[asyncio.Task[Any]] = set()
    async with httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_connections=200)) as client:
        loop = asyncio.get_running_loop()
        start, i = loop.time(), 0
        while True:
            url = urls[i % len(urls)]
            task = asyncio.create_task(client.get(url, params={"user": f"u-{i % users}"}))
            pending.add(task)
            task.add_done_callback(pending.discard)
            if i == 0:
                print(READY, flush=True)
            i += 1
            await asyncio.sleep(max(0.0, start + i / rps - loop.time()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rps", type=float, required=True)
    parser.add_argument("--url", action="append", required=True, help="a PoP's /edge/<pop>")
    parser.add_argument("--users", type=int, default=4000)
    args = parser.parse_args()
    # SIGTERM (the rig's stop_group) ends the process where it stands: what is in flight
    # is the proxy's to finish or drop.
    asyncio.run(send(args.url, args.rps, args.users))


if __name__ == "__main__":
    main()
