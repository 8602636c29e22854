"""What every part of a runbook run shares: the retry policy, the failure of a
stage, what a template's step is given (:class:`StepContext`), and reading health
predicates through the check activity."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.drain import DrainActivities, DrainCheckInput, DrainRecordInput
    from orchestrator.activities.fleet_reads import FleetReadActivities
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.runbook import CheckInput, CheckResult, RunbookActivities
    from orchestrator.contracts.runbook import DrainRecord, TaskPhase, TaskState, Undo
    from orchestrator.exceptions import NON_RETRYABLE_ERROR_TYPES
    from orchestrator.runbook.predicates import Predicate
    from orchestrator.runbook.spec import Runbook, RunMode

__all__ = [
    "StepContext",
    "ACTIVITY_FAILURE_PATCH",
    "CANCELLATION",
    "CURRENT_STEP",
    "TRUTH_PATCH",
    "cancellation",
    "step_summary",
    "RECORDS_PATCH",
    "RETRY",
    "SHORT",
    "NothingToDo",
    "TaskFailed",
    "failure_reason",
    "admit_drain",
    "building_of",
    "check",
    "drain_record",
    "restore_records",
]

#: runs from before this read their targets inside the mutating activity and
#: restored what they found at restore time (their histories replay that way)
RECORDS_PATCH = "restore-from-drain-records"
#: a task whose activity or child workflow fails for good goes to its on_failure, and a
#: refused undo is reported without stopping the other undos
ACTIVITY_FAILURE_PATCH = "activity-failure-fails-task"
#: a run says completed only when it did the work: a task's timeout reaches its on_failure
#: whatever it was doing, no task is left pending or running, a run that did not complete
#: fails its workflow execution, and every run sets the Outcome search attribute
TRUTH_PATCH = "runs-tell-the-truth"

#: "<task>: step i/n" of the task this asyncio task runs, for the summary of its activities
CURRENT_STEP: ContextVar[str] = ContextVar("runbook_step", default="")


def step_summary() -> str | None:
    """The summary of an activity scheduled now: the runbook task and step it serves."""
    return CURRENT_STEP.get() or None


#: how a run's activities are cancelled (a task's timeout, an abort): runs since
#: TRUTH_PATCH wait until the activity has stopped, so a fleet call cut off by a timeout
#: cannot land after the rollback that follows it
CANCELLATION: ContextVar[ActivityCancellationType] = ContextVar(
    "runbook_cancellation", default=ActivityCancellationType.TRY_CANCEL
)


def cancellation() -> ActivityCancellationType:
    return CANCELLATION.get()


RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=20),
    maximum_attempts=8,
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)
SHORT = timedelta(seconds=60)


def failure_reason(exc: ActivityError | ChildWorkflowError) -> str:
    """The innermost cause's message: what the fleet (or the child run) said."""
    cause = exc.cause
    while isinstance(cause, (ActivityError, ChildWorkflowError)) and cause.cause is not None:
        cause = cause.cause
    return str(cause or exc)


#: a kind of undo record
Kind = TypeVar("Kind", bound=Undo)


@dataclass
class StepContext:
    """What every template's step is given about its run."""

    #: ``<workflow id>/<run id>``: the prefix of every mutation's idempotency key
    key_prefix: str
    #: task id -> the operator's approval of it, or None
    approved: Callable[[str], object | None]
    mode: RunMode = "real"
    requested_by: str = "runbook"
    #: the runbooks a ``runbook`` task may run, unbound (see RunbookRunInput.nested)
    nested: dict[str, Runbook] = field(default_factory=dict)
    #: how deep this run is nested (0: started by a person, a trigger or a schedule)
    depth: int = 0
    #: restore task id -> what its drain recorded (set at start-up of a restore)
    records: dict[str, Undo] = field(default_factory=dict)
    #: read targets before mutating (False only when replaying an older history)
    read_first: bool = True

    def key(self, task: str, step: int | str) -> str:
        """The idempotency key of a task's step (or its ``undo``): stable across replays."""
        return f"{self.key_prefix}/{task}/{step}"

    def recorded(self, task_id: str, kind: type[Kind]) -> Kind | None:
        """The drain's record for this restore task, if it is of ``kind`` (the caller
        checks that it is about the same resource as the task)."""
        found = self.records.get(task_id)
        return found if isinstance(found, kind) else None


class NothingToDo(Exception):
    """A template whose arguments leave it nothing to do; the task is skipped with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TaskFailed(Exception):
    """A stage of a task failed; ``reason`` is what the operator sees."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def check(predicates: list[Predicate], window_s: float | None = None) -> CheckResult:
    return await workflow.execute_activity_method(
        RunbookActivities.check,
        CheckInput(predicates=predicates, window_s=window_s),
        start_to_close_timeout=SHORT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=RETRY,
        summary=step_summary(),
        cancellation_type=cancellation(),
    )


async def building_of(name: str) -> tuple[str, float]:
    """The region of building ``name`` and the share of the region's capacity it holds,
    from the fleet's topology; :class:`TaskFailed` naming the field when there is none."""
    topology = await workflow.execute_activity_method(
        FleetReadActivities.read_topology,
        start_to_close_timeout=SHORT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=RETRY,
        summary=step_summary(),
        cancellation_type=cancellation(),
    )
    try:
        building = topology.building(name)
    except KeyError:
        known = ", ".join(b.name for b in topology.buildings) or "none"
        raise TaskFailed(f"building: unknown building {name!r} (known: {known})") from None
    return building.region, topology.building_share(name)


async def admit_drain(region: str, target: float, building: str = "") -> str | None:
    """None when the other regions can take ``region``'s load (with any running
    drains), or only ``building``'s share of it when given; else the refusal, with the
    numbers. Runs before anything changes."""
    info = workflow.info()
    try:
        forecast = await workflow.execute_activity_method(
            DrainActivities.check_capacity,
            DrainCheckInput(
                region=region,
                building=building,
                workflow_id=info.workflow_id,
                target=target,
                task_queue=info.task_queue,
            ),
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
            summary="capacity check before the drain",
            cancellation_type=cancellation(),
        )
    except ActivityError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "UnsafeRequest":
            return cause.message
        raise
    workflow.logger.info("capacity check passed: %s", forecast.summary())
    return None


async def drain_record(region: str, restore_of: str | None) -> DrainRecord:
    """What the drain this restore undoes recorded (``restore_of``, or the newest one)."""
    return await workflow.execute_activity_method(
        DrainActivities.drain_record,
        DrainRecordInput(
            region=region, workflow_id=restore_of or "", task_queue=workflow.info().task_queue
        ),
        start_to_close_timeout=SHORT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=RETRY,
        summary="read what the drain recorded, for its restore",
        cancellation_type=cancellation(),
    )


def restore_records(rb: Runbook, tasks: dict[str, TaskState]) -> dict[str, Undo]:
    """Restore task id -> the undo recorded by the task that names it (and was not
    rolled back already)."""
    found: dict[str, Undo] = {}
    for task in rb.tasks:
        state = tasks[task.id]
        named = isinstance(task.restore, str) and task.restore != "auto"
        if named and state.undo is not None and state.phase != TaskPhase.ROLLED_BACK:
            found[str(task.restore)] = state.undo
    return found
