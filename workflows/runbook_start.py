"""What a RunbookWorkflow run does before its first task: nothing it does changes the fleet.

It tags the run with search attributes (runbook, kind, region), builds the executor of
its templates, reads what a restore puts back (the drain's records), refuses a drain the
other regions cannot take, and reads how long each task took in earlier runs (a task
running past that p75 is reported stuck).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.runbook import DurationsInput, RunbookActivities
    from orchestrator.contracts.runbook import RunbookRunInput, RunOutcome
    from orchestrator.policy.drain.maelstrom import percentile
    from orchestrator.runbook.spec import ParamType, RunbookKind
    from orchestrator.temporal import OUTCOME, REGION, RUN_KIND, RUNBOOK
    from workflows import observe
    from workflows.runbook_executor import RETRY, TemplateExecutor
    from workflows.runbook_run import RunState
    from workflows.runbook_steps import (
        RECORDS_PATCH,
        StepContext,
        TaskFailed,
        admit_drain,
        building_of,
        drain_record,
    )

__all__ = ["start_up"]


async def start_up(run: RunState, inp: RunbookRunInput) -> TemplateExecutor:
    """Search attributes, what a restore puts back, the capacity check of a drain, and
    the tasks' history; the executor of the run's templates. A refused drain raises."""
    rb, info = inp.runbook, workflow.info()
    attrs = [RUNBOOK.value_set(rb.name), RUN_KIND.value_set(rb.kind.value)]
    param = rb.parameters.get("region")
    region = str(param.default) if param is not None and param.default else None
    building = next(
        (
            str(p.default)
            for p in rb.parameters.values()
            if p.type is ParamType.BUILDING and p.default
        ),
        "",
    )
    if region is None and building:
        # A building's runbook is about its region: the search attribute, the drain
        # record its restore reads and the capacity check all go by the region.
        try:
            region, _ = await building_of(building)
        except TaskFailed as exc:
            raise ApplicationError(exc.reason, type="InvalidInstance", non_retryable=True) from None
    if region is not None:
        attrs.append(REGION.value_set(region))
    workflow.upsert_search_attributes(attrs)
    ctx = StepContext(
        f"{info.workflow_id}/{info.run_id}",
        run.approvals.get,
        mode=run.mode,
        requested_by=inp.requested_by,
        nested=inp.nested,
        depth=inp.depth,
    )
    ctx.read_first = workflow.patched(RECORDS_PATCH)
    if rb.kind == RunbookKind.RESTORE and region is not None and ctx.read_first:
        record = await drain_record(region, inp.restore_of)
        ctx.records = record.records
        run.event(
            f"restoring what {record.workflow_id} recorded ({len(record.records)} tasks)"
            if record.workflow_id
            else f"{record.note}: restoring to the runbook's values"
        )
    if rb.kind == RunbookKind.DRAIN and region is not None:
        refusal = await admit_drain(region, inp.target_utilization, building)
        if refusal is not None:
            run.state = RunOutcome.REFUSED
            run.event(refusal)
            observe.run_ended(rb.kind.value, rb.name, RunOutcome.REFUSED.value, 0.0)
            if run.truthful:
                workflow.upsert_search_attributes([OUTCOME.value_set(run.state)])
            raise ApplicationError(refusal, type="UnsafeRequest", non_retryable=True)
    history = await workflow.execute_activity_method(
        RunbookActivities.durations,
        DurationsInput(runbook=rb.name),
        start_to_close_timeout=timedelta(seconds=30),
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=RETRY,
    )
    for task_id, seconds in history.items():
        if task_id in run.tasks and seconds:
            run.tasks[task_id].expected_s = percentile(seconds, 0.75)
    return TemplateExecutor(ctx)
