"""DrillWorkflow: one scheduled drain drill, or a recorded reason why not.

A Temporal Schedule starts it (several times a week). It refuses to drill inside
a blocked window, while a blocking alert fires or while another drain runs; else
it picks the region drained least recently (from Temporal's visibility) and runs
the drain runbook as a child in drill mode, then the restore runbook. The result
says what it did, so the schedule's recent actions read as a drill log.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.drill import DrillActivities
    from orchestrator.activities.fleet_reads import FleetReadActivities
    from orchestrator.clients.runbook_runs import report_of
    from orchestrator.contracts.drill import BlockingInput, DrillInput, DrillResult, HistoryInput
    from orchestrator.contracts.runbook import RunbookReport, RunbookRunInput, TriggerContext
    from orchestrator.exceptions import NON_RETRYABLE_ERROR_TYPES, RunbookError
    from orchestrator.models import RegionStatus
    from orchestrator.policy.drain.drill import blocking_window, least_recently_drained
    from orchestrator.runbook.params import bind
    from orchestrator.runbook.spec import ParamType, Runbook
    from orchestrator.temporal import OUTCOME, REGION, RUN_KIND, RUNBOOK
    from workflows.runbook import RunbookWorkflow

__all__ = ["DrillWorkflow"]

RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=5,
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)
SHORT = timedelta(seconds=30)
#: drills set the Outcome search attribute when they end
OUTCOME_PATCH = "drill-outcome-attribute"


def _region_parameter(runbook: Runbook) -> str:
    for name, param in runbook.parameters.items():
        if param.type is ParamType.REGION:
            return name
    raise ApplicationError(
        f"runbook {runbook.name} has no region parameter to drill", type="RunbookError"
    )


def _bound(runbook: Runbook, region: str, given: dict[str, Any]) -> Runbook:
    values = {k: v for k, v in given.items() if k in runbook.parameters}
    values[_region_parameter(runbook)] = region
    try:
        return bind(runbook, values)
    except RunbookError as exc:
        raise ApplicationError(str(exc), type="RunbookError", non_retryable=True) from None


@workflow.defn
class DrillWorkflow:
    @workflow.init
    def __init__(self, inp: DrillInput) -> None:
        self.stage = "checking"

    @workflow.run
    async def run(self, inp: DrillInput) -> DrillResult:
        # Fail before any check: a runbook that cannot drill should fail every time, loudly.
        _region_parameter(inp.runbook)
        if inp.restore is not None:
            _region_parameter(inp.restore)
        info = workflow.info()
        window = blocking_window(inp.blocked_windows, workflow.now())
        if window is not None:
            return self._skipped(f"blocked window {window.describe()}")
        reasons = await workflow.execute_activity_method(
            DrillActivities.blockers,
            BlockingInput(
                alertmanager_url=inp.alertmanager_url,
                blocking_labels=inp.blocking_labels,
                task_queue=info.task_queue,
                exclude_prefix=info.workflow_id,
            ),
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        if reasons:
            return self._skipped("; ".join(reasons))
        candidates = list(inp.regions)
        if not candidates:
            topology = await workflow.execute_activity_method(
                FleetReadActivities.read_topology, start_to_close_timeout=SHORT, retry_policy=RETRY
            )
            candidates = [r.name for r in topology.regions if r.status == RegionStatus.ACTIVE]
        if not candidates:
            return self._skipped("no active region to drill")
        last = await workflow.execute_activity_method(
            DrillActivities.history,
            HistoryInput(regions=candidates, task_queue=info.task_queue),
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        region = least_recently_drained(candidates, last)
        self.stage = f"drilling {region}"
        drain_id = f"{info.workflow_id}-{region}"
        report = await self._run(inp, inp.runbook, region, drain_id)
        result = DrillResult(
            outcome="ran",
            region=region,
            last_drained=last,
            workflow_id=drain_id,
            runbook_outcome=report.outcome,
            reason=f"{inp.runbook.name} {report.outcome}",
            decided_at=workflow.now(),
        )
        if inp.restore is not None and report.outcome == "completed":
            self.stage = f"restoring {region}"
            restored = await self._run(
                inp, inp.restore, region, f"{drain_id}-restore", restore_of=drain_id
            )
            result.restore_workflow_id = f"{drain_id}-restore"
            result.restore_outcome = restored.outcome
            result.reason += f", {inp.restore.name} {restored.outcome}"
        self.stage = "done"
        self._outcome(result.restore_outcome or result.runbook_outcome or "completed")
        return result

    def _outcome(self, outcome: str) -> None:
        """The Outcome search attribute: how the drill's runs ended, or skipped."""
        if workflow.patched(OUTCOME_PATCH):
            workflow.upsert_search_attributes([OUTCOME.value_set(outcome)])

    async def _run(
        self,
        inp: DrillInput,
        runbook: Runbook,
        region: str,
        wid: str,
        restore_of: str | None = None,
    ) -> RunbookReport:
        bound = _bound(runbook, region, inp.parameters)
        try:
            return await self._child(inp, runbook, bound, region, wid, restore_of)
        except ChildWorkflowError as exc:
            # A run that did not complete fails its workflow, with its report attached.
            report = report_of(exc)
            if report is None:
                raise
            return report

    async def _child(
        self,
        inp: DrillInput,
        runbook: Runbook,
        bound: Runbook,
        region: str,
        wid: str,
        restore_of: str | None,
    ) -> RunbookReport:
        return await workflow.execute_child_workflow(
            RunbookWorkflow.run,
            RunbookRunInput(
                runbook=bound,
                parameters={k: p.default for k, p in bound.parameters.items()},
                mode="drill",
                requested_by=inp.requested_by,
                trigger=TriggerContext(
                    source="schedule", key=workflow.info().workflow_id, started_at=workflow.now()
                ),
                restore_of=restore_of,
            ),
            id=wid,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(REGION, region),
                    SearchAttributePair(RUNBOOK, runbook.name),
                    SearchAttributePair(RUN_KIND, runbook.kind.value),
                ]
            ),
        )

    def _skipped(self, why: str) -> DrillResult:
        self.stage = "skipped"
        self._outcome("skipped")
        workflow.logger.info(f"drill skipped: {why}")
        return DrillResult(outcome="skipped", reason=f"skipped: {why}", decided_at=workflow.now())

    @workflow.query
    def progress(self) -> str:
        return self.stage
