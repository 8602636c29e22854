"""Cooldown per runbook and parameter set: no new run within the cooldown of the last
start of the same runbook with the same parameters.

A drain of eu-west therefore never holds back a drain of us-west, while a second
drain of eu-west inside the hour is held back whatever group or person asked.

Correct under concurrent requests because a start and its check happen under one
asyncio lock per (runbook, parameters) (the server is one event loop). It survives
a restart because the first check of a key asks Temporal's visibility for the
newest run of the runbook with those parameters (see :func:`same_parameters`);
after that, this process's own starts are the source of truth. Visibility is
eventually consistent, so a start made by *another* process less than about a
second before a restart can be missed: run one trigger server per namespace
(Alertmanager retries, so a short outage of it loses nothing).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.triggers.rules import parameters_key

__all__ = ["Cooldowns", "same_parameters", "utcnow"]

#: (runbook, parameters, region, since) -> the newest start of such a run since ``since``
LastStartLookup = Callable[
    [str, Mapping[str, Any], str | None, datetime], Awaitable[datetime | None]
]
Key = tuple[str, str]


def utcnow() -> datetime:
    return datetime.now(UTC)


def same_parameters(
    run_parameters: Mapping[str, Any] | None,
    run_region: str | None,
    parameters: Mapping[str, Any],
    region: str | None,
) -> bool:
    """Whether a run found in visibility counts toward the cooldown of ``parameters``.

    Runs the trigger server starts carry their parameters in the memo; runs started
    elsewhere (the CLI) are compared by their ``Region`` search attribute; a run that
    shows neither counts, since a cooldown that errs holds a run back rather than
    starting a second one.
    """
    if run_parameters is not None:
        return parameters_key(run_parameters) == parameters_key(parameters)
    if run_region is not None and region is not None:
        return run_region == region
    return True


@dataclass
class _State:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: datetime | None = None
    #: how far back visibility has been asked for this key
    looked_back_s: float = 0.0


class Cooldowns:
    #: keys remembered; beyond it the least recently used idle one is forgotten (and
    #: Temporal is asked again the next time it matters)
    MAX_KEYS = 10_000

    def __init__(self, lookup: LastStartLookup, clock: Callable[[], datetime] = utcnow) -> None:
        self._lookup = lookup
        self._clock = clock
        self._keys: OrderedDict[Key, _State] = OrderedDict()

    def _state(self, runbook: str, parameters: Mapping[str, Any]) -> _State:
        key = (runbook, parameters_key(parameters))
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _State()
            self._forget_least_recent()
        self._keys.move_to_end(key)
        return state

    def lock(self, runbook: str, parameters: Mapping[str, Any]) -> asyncio.Lock:
        """The lock to hold across "check the cooldown, then start"."""
        return self._state(runbook, parameters).lock

    def now(self) -> datetime:
        return self._clock()

    async def last_start(
        self,
        runbook: str,
        parameters: Mapping[str, Any],
        window_s: float,
        region: str | None = None,
    ) -> datetime | None:
        """The newest known start of ``runbook`` with ``parameters`` (hold :meth:`lock`);
        asks Temporal once per key for the window this process has not looked at yet."""
        state = self._state(runbook, parameters)
        if window_s > state.looked_back_s:
            since = self._clock() - timedelta(seconds=window_s)
            found = await self._lookup(runbook, parameters, region, since)
            state.looked_back_s = window_s
            if found is not None:
                self.record(runbook, parameters, found)
        return state.last

    def record(self, runbook: str, parameters: Mapping[str, Any], at: datetime) -> None:
        state = self._state(runbook, parameters)
        if state.last is None or at > state.last:
            state.last = at

    def remaining_s(self, last: datetime | None, cooldown_s: float) -> float:
        """Seconds of cooldown left after a start at ``last`` (0 when none is left)."""
        if last is None or cooldown_s <= 0:
            return 0.0
        elapsed = (self._clock() - last).total_seconds()
        return max(0.0, cooldown_s - elapsed)

    def _forget_least_recent(self) -> None:
        for key in list(self._keys):
            if len(self._keys) <= self.MAX_KEYS:
                return
            if not self._keys[key].lock.locked():
                del self._keys[key]
