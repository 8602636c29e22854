"""A run says ``completed`` only when it did the work: a property over random runbooks.

Hypothesis builds random DAGs of tasks whose activities succeed, fail for a while, fail
for good, hang or are cancelled (by a timeout, or by an operator's abort at a random
moment), with random ``on_failure`` and ``timeout``; each batch runs concurrently on a
real dev server against scripted activities (no fleet), and after every run the test
checks the invariant and the outcome against a model of what must happen.

Why the dev server and not the time-skipping one: a run waits for a cancelled activity to
stop (``WAIT_CANCELLATION_COMPLETED``), and when the cancel crosses the activity's own
completion, the Java test server answers ``ACTIVITY_UNKNOWN`` and the run never hears of
either (the dev server settles the same race in every one of 30 concurrent tries). So the
durations here are real seconds, chosen with a margin over the dev server's timer
resolution (about a second) wherever the model depends on which of two timers fires first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio import activity
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.runbook import (
    CheckInput,
    CheckResult,
    DurationsInput,
    NotifyInput,
    WeightInput,
)
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import (
    OperatorInput,
    RunbookReport,
    RunbookRunInput,
    SkipReason,
    TaskControlInput,
    TaskPhase,
    unfinished,
    why_not_completed,
)
from orchestrator.models import ServiceWeightChange
from orchestrator.runbook.predicates import PredicateResult
from orchestrator.runbook.spec import Runbook
from orchestrator.temporal import OUTCOME, SEARCH_ATTRIBUTES, binary_path, data_converter
from tests.fixtures.temporal import new_worker
from workflows.runbook import RunbookWorkflow

# A dev server of its own, started through the SDK (its process is not a Python Popen, so
# the fast tier's guard cannot see it): this module is server-tier by declaration.
pytestmark = pytest.mark.server

T = TypeVar("T")

Behaviour = Literal["ok", "flaky", "fatal", "retry_forever", "hang"]
OnFailure = Literal["rollback", "continue", "pause"]

#: a task's timeout: none, short (the delays and retries below outlast it), or roomy
SHORT, ROOMY = 2.0, 60.0
TIMEOUTS = [None, SHORT, ROOMY]
#: a delay well inside SHORT, and one well past it
QUICK_DELAY, LONG_DELAY = 0.1, 4.0


# --- scripted activities: what each call does is written in its arguments ----------------


def _fail(behaviour: str, attempt: int) -> None:
    if behaviour == "fatal":
        raise ApplicationError("the fleet refused it", type="InvalidRequest", non_retryable=True)
    if behaviour == "retry_forever" or (behaviour == "flaky" and attempt <= 2):
        raise RuntimeError(f"{behaviour}: attempt {attempt} failed")


async def _hang() -> None:
    while True:  # until the workflow cancels it (heartbeats deliver the cancel)
        activity.heartbeat()
        await asyncio.sleep(0.1)


@activity.defn(name="notify_webhook")
async def notify(inp: NotifyInput) -> None:
    behaviour = inp.url.rsplit("/", 1)[-1]
    if behaviour == "hang":
        await _hang()
    _fail(behaviour, activity.info().attempt)


@activity.defn(name="read_service_weight")
async def read_weight(change: ServiceWeightChange) -> float:
    return 1.0


@activity.defn(name="set_service_weight")
async def set_weight(inp: WeightInput) -> None:
    if inp.change.service.startswith("undofail") and inp.key.endswith("/undo"):
        raise ApplicationError("undo refused", type="InvalidRequest", non_retryable=True)
    _fail("flaky" if "flaky" in inp.change.service else "ok", activity.info().attempt)


@activity.defn(name="check_predicates")
async def check(inp: CheckInput) -> CheckResult:
    results = [
        PredicateResult(
            predicate=str(p.service), ok="sick" not in str(p.service), message=f"{p.service} sick"
        )
        for p in inp.predicates
    ]
    return CheckResult(ok=all(r.ok for r in results), results=results)


@activity.defn(name="task_durations")
async def durations(inp: DurationsInput) -> dict[str, list[float]]:
    return {}


ACTIVITIES = [notify, read_weight, set_weight, check, durations]


# --- scenarios and the model of their outcome ---------------------------------------------


@dataclass
class Spec:
    """One task: what it does, and what it does when it fails."""

    kind: Literal["notify", "delay", "weights", "approval"]
    behaviour: str
    on_failure: OnFailure
    timeout: float | None
    depends_on: list[int] = field(default_factory=list)
    weak_depends_on: list[int] = field(default_factory=list)
    gate_holds: int = 0

    def fails(self) -> bool:
        """Whether the task fails, by its own activity or timeout (independent of the run)."""
        match self.kind:
            case "notify":
                return self.behaviour not in ("ok", "flaky", "none")
            case "delay":
                return self.timeout is not None and float(self.behaviour) > self.timeout
            case "weights":
                return "sick" in self.behaviour
            case _:
                return True  # nobody approves


@dataclass
class Scenario:
    tasks: list[Spec]
    #: what the operator does when a task pauses the run
    operator: Literal["skip", "abort"] = "skip"
    #: an operator's abort this many (real) seconds after the start, or none
    abort_after: float | None = None

    def runbook(self) -> Runbook:
        return Runbook.model_validate(
            {
                "name": "random",
                "kind": "recovery",
                "tasks": [self._task(i, s) for i, s in enumerate(self.tasks)],
            }
        )

    def _task(self, i: int, s: Spec) -> dict[str, Any]:
        task: dict[str, Any] = {
            "id": f"t{i}",
            "on_failure": s.on_failure,
            "depends_on": [f"t{d}" for d in s.depends_on],
            "weak_depends_on": [f"t{d}" for d in s.weak_depends_on],
        }
        if s.timeout is not None:
            task["timeout"] = s.timeout
        match s.kind:
            case "notify":
                url = "" if s.behaviour == "none" else f"http://receiver.invalid/{s.behaviour}"
                task.update(template="notify", args={"url": url, "message": "m"})
            case "delay":
                task.update(template="delay", args={"duration": float(s.behaviour)})
            case "weights":
                service = s.behaviour
                gate = {"metric": "error_rate", "service": service, "region": "r1", "op": "<",
                        "value": 0.01}  # fmt: skip
                task.update(
                    template="service_weight",
                    args={"region": "r1", "service": service, "weight": 0.0},
                    steps=2,
                    wait=0.2,
                    gates=[gate],
                    gate_holds=s.gate_holds,
                )
            case "approval":
                task.update(template="approval", args={"approvers": ["alice"], "timeout": 1})
        return task

    def expected(self) -> tuple[set[str], dict[str, tuple[TaskPhase, SkipReason | None]]]:
        """The outcomes this run may end with, and (for a completed run) each task's end."""
        ends: dict[str, tuple[TaskPhase, SkipReason | None]] = {}
        blocked: set[int] = set()  # tasks whose dependents cannot run
        outcomes: set[str] = set()
        undo_fails = False
        for i, s in enumerate(self.tasks):
            if any(d in blocked for d in s.depends_on):
                blocked.add(i)
                ends[f"t{i}"] = (TaskPhase.SKIPPED, SkipReason.DEPENDENCY)
                continue
            undo_fails |= s.kind == "weights" and s.behaviour.startswith("undofail")
            if s.kind == "notify" and s.behaviour == "none":
                ends[f"t{i}"] = (TaskPhase.SKIPPED, SkipReason.NOTHING_TO_DO)
            elif not s.fails():
                ends[f"t{i}"] = (TaskPhase.DONE, None)
            elif s.on_failure == "continue":
                blocked.add(i)
                ends[f"t{i}"] = (TaskPhase.SKIPPED, SkipReason.CONTINUED)
            elif s.on_failure == "pause" and self.operator == "skip":
                ends[f"t{i}"] = (TaskPhase.SKIPPED, SkipReason.OPERATOR)
            else:
                blocked.add(i)
                outcomes.add("aborted" if s.on_failure == "pause" else "rolled_back")
        outcomes = outcomes or {"completed"}
        if self.abort_after is not None:
            outcomes.add("aborted")  # unless the run ended before the abort arrived
        if outcomes != {"completed"} and undo_fails:
            outcomes.add("rollback_failed")
        return outcomes, ends


def specs(n_before: int) -> st.SearchStrategy[Spec]:
    earlier = st.lists(st.integers(0, max(n_before - 1, 0)), max_size=2, unique=True)
    kinds = st.sampled_from(["notify", "notify", "delay", "weights", "approval"])
    return kinds.flatmap(
        lambda kind: st.builds(
            Spec,
            kind=st.just(kind),
            behaviour={
                "notify": st.sampled_from(
                    ["ok", "flaky", "fatal", "retry_forever", "hang", "none"]
                ),
                "delay": st.sampled_from([str(QUICK_DELAY), str(LONG_DELAY)]),
                "weights": st.sampled_from(
                    ["svc", "flaky-svc", "sick-svc", "undofail-svc", "undofail-sick"]
                ),
                "approval": st.just("nobody"),
            }[kind],
            on_failure=st.sampled_from(["rollback", "continue"]),
            timeout=st.sampled_from(TIMEOUTS),
            depends_on=earlier if n_before else st.just([]),
            weak_depends_on=earlier if n_before else st.just([]),
            gate_holds=st.integers(0, 2),
        ).map(_real_time_bounds)
    )


def _real_time_bounds(s: Spec) -> Spec:
    """Timeouts the model can call in real time, and no run longer than a few seconds."""
    if s.behaviour in ("hang", "retry_forever"):
        s.timeout = SHORT  # cut off while hanging or between retries (71 s of them)
    elif s.behaviour == "flaky" or s.kind == "weights":
        # ~1-3 s of retries or steps: too close to SHORT for a real-time verdict
        s.timeout = None if s.timeout == SHORT else s.timeout
    s.weak_depends_on = [d for d in s.weak_depends_on if d not in s.depends_on]
    return s


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(1, 5))
    tasks = [draw(specs(i)) for i in range(n)]
    abort = draw(st.one_of(st.none(), st.floats(0.0, 3.0)))
    return Scenario(tasks=tasks, abort_after=abort)


# --- a dev server, on a loop of its own (hypothesis tests are synchronous) ------------------


class Temporal:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def start(self) -> None:
        self.env = await WorkflowEnvironment.start_local(
            data_converter=data_converter,
            dev_server_existing_path=binary_path("temporal"),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_log_level="error",
        )
        self.worker = new_worker(self.env.client, ACTIVITIES)
        self.runner = asyncio.ensure_future(self.worker.run())

    async def stop(self) -> None:
        await self.worker.shutdown()
        await self.env.shutdown()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def temporal() -> Iterator[Temporal]:
    t = Temporal()
    t.run(t.start())
    yield t
    t.run(t.stop())
    t.close()


async def operate(client: Client, wid: str, scenario: Scenario, done: Callable[[], bool]) -> None:
    """The operator: aborts the run at a random moment, or skips or aborts a task that
    paused it (polled slowly: the test server's clock does not skip while queries arrive)."""
    handle = client.get_workflow_handle(wid)
    abort = OperatorInput(by="op", reason="random abort")
    if scenario.abort_after is not None:
        await asyncio.sleep(scenario.abort_after)
        with contextlib.suppress(RPCError, WorkflowUpdateFailedError):
            await handle.execute_update(RunbookWorkflow.abort_run, abort)
    if not any(s.on_failure == "pause" for s in scenario.tasks):
        return
    while not done():
        try:
            status = await handle.query(RunbookWorkflow.status)
        except (RPCError, WorkflowQueryFailedError):
            await asyncio.sleep(0.2)  # not started on the worker yet, or just ended
            continue
        for t in status.tasks:
            if t.phase == TaskPhase.BLOCKED and t.message.startswith("paused on failure"):
                if scenario.operator == "skip":
                    skip = TaskControlInput(task=t.id, by="op", reason="r")
                    await handle.execute_update(RunbookWorkflow.skip, skip)
                else:
                    await handle.execute_update(RunbookWorkflow.abort_run, abort)
                break
        await asyncio.sleep(0.2)


async def run_one(t: Temporal, scenario: Scenario) -> tuple[RunbookReport, Any]:
    client = t.env.client
    wid = f"random-{uuid.uuid4().hex[:10]}"
    handle = await client.start_workflow(
        RunbookWorkflow.run,
        RunbookRunInput(runbook=scenario.runbook(), requested_by="hypothesis"),
        id=wid,
        task_queue=t.worker.task_queue,
    )
    result = asyncio.ensure_future(runbook_result(handle))
    try:
        await asyncio.wait_for(
            asyncio.gather(result, operate(client, wid, scenario, result.done)), 90
        )
    except TimeoutError:
        status = await handle.query(RunbookWorkflow.status)
        raise AssertionError(f"run never ended: {scenario}\n{status}") from None
    return result.result(), await handle.describe()


async def run_batch(t: Temporal, batch: list[Scenario]) -> list[tuple[RunbookReport, Any]]:
    return await asyncio.gather(*(run_one(t, s) for s in batch))


class TestPausedRuns:
    """A task that fails with ``on_failure: pause`` holds the run for an operator: a skip
    lets the run go on and complete (the task skipped, saying by whom), an abort ends it
    ``aborted`` with the task failed and what was in flight cancelled."""

    def test_skip_after_a_failure_completes_the_run(self, temporal: Temporal) -> None:
        scenario = Scenario(
            tasks=[
                Spec(kind="notify", behaviour="fatal", on_failure="pause", timeout=None),
                Spec(kind="notify", behaviour="ok", on_failure="rollback", timeout=None,
                     depends_on=[0]),
            ],
            operator="skip",
        )  # fmt: skip
        report, described = temporal.run(run_one(temporal, scenario))
        assert report.outcome == "completed", report.events
        ends = {t.id: (t.phase, t.skipped) for t in report.tasks}
        assert ends == scenario.expected()[1]
        assert ends["t0"] == (TaskPhase.SKIPPED, SkipReason.OPERATOR)
        assert described.status == WorkflowExecutionStatus.COMPLETED

    def test_abort_while_paused_cancels_what_is_in_flight(self, temporal: Temporal) -> None:
        scenario = Scenario(
            tasks=[
                Spec(kind="notify", behaviour="fatal", on_failure="pause", timeout=None),
                Spec(kind="notify", behaviour="hang", on_failure="rollback", timeout=ROOMY),
                Spec(kind="notify", behaviour="ok", on_failure="rollback", timeout=None,
                     depends_on=[0]),
            ],
            operator="abort",
        )  # fmt: skip
        report, described = temporal.run(run_one(temporal, scenario))
        assert report.outcome == "aborted", report.events
        phases = {t.id: t.phase for t in report.tasks}
        assert phases == {
            "t0": TaskPhase.FAILED,
            "t1": TaskPhase.CANCELLED,
            "t2": TaskPhase.SKIPPED,
        }
        assert described.status == WorkflowExecutionStatus.FAILED
        assert described.typed_search_attributes.get(OUTCOME) == "aborted"


class TestRunsTellTheTruth:
    """Whatever its tasks do, a run ends with no task pending or in flight; it ends
    ``completed`` only when every task is done or skipped with a stated reason, and then
    exactly as the runbook says; otherwise it fails its workflow execution, and the
    ``Outcome`` search attribute says how it ended."""

    @settings(
        max_examples=int(os.environ.get("INVARIANT_EXAMPLES", "25")),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        derandomize=True,
    )
    @pytest.mark.timeout(900)
    @given(batch=st.lists(scenarios(), min_size=6, max_size=14))
    def test_invariant_and_outcome(self, temporal: Temporal, batch: list[Scenario]) -> None:
        for scenario, (report, described) in zip(
            batch, temporal.run(run_batch(temporal, batch)), strict=True
        ):
            allowed, ends = scenario.expected()
            where = f"{scenario}\n{report.events}"
            assert unfinished(report.tasks) == [], where
            assert report.outcome in allowed, where
            assert described.typed_search_attributes.get(OUTCOME) == report.outcome
            if report.outcome == "completed":
                assert described.status == WorkflowExecutionStatus.COMPLETED
                assert why_not_completed(report.tasks) == [], where
                assert {t.id: (t.phase, t.skipped) for t in report.tasks} == ends, where
            else:
                assert described.status == WorkflowExecutionStatus.FAILED, where
