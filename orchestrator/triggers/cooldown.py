"""Per-runbook cooldown: no new run of a runbook within its cooldown of the last start.

Correct under concurrent requests because a start and its check happen under one
asyncio lock per runbook (the server is one event loop). It survives a restart
because the first check of a runbook asks Temporal's visibility for the newest
run carrying its ``Runbook`` search attribute; after that, this process's own
starts are the source of truth. Visibility is eventually consistent, so a start
made by *another* process less than about a second before a restart can be
missed: run one trigger server per namespace (Alertmanager retries, so a short
outage of it loses nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

__all__ = ["Cooldowns", "utcnow"]

LastStartLookup = Callable[[str, datetime], Awaitable[datetime | None]]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Cooldowns:
    def __init__(self, lookup: LastStartLookup, clock: Callable[[], datetime] = utcnow) -> None:
        self._lookup = lookup
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._last: dict[str, datetime] = {}
        #: how far back visibility has been asked, per runbook
        self._looked_back: dict[str, float] = {}

    def lock(self, runbook: str) -> asyncio.Lock:
        """The lock to hold across "check the cooldown, then start" for ``runbook``."""
        return self._locks.setdefault(runbook, asyncio.Lock())

    def now(self) -> datetime:
        return self._clock()

    async def last_start(self, runbook: str, window_s: float) -> datetime | None:
        """The newest known start of ``runbook`` (hold :meth:`lock`); asks Temporal once
        per runbook for the window this process has not looked at yet."""
        if window_s > self._looked_back.get(runbook, 0.0):
            since = self._clock() - timedelta(seconds=window_s)
            found = await self._lookup(runbook, since)
            self._looked_back[runbook] = window_s
            if found is not None:
                self.record(runbook, found)
        return self._last.get(runbook)

    def record(self, runbook: str, at: datetime) -> None:
        current = self._last.get(runbook)
        if current is None or at > current:
            self._last[runbook] = at

    def remaining_s(self, last: datetime | None, cooldown_s: float) -> float:
        """Seconds of cooldown left after a start at ``last`` (0 when none is left)."""
        if last is None or cooldown_s <= 0:
            return 0.0
        elapsed = (self._clock() - last).total_seconds()
        return max(0.0, cooldown_s - elapsed)
