"""Alert episodes: when a firing alert group is "the same trouble" and when it is new.

Alertmanager re-sends a still-firing group every ``repeat_interval`` with the same
alerts and the same ``startsAt``; a group that resolved and fires again comes back
with a later ``startsAt``. So the start of an episode is the earliest ``startsAt``
among the firing alerts that ask for the same run (same runbook, dedup key and
parameters: an *identity*), and the run's workflow id carries it (see
:mod:`orchestrator.triggers.rules`).

Two refinements keep an episode whole while its alerts change underneath it:

- a resolved alert of the same notification whose ``endsAt`` reaches into the
  firing alerts' span extends the episode back to its own start (A fires at 10:00,
  B at 10:05, A resolves at 10:07: the notification at 10:07 still says 10:00);
- :class:`Episodes` remembers, per identity, the episode's start and the alerts
  (fingerprint and ``startsAt``) seen in it, so a later notification in which A is
  gone and only B fires still belongs to the 10:00 episode. The memory of an
  identity ends when a notification shows none of its alerts firing.

The memory is this process's: after a restart, a notification where only B fires
starts B's own episode (a second run, unless the cooldown holds it back). That
needs a multi-alert group whose first alert resolved and was flushed by
Alertmanager before the restart; one-alert groups and per-alert triggers, the
common cases, need no memory at all.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["EpisodeAlert", "Episodes", "chain_start", "episode_stamp"]


class EpisodeAlert(Protocol):
    """What an episode needs to know of an alert (``payload.Alert`` has it)."""

    @property
    def status(self) -> str: ...

    @property
    def fingerprint(self) -> str: ...

    @property
    def starts_at(self) -> datetime: ...

    @property
    def ends_at(self) -> datetime | None: ...


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def _ends_at(alert: EpisodeAlert) -> datetime | None:
    """``endsAt``, or None while unknown (Alertmanager writes year 1 for "none")."""
    ends = alert.ends_at
    return None if ends is None or ends.year <= 1 else _utc(ends)


def chain_start(alerts: Sequence[EpisodeAlert]) -> datetime | None:
    """The episode start this one notification shows; None when it holds no alert.

    The earliest ``startsAt`` of the firing alerts, extended back through resolved
    alerts that overlapped it. With no firing alert (the identity resolved) it is the
    same chain computed over the resolved alerts, latest first.
    """
    if not alerts:
        return None
    firing = [a for a in alerts if a.status == "firing"]
    resolved = [a for a in alerts if a.status != "firing"]
    if firing:
        start = min(_utc(a.starts_at) for a in firing)
    else:
        # All resolved: the chain that ends with the last alert to start.
        last = max(resolved, key=lambda a: _utc(a.starts_at))
        start = _utc(last.starts_at)
        resolved = [a for a in resolved if a is not last]
    changed = True
    while changed:
        changed = False
        for alert in resolved:
            begins, ends = _utc(alert.starts_at), _ends_at(alert)
            if begins < start and (ends is None or ends >= start):
                start, changed = begins, True
    return start


def episode_stamp(start: datetime) -> str:
    """The episode's start as it appears in a workflow id: ``20240501T100000.000Z``."""
    at = _utc(start)
    return at.strftime("%Y%m%dT%H%M%S.") + f"{at.microsecond // 1000:03d}Z"


Member = tuple[str, datetime]


@dataclass
class _Episode:
    start: datetime
    members: set[Member] = field(default_factory=set)
    seen: datetime = field(default_factory=lambda: datetime.now(UTC))


def _members(alerts: Iterable[EpisodeAlert]) -> set[Member]:
    return {(a.fingerprint, _utc(a.starts_at)) for a in alerts}


class Episodes:
    """Per identity, the open episode's start and the alerts seen in it (bounded)."""

    #: an identity unseen this long is forgotten (repeat_interval is hours, not days)
    TTL = timedelta(days=2)
    MAX_IDENTITIES = 10_000
    #: beyond this many alerts in one episode, only the latest notification's are kept
    MAX_MEMBERS = 1_000

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._clock = clock
        self._open: OrderedDict[str, _Episode] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def observe(self, identity: str, alerts: Sequence[EpisodeAlert]) -> datetime | None:
        """The start of the episode this notification's ``alerts`` (all of one identity)
        belong to, remembering it while any of them fires."""
        start = chain_start(alerts)
        if start is None:
            return None
        now = self._clock()
        self._forget_older_than(now - self.TTL)
        current = _members(alerts)
        known = self._open.get(identity)
        if known is not None and known.members & current:
            start = min(start, known.start)
            members = known.members | current
            if len(members) > self.MAX_MEMBERS:
                members = current
        else:
            members = current
        if any(a.status == "firing" for a in alerts):
            self._open[identity] = _Episode(start, members, now)
            self._open.move_to_end(identity)
            while len(self._open) > self.MAX_IDENTITIES:
                self._open.popitem(last=False)
        else:
            self._open.pop(identity, None)
        return start

    def _forget_older_than(self, cutoff: datetime) -> None:
        while self._open:
            identity, oldest = next(iter(self._open.items()))
            if oldest.seen >= cutoff:
                return
            del self._open[identity]
