"""What a RunbookWorkflow run knows while it runs, in one object.

The workflow owns one :class:`RunState`; the scheduler, the task runner, the checks,
the rollback and the operator controls are handed it and read and write it there,
instead of each redeclaring the workflow's attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import (
        TERMINAL,
        ApproveInput,
        OperatorInput,
        RunbookRunInput,
        RunbookStatus,
        SkipReason,
        TaskControlInput,
        TaskPhase,
        TaskState,
        task_table,
    )
    from orchestrator.runbook.spec import Runbook, RunMode, Task

__all__ = ["RunState"]


@dataclass
class RunState:
    runbook: Runbook
    mode: RunMode
    #: task id -> its state, in the runbook's order
    tasks: dict[str, TaskState]
    #: task ids in the order they started: a topological order, the reverse of a rollback's
    order: list[str] = field(default_factory=list)
    #: who paused the run (an operator, or "failure of <task>"); None: not paused
    paused_by: str | None = None
    abort: OperatorInput | None = None
    #: why a task's ``on_failure: rollback`` rolls the run back
    rollback_reason: str | None = None
    #: running | rolling_back | a :class:`RunOutcome`
    state: str = "running"
    skips: dict[str, TaskControlInput] = field(default_factory=dict)
    #: condition overrides not yet used, by task id (each is used once)
    overrides: dict[str, TaskControlInput] = field(default_factory=dict)
    approvals: dict[str, ApproveInput] = field(default_factory=dict)
    #: what happened, stamped, for the report and the status query
    events: list[str] = field(default_factory=list)
    #: something the scheduler waits on changed (a task ended, was skipped ...)
    changed: bool = False
    #: runs started after TRUTH_PATCH (see workflows/runbook_steps.py)
    truthful: bool = False
    #: why a run that did not complete ended as it did
    why: str = ""
    #: tasks blocked by ``on_failure: pause`` (failed, waiting for an operator)
    paused_on_failure: set[str] = field(default_factory=set)

    @classmethod
    def plan(cls, inp: RunbookRunInput) -> RunState:
        """Every task pending, but those whose ``when`` leaves them out of this mode."""
        rb = inp.runbook
        run = cls(
            runbook=rb,
            mode=rb.mode_for(inp.mode),
            tasks={t.id: TaskState(id=t.id, template=t.template) for t in rb.tasks},
        )
        for task in rb.tasks:
            if not task.active_in(run.mode):
                run.skip(task.id, SkipReason.WHEN, f"when: {task.when} (this is a {run.mode} run)")
        return run

    @property
    def stopping(self) -> bool:
        """An operator aborted the run or a task rolls it back: start nothing more."""
        return self.abort is not None or self.rollback_reason is not None

    def ready(self) -> list[Task]:
        """The pending tasks whose dependencies let them start now. A task that depends on
        one that failed is skipped here (it can never start)."""
        ready = []
        for task in self.runbook.tasks:
            if self.tasks[task.id].phase != TaskPhase.PENDING:
                continue
            if self.truthful and task.id in self.order:
                continue  # started already, not yet past its first stage
            failed = [d for d in task.depends_on if self._blocks(self.tasks[d])]
            if failed:
                self.skip(
                    task.id, SkipReason.DEPENDENCY, f"not run: {', '.join(failed)} did not complete"
                )
                continue
            strong = [self.tasks[d].phase for d in task.depends_on]
            weak_done = all(self.tasks[d].phase in TERMINAL for d in task.weak_depends_on)
            if all(p in (TaskPhase.DONE, TaskPhase.SKIPPED) for p in strong) and weak_done:
                ready.append(task)
        return ready

    def _blocks(self, dependency: TaskState) -> bool:
        """Whether a task that ``depends_on`` this one must not run."""
        if dependency.phase in (TaskPhase.FAILED, TaskPhase.ROLLED_BACK):
            return True
        # Continued past, or itself not run for a failure: its dependents cannot run either.
        return self.truthful and dependency.skipped in (SkipReason.CONTINUED, SkipReason.DEPENDENCY)

    def set(self, task_id: str, phase: TaskPhase, message: str) -> None:
        self.tasks[task_id].phase = phase
        if message:
            self.tasks[task_id].message = message
        self.changed = True
        self.show()

    def skip(self, task_id: str, why: SkipReason, message: str) -> None:
        self.tasks[task_id].skipped = why
        self.set(task_id, TaskPhase.SKIPPED, message)

    def event(self, text: str) -> None:
        stamp = workflow.now().strftime("%H:%M:%S")
        self.events.append(f"{stamp} {text}")
        workflow.logger.info(text)

    def show(self) -> None:
        """The task table as the run's current details (the Temporal UI shows it)."""
        workflow.set_current_details(
            task_table(self.runbook.name, self.mode, self.state, self.tasks.values())
        )

    def known(self, task_id: str) -> None:
        """Refuse an operator's request naming a task the runbook does not have."""
        if task_id not in self.tasks:
            raise ApplicationError(
                f"no task {task_id!r} in {self.runbook.name}", type="InvalidRequest"
            )

    def status(self) -> RunbookStatus:
        return RunbookStatus(
            runbook=self.runbook.name,
            mode=self.mode,
            state="paused" if self.paused_by and self.state == "running" else self.state,
            paused_by=self.paused_by,
            tasks=list(self.tasks.values()),
            events=self.events[-50:],
        )
