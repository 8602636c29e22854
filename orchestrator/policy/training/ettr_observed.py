"""ETTR as a supervisor observes it: wallclock minus the outages it saw and the work they lost.

A supervisor knows, per failure, when it began (the run's end, or its last
heartbeat), when the job was seen productive again, and how many steps were thrown
away (failed-at step minus resumed-from step). Productive time is what is left of
the wallclock after the outages and the lost steps; the job's own checkpoint writes
are invisible to it and count as productive.

An outage with no recovery time did not end by itself: its restart was cut short by
the next failure (a failure during a restart), whose own outage carries on from its
onset; only the newest may still be open, and that one lasts until ``now``. Outages
are merged before they are summed, so an overlap (a confirmation read after the next
crash) is not counted twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import AwareDatetime, Field

from orchestrator.exceptions import InvalidInstance
from orchestrator.models import StrictModel

__all__ = ["Outage", "observed_ettr", "outage_seconds"]


class Outage(StrictModel):
    onset_at: AwareDatetime
    #: the first step past the checkpoint was seen; None: not (yet) recovered
    recovered_at: AwareDatetime | None = None
    #: steps done before the failure that the resume threw away
    lost_steps: int | None = Field(default=None, ge=0)


def outage_seconds(outages: Sequence[Outage], *, started: datetime, now: datetime) -> float:
    """Seconds of ``[started, now]`` the job spent down, overlapping outages merged."""
    ordered = sorted(outages, key=lambda o: o.onset_at)
    spans: list[tuple[datetime, datetime]] = []
    for i, o in enumerate(ordered):
        end = o.recovered_at
        if end is None:
            end = ordered[i + 1].onset_at if i + 1 < len(ordered) else now
        begin, end = max(o.onset_at, started), min(end, now)
        if end > begin:
            spans.append((begin, end))
    down = 0.0
    cur: tuple[datetime, datetime] | None = None
    for begin, end in sorted(spans):
        if cur is not None and begin <= cur[1]:
            cur = (cur[0], max(cur[1], end))
            continue
        if cur is not None:
            down += (cur[1] - cur[0]).total_seconds()
        cur = (begin, end)
    if cur is not None:
        down += (cur[1] - cur[0]).total_seconds()
    return down


def observed_ettr(
    outages: Sequence[Outage], *, started: datetime, now: datetime, step_s: float
) -> float | None:
    """Productive time over wallclock since ``started``; None before any time passed."""
    if step_s < 0:
        raise InvalidInstance(f"step_s must be non-negative, got {step_s}")
    wall = (now - started).total_seconds()
    if wall <= 0:
        return None
    lost = outage_seconds(outages, started=started, now=now)
    lost += sum((o.lost_steps or 0) for o in outages) * step_s
    return max(wall - lost, 0.0) / wall
