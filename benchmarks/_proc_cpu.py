"""CPU time of processes from ``/proc/<pid>/stat`` (Linux): what HAProxy, the lab's
region backends and Locust cost per request, measured over a window by difference.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0.0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # the command name (field 2) may hold spaces: fields after its closing paren
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


@dataclass
class CpuWindow:
    """CPU seconds per named group of processes between :meth:`start` and :meth:`stop`."""

    groups: dict[str, list[int]]

    def start(self) -> None:
        self._at = time.monotonic()
        self._start = {n: sum(map(cpu_seconds, p)) for n, p in self.groups.items()}

    def stop(self) -> dict[str, float]:
        """Group -> cores used on average over the window (1.0 = one core busy)."""
        span = time.monotonic() - self._at
        return {
            n: round((sum(map(cpu_seconds, p)) - self._start[n]) / span, 3)
            for n, p in self.groups.items()
        }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
