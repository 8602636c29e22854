"""Quarantine with cooldowns: bad hosts stay out a while, repeat offenders longer.

Every function is a pure function of ``(records, now)``: the record list is the
whole state, so a workflow can keep it in its history and replay it. A host's
n-th offence within ``policy.horizon_s`` is kept out for
``base_cooldown_s * factor**(n-1)``, capped at ``max_cooldown_s``; it comes back on
its own when the cooldown ends (a lemon keeps coming back and keeps getting
longer cooldowns, which is what separates it from a host with one bad day).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from pydantic import AwareDatetime

from orchestrator.exceptions import InvalidInstance
from orchestrator.policy.training.models import QuarantinePolicy, QuarantineRecord

__all__ = [
    "active_quarantine",
    "cooldown_for",
    "due_for_release",
    "offences_within_horizon",
    "prune_quarantine",
    "quarantine_host",
    "quarantined_hosts",
    "release",
]


def offences_within_horizon(
    records: Iterable[QuarantineRecord], host: str, now: AwareDatetime, policy: QuarantinePolicy
) -> int:
    """Quarantines of ``host`` that started within the policy horizon before ``now``."""
    since = now - timedelta(seconds=policy.horizon_s)
    return sum(1 for r in records if r.host == host and since <= r.started_at <= now)


def cooldown_for(offence: int, policy: QuarantinePolicy) -> timedelta:
    """The cooldown of the ``offence``-th quarantine (1-based) within the horizon."""
    if offence < 1:
        raise InvalidInstance(f"offence must be at least 1, got {offence}")
    # Compare exponents, not products, so a huge offence count cannot overflow.
    seconds = policy.base_cooldown_s
    for _ in range(offence - 1):
        seconds *= policy.factor
        if seconds >= policy.max_cooldown_s:
            break
    return timedelta(seconds=min(seconds, policy.max_cooldown_s))


def active_quarantine(
    records: Iterable[QuarantineRecord], host: str, now: AwareDatetime
) -> QuarantineRecord | None:
    """The record keeping ``host`` out at ``now`` (the one ending last), if any."""
    active = [r for r in records if r.host == host and r.active(now)]
    return max(active, key=lambda r: r.until) if active else None


def quarantined_hosts(records: Iterable[QuarantineRecord], now: AwareDatetime) -> set[str]:
    return {r.host for r in records if r.active(now)}


def quarantine_host(
    records: Iterable[QuarantineRecord],
    host: str,
    reason: str,
    now: AwareDatetime,
    policy: QuarantinePolicy | None = None,
) -> QuarantineRecord:
    """The new record for quarantining ``host`` at ``now``.

    Quarantining a host that is already out does not shorten its stay: the new
    record ends no earlier than the active one.
    """
    if not host:
        raise InvalidInstance("host must not be empty")
    if not reason:
        raise InvalidInstance("reason must not be empty")
    policy = policy or QuarantinePolicy()
    records = list(records)
    offence = offences_within_horizon(records, host, now, policy) + 1
    until = now + cooldown_for(offence, policy)
    current = active_quarantine(records, host, now)
    if current is not None and current.until > until:
        until = current.until
    return QuarantineRecord(host=host, reason=reason, started_at=now, until=until, offence=offence)


def due_for_release(
    records: Iterable[QuarantineRecord], now: AwareDatetime
) -> list[QuarantineRecord]:
    """Hosts whose every quarantine has ended by ``now``: one record each, the last to end.

    A host with another record still active is not due; a host whose last record
    is marked released (:func:`release`) is not listed again.
    """
    by_host: dict[str, list[QuarantineRecord]] = {}
    for r in records:
        by_host.setdefault(r.host, []).append(r)
    due = []
    for host in sorted(by_host):
        rs = by_host[host]
        if any(r.active(now) for r in rs):
            continue
        last = max(rs, key=lambda r: r.until)
        if last.released_at is None and last.until <= now:
            due.append(last)
    return due


def release(record: QuarantineRecord, now: AwareDatetime) -> QuarantineRecord:
    """``record`` marked released at ``now``: early by an operator, or once it is due.

    The offence still counts towards the next cooldown.
    """
    if record.released_at is not None:
        raise InvalidInstance(f"host {record.host} was already released")
    if now < record.started_at:
        raise InvalidInstance(f"host {record.host}: release at {now.isoformat()} precedes start")
    return record.model_copy(update={"released_at": now})


def prune_quarantine(
    records: Iterable[QuarantineRecord],
    now: AwareDatetime,
    policy: QuarantinePolicy,
    *,
    for_release: bool = True,
) -> list[QuarantineRecord]:
    """The records that can still change a decision at ``now`` or later, order kept.

    Kept: the active ones, those started within the horizon (they count as offences), and
    each host's last-to-end one (:func:`due_for_release` reads it; ``for_release=False``
    when nothing calls it on these records). The rest can never
    matter again, since time only moves forward; dropping them keeps a months-long job's
    carried state bounded.
    """
    records = list(records)
    since = now - timedelta(seconds=policy.horizon_s)
    by_host: dict[str, list[QuarantineRecord]] = {}
    for r in records:
        by_host.setdefault(r.host, []).append(r)
    last = {id(max(rs, key=lambda r: r.until)) for rs in by_host.values()} if for_release else set()
    return [r for r in records if r.active(now) or r.started_at >= since or id(r) in last]
