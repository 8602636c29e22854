"""The fleet's clock in tests on Temporal's time-skipping server: the workflow's time.

A fake fleet that answers from the wall clock cannot be hurried: the time-skipping
server skips only while no activity runs. A fleet that asks :func:`activity_clock`
instead sees the time of the activity asking, skipped time included.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from temporalio import activity

__all__ = ["Clock", "activity_clock"]

Clock = Callable[[], float]


def activity_clock(fallback: Clock = time.time) -> Clock:
    """Now, as the Temporal activity asking sees it: the time its attempt started.

    On a time-skipping server that is the skipped (workflow) time; outside an
    activity it is ``fallback()``. Not ``current_attempt_scheduled_time``: the Java
    test server stamps a retry with the time the previous attempt failed, one
    retry interval early.
    """

    def now() -> float:
        if activity.in_activity():
            return activity.info().started_time.timestamp()
        return fallback()

    return now
