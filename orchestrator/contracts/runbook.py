"""The contract of RunbookWorkflow: how a run is started and what it is told.

Starters (the CLI, the trigger server, schedules) and the workflow share these
models. A run is started with an already-linted runbook, so an invalid
runbook never starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.contracts.runbook_undo import Undo
from orchestrator.runbook.predicates import PredicateResult, RegionReading
from orchestrator.runbook.spec import Runbook, RunMode

__all__ = [
    "RUNBOOK_WORKFLOW",
    "RUN_NOT_COMPLETED",
    "TERMINAL",
    "AlertResolvedInput",
    "ApproveInput",
    "DrainRecord",
    "GateCheck",
    "GateReading",
    "MAX_GATE_READINGS",
    "OperatorInput",
    "RunOutcome",
    "RunbookReport",
    "RunbookStatus",
    "SkipReason",
    "TaskControlInput",
    "TaskPhase",
    "TaskState",
    "Undo",
    "RunbookRunInput",
    "TriggerContext",
    "override_owner",
    "record_gate",
    "runbook_workflow_id",
    "task_table",
    "unfinished",
    "why_not_completed",
]

#: the workflow type name, for starters that start it by name
RUNBOOK_WORKFLOW = "RunbookWorkflow"


class TriggerContext(BaseModel):
    """What started a run: an alert group, a schedule, or a person."""

    source: str = Field(description="alertmanager | schedule | cli | api")
    #: Alertmanager groupKey, or the fingerprint when a runbook is per alert
    key: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    fingerprints: list[str] = Field(default_factory=list)
    started_at: datetime | None = None


class RunbookRunInput(BaseModel):
    runbook: Runbook
    parameters: dict[str, Any] = Field(default_factory=dict)
    mode: RunMode = "real"
    requested_by: str = Field(min_length=1)
    trigger: TriggerContext | None = None
    #: runbooks this one runs as nested tasks (and their restores), by the name the
    #: ``runbook`` template gives, linted and unbound: the starter reads the files
    #: (``orchestrator.runbook.lint.nested_runbooks``) so the workflow does no I/O
    nested: dict[str, Runbook] = Field(default_factory=dict)
    #: refuse to start a drain after which other regions run above this utilization
    target_utilization: float = Field(default=0.75, gt=0, le=1)
    #: how many nested runs deep this run is: 0 for a run a person, an alert or a schedule
    #: started; a nested run deeper than ``MAX_NESTING_DEPTH`` is refused by its parent
    depth: int = Field(default=0, ge=0)
    #: a restore: the workflow id of the drain run whose recorded values it puts back;
    #: None: the newest finished drain of the region not restored since (visibility)
    restore_of: str | None = None


class AlertResolvedInput(BaseModel):
    """Signal: an alert that started (or matches) this run has resolved."""

    fingerprint: str
    alertname: str = ""
    ends_at: datetime | None = None


def override_owner(region: str) -> str:
    """The rebalancer override owner of drains and restores of ``region``.

    Drains and restores of one region share it, so a restore can lift a drain's
    hold; a load test (another owner) is refused while a drain holds it.
    """
    return f"runbook:{region}"


def runbook_workflow_id(runbook: str, key: str) -> str:
    """``<runbook>-<key>``: the same alert group maps to the same id, so it starts once."""
    return f"{runbook}-{key}"


# --- run state, operator controls and the report ------------------------------


class TaskPhase(StrEnum):
    PENDING = "pending"
    PRE_CHECK = "pre_check"
    RUNNING = "running"
    POST_CHECK = "post_check"
    WAITING_APPROVAL = "waiting_approval"
    BLOCKED = "blocked"  # a condition failed: waiting for it to hold or an operator override
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"
    #: in flight when the run was aborted or rolled back, with nothing of its own to undo
    CANCELLED = "cancelled"


TERMINAL = {
    TaskPhase.DONE,
    TaskPhase.SKIPPED,
    TaskPhase.FAILED,
    TaskPhase.ROLLED_BACK,
    TaskPhase.CANCELLED,
}


class SkipReason(StrEnum):
    """Why a task was skipped: a run may end ``completed`` with skipped tasks only for these."""

    #: its ``when:`` does not match the run's mode
    WHEN = "when"
    #: an operator skipped it (``runbook skip``), before it started or after it failed
    OPERATOR = "operator"
    #: it failed and its ``on_failure: continue`` let the run go on without it
    CONTINUED = "on_failure_continue"
    #: a task it ``depends_on`` failed or was continued past, so it could not run
    DEPENDENCY = "dependency"
    #: never started: the run was aborted or rolled back first
    RUN_ENDED = "run_ended"
    #: its arguments leave nothing to do (a ``notify`` with no ``url``)
    NOTHING_TO_DO = "nothing_to_do"


class RunOutcome(StrEnum):
    """How a run ended. Only ``completed`` means every task did its work (or was skipped for
    a reason in :class:`SkipReason`); every other outcome ends the workflow execution failed,
    so the Temporal UI and ``temporal workflow list`` show it red, and the ``Outcome`` search
    attribute says which."""

    COMPLETED = "completed"
    #: tasks failed and the run did not roll back, or a task was left unfinished
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"
    #: an undo the fleet refused during a rollback: an operator must finish it
    ROLLBACK_FAILED = "rollback_failed"
    #: refused before anything changed (the drain capacity check)
    REFUSED = "refused"


#: the gate readings a task keeps (the newest). A reading of 2 predicates x 2 regions is ~660
#: bytes of JSON; 60 (a 5-step drain holding the most its spec allows, 11 reads per step, is
#: 55) keeps a gated task under ~40 KB of the run's payload, whatever it does.
MAX_GATE_READINGS = 60


class GateCheck(BaseModel):
    """One gate predicate as read in one region."""

    region: str
    #: the metric compared (empty: a reading recorded before the parts were kept)
    metric: str = ""
    #: the service whose metric it is; None: the region's own aggregate
    service: str | None = None
    op: str = ""
    #: None: the region reported no data
    observed: float | None = None
    threshold: float | None = None
    passed: bool


class GateReading(BaseModel):
    """One evaluation of a task's gates after a step."""

    at: datetime
    step: int
    #: every predicate passed (an operator's override does not make it pass)
    passed: bool
    #: the gates failed and the task held at the step to reread them
    held: bool = False
    checks: list[GateCheck] = Field(default_factory=list)
    #: the selected regions' own p99 and error rate in the same window
    regions: dict[str, RegionReading] = Field(default_factory=dict)


def record_gate(
    readings: list[GateReading],
    *,
    at: datetime,
    step: int,
    results: list[PredicateResult],
    regions: dict[str, RegionReading],
    held: bool,
) -> None:
    """Append one gate evaluation to ``readings``, keeping the newest ``MAX_GATE_READINGS``."""
    checks = [
        GateCheck(region=o.region, metric=r.metric, service=r.service, op=r.op,
                  observed=o.value, threshold=r.threshold, passed=o.ok)
        for r in results
        for o in r.observations
    ]  # fmt: skip
    readings.append(
        GateReading(at=at, step=step, passed=all(r.ok for r in results), held=held,
                    checks=checks, regions=dict(regions))
    )  # fmt: skip
    del readings[:-MAX_GATE_READINGS]


class TaskState(BaseModel):
    id: str
    template: str
    phase: TaskPhase = TaskPhase.PENDING
    step: int = 0
    steps: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    message: str = ""
    stuck: bool = False
    #: the p75 of earlier durations of this task, when known
    expected_s: float | None = None
    #: how to put back what its steps changed so far (a typed record per kind of undo)
    undo: Undo | None = None
    overrides: list[str] = Field(default_factory=list)
    #: why it was skipped (with ``phase`` skipped); ``message`` says it in words
    skipped: SkipReason | None = None
    #: each reading of its gates after a step, oldest first (at most ``MAX_GATE_READINGS``)
    gates: list[GateReading] = Field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


class OperatorInput(BaseModel):
    by: str = Field(min_length=1)
    reason: str = ""


class TaskControlInput(BaseModel):
    task: str
    by: str = Field(min_length=1)
    reason: str = ""


class ApproveInput(BaseModel):
    task: str
    by: str = Field(min_length=1)
    comment: str = ""


class RunbookStatus(BaseModel):
    runbook: str
    mode: str
    #: running | paused | rolling_back | completed | failed | aborted | rolled_back |
    #: rollback_failed (an undo the fleet refused; its task says why)
    state: str
    paused_by: str | None = None
    tasks: list[TaskState]
    events: list[str] = Field(default_factory=list)


class RunbookReport(BaseModel):
    runbook: str
    workflow_id: str
    mode: str
    outcome: str
    started_at: datetime
    finished_at: datetime
    tasks: list[TaskState]
    critical_path: list[str]
    critical_path_s: float
    sequential_s: float
    events: list[str]
    #: what a restore puts back, recorded by this run's tasks as they changed the world:
    #: the id of the task in the paired restore runbook -> the undo of the task naming it
    restore_records: dict[str, Undo] = Field(default_factory=dict)


class DrainRecord(BaseModel):
    """The values a drain found before it changed them, for its restore."""

    #: the drain run they come from; empty when none was found
    workflow_id: str = ""
    records: dict[str, Undo] = Field(default_factory=dict)
    #: why nothing was found, for the run's events
    note: str = ""


def unfinished(tasks: list[TaskState]) -> list[TaskState]:
    """Tasks still pending or in flight: none may be left when a run ends."""
    return [t for t in tasks if t.phase not in TERMINAL]


def why_not_completed(tasks: list[TaskState]) -> list[str]:
    """What keeps a run from ending ``completed``, one line per task; empty when it may.

    A run is completed only when every task is done, or skipped with a stated reason.
    """
    problems = []
    for t in tasks:
        if t.phase == TaskPhase.DONE:
            continue
        if t.phase == TaskPhase.SKIPPED and t.skipped is not None and t.message:
            continue
        if t.phase == TaskPhase.SKIPPED:
            problems.append(f"{t.id}: skipped without a stated reason")
        else:
            problems.append(f"{t.id}: {t.phase.value}" + (f" ({t.message})" if t.message else ""))
    return problems


#: the ``ApplicationError`` type a run that did not complete fails its workflow with
RUN_NOT_COMPLETED = "RunNotCompleted"


def task_table(runbook: str, mode: str, state: str, tasks: Iterable[TaskState]) -> str:
    """A run's tasks as Temporal markdown, for the workflow's current details."""
    tasks = list(tasks)
    done = sum(1 for t in tasks if t.phase in TERMINAL)
    rows = [
        f"**{runbook}** ({mode} run): {state}, {done}/{len(tasks)} tasks ended",
        "",
        "| task | phase | step | message |",
        "|---|---|---|---|",
    ]
    for t in tasks:
        step = f"{t.step}/{t.steps}" if t.steps else ""
        message = t.message.replace("|", "/").replace("\n", " ")[:200]
        rows.append(f"| {t.id} | {t.phase.value} | {step} | {message} |")
    return "\n".join(rows)
