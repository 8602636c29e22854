"""What a RunbookWorkflow run leaves behind: its tasks' durations for the next runs, the
report (with the critical path as it ran and what a restore puts back) and its metrics."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.runbook import DurationsInput, RunbookActivities
    from orchestrator.contracts.runbook import TERMINAL, RunbookReport, TaskPhase
    from orchestrator.policy.drain.maelstrom import critical_path, dag_of
    from workflows import observe
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import RETRY, restore_records

__all__ = ["observe_end", "record_durations", "report"]


async def record_durations(run: RunState) -> dict[str, float]:
    """How long each task that did its work took, kept for the next runs' stuck watch."""
    durations = {
        t.id: t.duration_s for t in run.tasks.values() if t.phase == TaskPhase.DONE and t.duration_s
    }
    record = {k: v for k, v in durations.items() if v is not None}
    await workflow.execute_activity_method(
        RunbookActivities.durations,
        DurationsInput(runbook=run.runbook.name, record=record),
        start_to_close_timeout=timedelta(seconds=30),
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=RETRY,
    )
    return record


def report(
    run: RunState, outcome: str, started: datetime, durations: dict[str, float]
) -> RunbookReport:
    rb = run.runbook
    # The planner's DAG, timed by what each task actually took (0 if it did not run).
    ran = dag_of(rb)
    ran.tasks = [t.model_copy(update={"duration_s": durations.get(t.id) or 0.0}) for t in ran.tasks]
    path = critical_path(ran)
    return RunbookReport(
        runbook=rb.name,
        workflow_id=workflow.info().workflow_id,
        mode=run.mode,
        outcome=outcome,
        started_at=started,
        finished_at=workflow.now(),
        tasks=list(run.tasks.values()),
        critical_path=path.tasks,
        critical_path_s=path.length_s,
        sequential_s=sum(durations.values()),
        events=run.events,
        restore_records=restore_records(rb, run.tasks),
    )


def observe_end(run: RunState, outcome: str, started: datetime) -> None:
    rb = run.runbook
    seconds = (workflow.now() - started).total_seconds()
    observe.run_ended(rb.kind.value, rb.name, str(getattr(outcome, "value", outcome)), seconds)
    for t in run.tasks.values():
        if t.phase in TERMINAL:
            observe.task_ended(rb.name, t.id, t.phase.value, t.duration_s)
