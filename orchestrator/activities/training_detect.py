"""Is a training job failing, and how: read from the fleet's hosts, incidents and heartbeats.

Pure over the fleet's answer (no I/O), so the watcher and the progress check agree
on what a failure is. Causes are checked from most to least specific, because one
fault shows several symptoms: a GPU error also crashes the job, a building power
loss also takes its hosts down.
"""

from __future__ import annotations

import statistics
from datetime import datetime

from orchestrator.contracts.training import JobState, TrainingCluster, TrainingJob
from orchestrator.contracts.training_supervisor import FailureKind
from orchestrator.policy.training.models import HostState

__all__ = ["STARTUP_GRACE_S", "STRAGGLER_RATIO", "classify"]

#: a run with no heartbeat yet is starting, not hung, for this long
STARTUP_GRACE_S = 60.0
#: a host computing this many times slower than its peers' median is a straggler
STRAGGLER_RATIO = 3.0
#: a median of peers needs a few of them
STRAGGLER_MIN_HOSTS = 3

Finding = tuple[FailureKind, datetime, list[str], str]


def classify(cluster: TrainingCluster, job: TrainingJob, hang_after_s: float) -> Finding | None:
    """(kind, onset, hosts to quarantine, detail), or None while the job is healthy."""
    now = cluster.now
    if job.state in (JobState.PENDING, JobState.STOPPED):
        return FailureKind.LAUNCH, now, [], f"job is {job.state.value}"
    if job.state is JobState.FINISHED:
        return None
    hosts = {h.name: h for h in cluster.hosts}
    mine = [hosts[n] for n in job.hosts if n in hosts]
    onset = job.ended_at or now
    bad = sorted(h.name for h in mine if h.healthy_gpus < job.spec.gpus_per_host)
    if bad:
        return FailureKind.GPU, onset, bad, f"GPU errors on {', '.join(bad)}"
    down = [h for h in mine if h.state is HostState.DOWN]
    if down:
        dark = {i.building for i in cluster.incidents if i.is_open(now) and i.building}
        lost = sorted({h.building for h in down} & dark)
        names = ", ".join(sorted(h.name for h in down))
        if lost:
            return FailureKind.BUILDING, onset, [], f"building {', '.join(lost)} lost ({names})"
        return FailureKind.HOST_DOWN, onset, [], f"host down: {names}"
    if job.state is JobState.CRASHED:
        failure = job.failure
        if failure is not None and not failure.retryable:
            return FailureKind.FATAL, onset, [], f"{failure.reason}: {failure.detail}"
        return FailureKind.CRASH, onset, [], f"run {job.runs} exited at step {job.step}"
    last = job.last_heartbeat
    if last is None:
        started = job.started_at or now
        if (now - started).total_seconds() > STARTUP_GRACE_S:
            return FailureKind.HANG, started, [], "no heartbeat since start"
        return None
    silent = (now - last).total_seconds()
    if silent > hang_after_s:
        return FailureKind.HANG, last, [], f"no heartbeat for {silent:.1f}s at step {job.step}"
    return _straggler(job, now)


def _straggler(job: TrainingJob, now: datetime) -> Finding | None:
    """One host whose own compute per step is STRAGGLER_RATIO times its peers' median.

    Every rank of a synchronous job steps at the slowest one's pace, so the job's
    step time cannot say where; per-host compute can. The host is quarantined and
    the job moved: leaving it would run the whole job at its pace.
    """
    timings = job.host_step_ms or {}
    if len(timings) < STRAGGLER_MIN_HOSTS:
        return None
    host, slowest = max(timings.items(), key=lambda kv: (kv[1], kv[0]))
    median = statistics.median(ms for h, ms in timings.items() if h != host)
    if median <= 0 or slowest < STRAGGLER_RATIO * median:
        return None
    detail = f"straggler {host}: {slowest:.0f} ms per step against its peers' {median:.0f} ms"
    return FailureKind.STRAGGLER, now, [host], detail
