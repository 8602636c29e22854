"""Drill scheduling decisions: blocked windows and which region to drill. Pure.

:class:`BlockedWindow` is defined here (the drill contract carries it), so policy never
reaches up into the contracts.

Maelstrom drilled several times a week, each time on the region drained least
recently, so every region's drain is exercised in turn; a region never drained
comes first. Ties go to the name, so the choice is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, Field, ValidationError, field_validator

__all__ = [
    "DAYS",
    "BlockedWindow",
    "blocking_window",
    "least_recently_drained",
    "parse_window",
]

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class BlockedWindow(BaseModel):
    """No drill starts inside this UTC window; ``end`` before ``start`` crosses midnight."""

    model_config = {"extra": "forbid"}

    start: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="HH:MM, UTC")
    end: str = Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$|^24:00$", description="HH:MM, UTC")
    #: the days (of the window's start) it applies on; empty means every day
    days: list[str] = Field(default_factory=list)

    @field_validator("days")
    @classmethod
    def _days(cls, value: list[str]) -> list[str]:
        days = [d.strip().lower()[:3] for d in value]
        bad = [d for d in days if d not in DAYS]
        if bad:
            raise ValueError(f"unknown day(s) {', '.join(bad)} (use {', '.join(DAYS)})")
        return days

    def describe(self) -> str:
        days = ",".join(self.days) + " " if self.days else ""
        return f"{days}{self.start}-{self.end} UTC"


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


def _inside(window: BlockedWindow, now: datetime) -> bool:
    start, end = _minutes(window.start), _minutes(window.end)
    minute = now.hour * 60 + now.minute
    if start == end:
        return False
    if start < end:
        day = now
        inside = start <= minute < end
    else:  # crosses midnight: the part after midnight belongs to yesterday's window
        inside = minute >= start or minute < end
        day = now if minute >= start else now - timedelta(days=1)
    return inside and (not window.days or DAYS[day.weekday()] in window.days)


def blocking_window(windows: Sequence[BlockedWindow], now: datetime) -> BlockedWindow | None:
    """The first window ``now`` (UTC) falls in, if any."""
    for window in windows:
        if _inside(window, now):
            return window
    return None


def least_recently_drained(
    candidates: Sequence[str], last_drained: Mapping[str, datetime | None]
) -> str:
    """The candidate whose last drain is oldest; never drained beats any date."""
    if not candidates:
        raise ValueError("no candidate regions")

    def key(region: str) -> tuple[bool, float, str]:
        last = last_drained.get(region)
        return (last is not None, last.timestamp() if last else 0.0, region)

    return min(candidates, key=key)


def parse_window(text: str) -> BlockedWindow:
    """``[DAYS ]HH:MM-HH:MM`` with DAYS like ``sat,sun``: ``"fri 16:00-24:00"``, ``"22:00-06:00"``."""
    parts = text.strip().split()
    if len(parts) not in (1, 2):
        raise ValueError(f"{text!r}: expected [DAYS ]HH:MM-HH:MM, e.g. 'sat,sun 00:00-24:00'")
    days = parts[0].split(",") if len(parts) == 2 else []
    start, sep, end = parts[-1].partition("-")
    if not sep:
        raise ValueError(f"{text!r}: expected HH:MM-HH:MM")
    try:
        return BlockedWindow(start=start, end=end, days=days)
    except ValidationError as exc:
        error = exc.errors()[0]
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{text!r}: {error['loc'][0]}: {reason}") from None
