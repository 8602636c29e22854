"""Heartbeating while an activity waits, so a lost attempt is retried in seconds.

A worker killed mid-activity (SIGKILL, a lost host) reports nothing; Temporal
notices only when a timeout runs out. Callers set a short heartbeat timeout
(:data:`HEARTBEAT_TIMEOUT`) next to a start-to-close timeout that stays long
enough for a slow fleet or an Update that waits an epoch, and the activity
heartbeats while it works. Outside an activity (unit tests) it just awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from datetime import timedelta
from typing import TypeVar

from temporalio import activity

__all__ = ["HEARTBEAT_TIMEOUT", "heartbeating"]

T = TypeVar("T")

HEARTBEAT_TIMEOUT = timedelta(seconds=10)


async def heartbeating(call: Awaitable[T]) -> T:
    """Await ``call``, heartbeating every quarter of :data:`HEARTBEAT_TIMEOUT`."""
    if not activity.in_activity():
        return await call

    async def beat() -> None:
        # Sleep first: a call that ends within a quarter of the timeout sends no heartbeat
        # at all (a one-shot poll retried every few seconds would otherwise add an RPC to
        # every attempt), and a longer one still beats well inside the timeout.
        while True:
            await asyncio.sleep(HEARTBEAT_TIMEOUT.total_seconds() / 4)
            activity.heartbeat()

    beats = asyncio.create_task(beat())
    try:
        return await call
    finally:
        beats.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beats
