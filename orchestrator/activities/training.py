"""Training activities: watch a job, stop it, quarantine hosts, read, start, confirm.

Thin on purpose: the decisions (which checkpoint, which hosts, when to halt) are the
pure policy's, made in the workflow. Every mutation passes the caller's idempotency
key straight to the fleet, so a retried activity applies once. The two long ones
(watch, await progress) heartbeat to Temporal on every poll, so a dead worker is
noticed within the heartbeat timeout and the activity moves to another worker.
With ``once`` they poll a single time instead and raise a benign, retryable
:class:`~orchestrator.exceptions.StillWaiting` when there is nothing to report, so
the retry policy is the poller and the workflow waits on Temporal's retry timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import AwareDatetime, BaseModel, Field, field_serializer, field_validator
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from orchestrator.activities.errors import reported
from orchestrator.activities.training_detect import classify
from orchestrator.contracts.host_list import HostList, compact_cluster, expand_cluster
from orchestrator.contracts.training import (
    JobState,
    QuarantineRequest,
    StartJobRequest,
    TrainingCheckpoints,
    TrainingCluster,
    TrainingJob,
)
from orchestrator.contracts.training_supervisor import FailureKind
from orchestrator.exceptions import FleetNotFound, StillWaiting
from orchestrator.fleet.protocol import Fleet
from orchestrator.logging import get_logger
from orchestrator.models import MutationResult

__all__ = [
    "AlertInput",
    "MutationInput",
    "ProgressInput",
    "ProgressResult",
    "QuarantineInput",
    "RecoveryView",
    "StartInput",
    "TrainingActivities",
    "WatchInput",
    "WatchResult",
]

log = get_logger(__name__)


class WatchInput(BaseModel):
    job: str
    hang_after_s: float = Field(gt=0)
    poll_s: float = Field(gt=0)
    #: poll once; a healthy job raises StillWaiting (the retry policy polls again)
    once: bool = False


class WatchResult(BaseModel):
    #: None: the job finished
    kind: FailureKind | None
    onset_at: AwareDatetime
    detected_at: AwareDatetime
    job: TrainingJob
    #: job hosts whose GPUs failed (to quarantine)
    bad_hosts: HostList = Field(default_factory=list)
    detail: str = ""


class MutationInput(BaseModel):
    job: str
    idempotency_key: str


class QuarantineInput(BaseModel):
    request: QuarantineRequest
    idempotency_key: str


class StartInput(BaseModel):
    request: StartJobRequest
    idempotency_key: str


class Stamped(BaseModel):
    result: MutationResult
    at: AwareDatetime


class RecoveryView(BaseModel):
    #: on the wire with its hosts as runs (``compact_cluster``): as plain JSON a
    #: 2,048-host fleet is 306 KB, past the 256 KB payload budget (issue 24)
    cluster: TrainingCluster
    checkpoints: TrainingCheckpoints

    @field_validator("cluster", mode="before")
    @classmethod
    def _expand(cls, value: Any) -> Any:
        return expand_cluster(value)

    @field_serializer("cluster", when_used="json")
    def _compact(self, cluster: TrainingCluster) -> dict[str, Any]:
        return compact_cluster(cluster.model_dump(mode="json"))


class ProgressInput(BaseModel):
    job: str
    past_step: int = Field(ge=0)
    timeout_s: float = Field(gt=0)
    hang_after_s: float = Field(gt=0)
    poll_s: float = Field(gt=0)
    #: poll once; no progress yet raises StillWaiting (the retry policy polls again),
    #: and ``timeout_s`` counts from the first attempt's scheduling
    once: bool = False


class ProgressResult(BaseModel):
    ok: bool
    step: int
    at: AwareDatetime
    reason: str = ""


class AlertInput(BaseModel):
    job: str
    message: str


def _job(cluster: TrainingCluster, name: str) -> TrainingJob:
    for j in cluster.jobs:
        if j.spec.name == name:
            return j
    raise FleetNotFound(f"training job {name!r} is not in the fleet", status=404, reason="job")


def _now() -> datetime:
    return datetime.now(UTC)


def _still_waiting(message: str) -> ApplicationError:
    # Benign: the SDK logs it at debug level, not as a failed attempt with a traceback.
    return ApplicationError(
        message, type=StillWaiting.type_name(), category=ApplicationErrorCategory.BENIGN
    )


def _waited_s() -> float:
    """Seconds from this activity's first scheduling to this attempt's start (0 outside one)."""
    if not activity.in_activity():
        return 0.0
    info = activity.info()
    return (info.started_time - info.scheduled_time).total_seconds()


class TrainingActivities:
    """``clock`` stamps the mutations (stop, quarantine, start): the fleet's own time, so a
    fleet on a simulated clock (``TraceFleet.now``) gets stamps on the same timeline as the
    ``now`` its reads report. Wall time by default, the lab's clock."""

    def __init__(self, fleet: Fleet, clock: Callable[[], datetime] = _now) -> None:
        self._fleet = fleet
        self._clock = clock

    @activity.defn(name="training_watch")
    @reported
    async def watch(self, inp: WatchInput) -> WatchResult:
        """Poll until the job fails or finishes; heartbeat to Temporal on every poll."""
        while True:
            cluster = await self._fleet.training_cluster()
            job = _job(cluster, inp.job)
            found = classify(cluster, job, inp.hang_after_s)
            if found is not None:
                kind, onset, bad, detail = found
                log.info("training failure", job=inp.job, kind=kind, detail=detail)
                return WatchResult(
                    kind=kind,
                    onset_at=onset,
                    detected_at=cluster.now,
                    job=job,
                    bad_hosts=bad,
                    detail=detail,
                )
            if job.state is JobState.FINISHED:
                return WatchResult(
                    kind=None, onset_at=cluster.now, detected_at=cluster.now, job=job
                )
            if inp.once:
                raise _still_waiting(f"job {inp.job} healthy at step {job.step}")
            activity.heartbeat(job.step)
            await asyncio.sleep(inp.poll_s)

    @activity.defn(name="training_stop")
    @reported
    async def stop(self, inp: MutationInput) -> Stamped:
        result = await self._fleet.stop_training_job(inp.job, idempotency_key=inp.idempotency_key)
        return Stamped(result=result, at=self._clock())

    @activity.defn(name="training_checkpoint_stop")
    @reported
    async def checkpoint_stop(self, inp: MutationInput) -> Stamped:
        """Checkpoint at the current step, then stop (a planned move's first change)."""
        result = await self._fleet.stop_training_job(
            inp.job, idempotency_key=inp.idempotency_key, checkpoint=True
        )
        return Stamped(result=result, at=self._clock())

    @activity.defn(name="training_quarantine")
    @reported
    async def quarantine(self, inp: QuarantineInput) -> Stamped:
        result = await self._fleet.quarantine_host(inp.request, idempotency_key=inp.idempotency_key)
        return Stamped(result=result, at=self._clock())

    @activity.defn(name="training_read")
    @reported
    async def read(self, job: str) -> RecoveryView:
        cluster, checkpoints = await asyncio.gather(
            self._fleet.training_cluster(), self._fleet.training_checkpoints(job)
        )
        return RecoveryView(cluster=cluster, checkpoints=checkpoints)

    @activity.defn(name="training_start")
    @reported
    async def start(self, inp: StartInput) -> Stamped:
        result = await self._fleet.start_training_job(
            inp.request, idempotency_key=inp.idempotency_key
        )
        return Stamped(result=result, at=self._clock())

    @activity.defn(name="training_await_progress")
    @reported
    async def await_progress(self, inp: ProgressInput) -> ProgressResult:
        """Wait for a step past ``past_step``; fail fast if the new run dies or hangs."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + inp.timeout_s
        while True:
            cluster = await self._fleet.training_cluster()
            job = _job(cluster, inp.job)
            if job.step > inp.past_step or job.state is JobState.FINISHED:
                return ProgressResult(ok=True, step=job.step, at=cluster.now)
            found = classify(cluster, job, inp.hang_after_s)
            if found is not None and found[0] is not FailureKind.LAUNCH:
                return ProgressResult(ok=False, step=job.step, at=cluster.now, reason=found[3])
            waited = _waited_s() if inp.once else 0.0
            if loop.time() >= deadline or waited >= inp.timeout_s:
                return ProgressResult(
                    ok=False,
                    step=job.step,
                    at=cluster.now,
                    reason=f"no step past {inp.past_step} within {inp.timeout_s:g}s",
                )
            if inp.once:
                raise _still_waiting(f"job {inp.job} not past step {inp.past_step} yet")
            activity.heartbeat(job.step)
            await asyncio.sleep(inp.poll_s)

    @activity.defn(name="training_alert")
    async def alert(self, inp: AlertInput) -> None:
        # The page goes to whatever collects the worker's logs; a human must look.
        log.error("training job halted", job=inp.job, alert=inp.message)
