"""Per-rank step timings and the straggler switch: small files beside the heartbeat; no torch.

In a DDP job every rank steps at the slowest rank's pace (the others wait in
all-reduce), so the job's step time says a straggler exists but not where. What
does say it is each rank's *own* compute time per step, before it reaches the
collective: what a real cluster reads from per-node metrics (CUDA events on the
compute stream, DCGM). Each rank writes ``rank-<r>.json`` (its host, the median own
time of its last :data:`WINDOW_STEPS` steps) after every step; the lab reads them
into the fleet view's ``host_step_ms``.

Why the median of the last few steps, written every step: a mean over the steps
since the previous heartbeat (what this was) let a freshly slowed host's figure
cross the detector's threshold only at the second report after the fault, 2 to 4 s
late (the straggler was the one fault over the 5 s orchestration target). The
median of 3 crosses at the second slow step (two of three slow), yet one step
stretched by the scheduler on a loaded host moves it not at all.

The ``straggler`` fault marks a host slow: ``slow-<host>`` in the job's directory
holds a factor, and the rank on that host stretches its compute (the sleep that
stands in for GPU time) by it. It belongs to the host, not the run: a restart on
the same host is as slow, one on other hosts is not.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections import deque
from pathlib import Path

from pydantic import Field, ValidationError

from orchestrator.models import StrictModel

__all__ = [
    "WINDOW_STEPS",
    "RankTiming",
    "StepWindow",
    "clear_rank_timings",
    "read_host_step_ms",
    "read_slow_factor",
    "write_rank_timing",
    "write_slow_factor",
]


#: steps a rank's figure is the median of: odd, so one outlier never decides it
WINDOW_STEPS = 3


class RankTiming(StrictModel):
    rank: int = Field(ge=0)
    host: str
    step: int = Field(ge=0)
    #: median own compute per step (ms) over the rank's last WINDOW_STEPS steps
    own_ms: float = Field(ge=0)
    time: float


class StepWindow:
    """A rank's last ``size`` own step times; a figure only once it holds ``size``.

    A new run reports nothing until its window is full, so its first steps (the
    first forward pass, DDP rebuilding its buckets with a collective) are never a
    figure on their own.
    """

    def __init__(self, size: int = WINDOW_STEPS) -> None:
        self._seconds: deque[float] = deque(maxlen=size)

    def add(self, seconds: float) -> None:
        self._seconds.append(seconds)

    def own_ms(self) -> float | None:
        if len(self._seconds) < (self._seconds.maxlen or 1):
            return None
        return 1000 * statistics.median(self._seconds)


def _timing_file(workdir: Path, rank: int) -> Path:
    return workdir / f"rank-{rank}.json"


def write_rank_timing(workdir: Path, timing: RankTiming) -> None:
    # Metrics, not state: replaced atomically (a reader never sees half), not fsynced.
    path = _timing_file(workdir, timing.rank)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(timing.model_dump_json())
    os.replace(tmp, path)


def read_host_step_ms(workdir: Path, hosts: tuple[str, ...], fresh_s: float) -> dict[str, float]:
    """host -> own ms per step, for every rank that reported in the last ``fresh_s``."""
    now = time.time()
    out: dict[str, float] = {}
    for rank, host in enumerate(hosts):
        try:
            timing = RankTiming.model_validate_json(_timing_file(workdir, rank).read_text())
        except (FileNotFoundError, ValidationError):
            continue
        if timing.host == host and now - timing.time <= fresh_s:
            out[host] = timing.own_ms
    return out


def clear_rank_timings(workdir: Path, ranks: int) -> None:
    """A new run's ranks start with no timings (a previous run's are not theirs)."""
    for rank in range(ranks):
        _timing_file(workdir, rank).unlink(missing_ok=True)


def write_slow_factor(workdir: Path, host: str, factor: float) -> None:
    (workdir / f"slow-{host}").write_text(f"{factor}\n")


def read_slow_factor(workdir: Path, host: str) -> float:
    """How much slower this host computes (1.0: not a straggler)."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        return float((workdir / f"slow-{host}").read_text())
    return 1.0
