"""Reading one run from Temporal into a report model: its description, input and data.

A finished run's data is its result; a running one's is its progress query (and a
closed run that returned nothing, e.g. a terminated rebalancer, is queried too, which
needs a worker). The run's input (the first event of its history) gives what the
result leaves out: a load test's band definitions, a runbook's DAG, the rebalancer's
target utilization. Nothing here reads the fleet: the report shows what Temporal kept.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.service import RPCError

from orchestrator.clients.reads import result_or_query
from orchestrator.contracts.load_test import LoadTestInput, LoadTestProgress, LoadTestResult
from orchestrator.contracts.rebalancer import REBALANCER_ID, RebalancerInput, RebalancerStatus
from orchestrator.contracts.runbook import (
    RunbookReport,
    RunbookRunInput,
    RunbookStatus,
    TaskPhase,
)
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    FailureRecord,
    RecoveryResult,
    SupervisorInput,
    SupervisorStatus,
)
from orchestrator.exceptions import OrchestratorError
from orchestrator.policy.drain.maelstrom import critical_path, dag_of
from orchestrator.reports.gather_jobs import jobs_of_run
from orchestrator.reports.models import (
    REPORTED_TYPES,
    LoadTestReport,
    RebalancerReport,
    Report,
    RunbookReportView,
    RunHeader,
    SharePoint,
    TrainingReport,
)
from orchestrator.temporal import REGION

__all__ = ["gather_report", "latest_workflow_id"]

QUERY_TIMEOUT = timedelta(seconds=10)
#: runs looked at by ``--last`` (visibility lists running runs first, not by start time)
LAST_SCAN = 500


async def latest_workflow_id(client: Client) -> str:
    """The id of the most recently started run of a workflow type that has a report."""
    types = ", ".join(f"'{t}'" for t in REPORTED_TYPES)
    newest: tuple[datetime, str] | None = None
    async for run in client.list_workflows(f"WorkflowType IN ({types})", limit=LAST_SCAN):
        if newest is None or run.start_time > newest[0]:
            newest = (run.start_time, run.id)
    if newest is None:
        raise OrchestratorError(f"no run of {', '.join(REPORTED_TYPES)} found")
    return newest[1]


async def gather_report(
    client: Client, workflow_id: str, rebalancer_id: str = REBALANCER_ID
) -> Report:
    handle = client.get_workflow_handle(workflow_id)
    try:
        described = await handle.describe()
    except RPCError as exc:
        raise OrchestratorError(f"no workflow {workflow_id}: {exc.message}") from exc
    kind = REPORTED_TYPES.get(described.workflow_type)
    if kind is None:
        raise OrchestratorError(
            f"{workflow_id} is a {described.workflow_type}; reports cover "
            + ", ".join(REPORTED_TYPES)
        )
    running = described.status == WorkflowExecutionStatus.RUNNING
    header = RunHeader(
        workflow_id=workflow_id,
        run_id=described.run_id,
        workflow_type=described.workflow_type,
        status=_status_name(described),
        start=described.start_time,
        end=described.close_time,
        source="query" if running else "result",
    )
    if kind == "rebalancer":
        return await _rebalancer(client, handle, header)
    if kind == "loadtest":
        return await _load_test(client, handle, header)
    if kind == "runbook":
        return await _runbook(client, handle, header, described, rebalancer_id)
    return await _training(client, handle, header, described)


def _status_name(described: WorkflowExecutionDescription) -> str:
    status = described.status
    return "unknown" if status is None else status.name.lower()


async def _data(
    client: Client, header: RunHeader, result_type: type, query: str, query_type: type
) -> tuple[Any, RunHeader]:
    """The run's result or query answer; a closed run without a result is queried."""
    if header.status in ("running", "completed"):
        value = await result_or_query(client, header.workflow_id, result_type, query, query_type)
        if value is not None:
            return value, header
    handle = client.get_workflow_handle(header.workflow_id)
    try:
        answer = await handle.query(query, result_type=query_type, rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowFailureError) as exc:
        raise OrchestratorError(
            f"{header.workflow_id} is {header.status} without a result, and its {query!r} "
            f"query got no answer (is a worker running?): {exc}"
        ) from exc
    return answer, header.model_copy(update={"source": "query"})


async def _start_input(client: Client, handle: WorkflowHandle[Any, Any], typ: type) -> Any:
    """The input the latest run started with, from the first event of its history."""
    async for event in handle.fetch_history_events(page_size=1):
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        if not payloads:
            return None
        [value] = await client.data_converter.decode(list(payloads)[:1], [typ])
        return value
    return None


async def _rebalancer(
    client: Client, handle: WorkflowHandle[Any, Any], header: RunHeader
) -> RebalancerReport:
    status, header = await _data(client, header, RebalancerStatus, "status", RebalancerStatus)
    inp: RebalancerInput | None = await _start_input(client, handle, RebalancerInput)
    return RebalancerReport(
        header=header,
        status=status,
        target_utilization=inp.constraints.target_utilization if inp is not None else None,
    )


async def _load_test(
    client: Client, handle: WorkflowHandle[Any, Any], header: RunHeader
) -> LoadTestReport:
    data, header = await _data(client, header, LoadTestResult, "progress", LoadTestProgress)
    inp: LoadTestInput = await _start_input(client, handle, LoadTestInput)
    return LoadTestReport(
        header=header,
        region=data.region,
        service=data.service,
        result=data if isinstance(data, LoadTestResult) else None,
        progress=data if isinstance(data, LoadTestProgress) else None,
        metrics=inp.watched_metrics() if inp is not None else [],
    )


async def _runbook(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    header: RunHeader,
    described: WorkflowExecutionDescription,
    rebalancer_id: str,
) -> RunbookReportView:
    data, header = await _data(client, header, RunbookReport, "status", RunbookStatus)
    inp: RunbookRunInput | None = await _start_input(client, handle, RunbookRunInput)
    region = described.typed_search_attributes.get(REGION)
    if region is None and inp is not None:
        value = inp.parameters.get("region")
        region = value if isinstance(value, str) else None
    if isinstance(data, RunbookReport):
        fields: dict[str, Any] = {
            "outcome": data.outcome,
            "critical_path": data.critical_path,
            "critical_path_s": data.critical_path_s,
            "sequential_s": data.sequential_s,
        }
    else:
        fields = _projected_path(data, inp)
    view = RunbookReportView(
        header=header,
        runbook=data.runbook,
        mode=data.mode,
        region=region,
        tasks=data.tasks,
        events=data.events,
        as_of=described.close_time or datetime.now(UTC),
        **fields,
    )
    if region is not None:
        view.region_shares = await _region_shares(client, rebalancer_id, region, view)
    view.training = await jobs_of_run(client, view, gather_report)
    return view


def _projected_path(status: RunbookStatus, inp: RunbookRunInput | None) -> dict[str, Any]:
    """A running run's critical path: done tasks as they took, running ones as far as they
    got, the rest as the runbook expects."""
    now = datetime.now(UTC)
    taken: dict[str, float] = {}
    for t in status.tasks:
        if t.started_at is not None:
            taken[t.id] = ((t.finished_at or now) - t.started_at).total_seconds()
    fields: dict[str, Any] = {
        "outcome": status.state,
        "critical_path": [],
        "critical_path_s": 0.0,
        "sequential_s": sum(taken.values()),
    }
    if inp is None:
        return fields
    dag = dag_of(inp.runbook)
    skipped = {t.id for t in status.tasks if t.phase is TaskPhase.SKIPPED}
    dag.tasks = [
        t.model_copy(
            update={"duration_s": 0.0 if t.id in skipped else taken.get(t.id, t.duration_s)}
        )
        for t in dag.tasks
    ]
    path = critical_path(dag)
    fields.update(critical_path=path.tasks, critical_path_s=path.length_s)
    return fields


async def _region_shares(
    client: Client, rebalancer_id: str, region: str, view: RunbookReportView
) -> list[SharePoint]:
    """The region's share per rebalancer epoch over the run, from the epochs it keeps."""
    try:
        status: RebalancerStatus = await client.get_workflow_handle(rebalancer_id).query(
            "status", result_type=RebalancerStatus, rpc_timeout=QUERY_TIMEOUT
        )
    except (RPCError, WorkflowFailureError):
        return []  # no rebalancer answering: the chart says the data is not available
    start = view.header.start
    end = view.header.end or datetime.now(UTC)
    known = [e for e in status.epochs if region in e.shares]
    if start is None:
        return []
    before = [e for e in known if e.at < start]
    during = [e for e in known if start <= e.at <= end]
    # The last epoch before the run gives the share the run started from.
    chosen = before[-1:] + during
    if not during:
        return []
    return [SharePoint(at=max(e.at, start), share=e.shares[region]) for e in chosen]


async def _training(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    header: RunHeader,
    described: WorkflowExecutionDescription,
) -> TrainingReport:
    status, header = await _data(client, header, SupervisorStatus, "status", SupervisorStatus)
    inp: SupervisorInput | None = await _start_input(client, handle, SupervisorInput)
    started = inp.started_at if inp is not None and inp.started_at else described.start_time
    launches = [f for f in (inp.failures if inp else []) if f.kind is FailureKind.LAUNCH]
    first = launches[0] if launches else await _launch(client, header, status)
    if first is not None and started is not None and first.detected_at < started:
        first = None  # an earlier supervisor's child under a reused workflow id
    return TrainingReport(
        header=header,
        status=status,
        started_at=started,
        start_step=(first.resumed_from_step or 0) if first is not None else 0,
        launched_at=(first.recovered_at or first.restarted_at) if first is not None else None,
        as_of=described.close_time or datetime.now(UTC),
    )


async def _launch(
    client: Client, header: RunHeader, status: SupervisorStatus
) -> FailureRecord | None:
    """The supervisor's launch of the job in this run, when it launched it (status leaves
    launches out): recovery number 1 that is not among the failures, from its child's result."""
    if any(f.number == 1 for f in status.failures):
        return None
    child = client.get_workflow_handle(
        f"{header.workflow_id}-recovery-1", result_type=RecoveryResult
    )
    try:
        result: RecoveryResult = await child.result(rpc_timeout=QUERY_TIMEOUT)
    except (RPCError, WorkflowFailureError):
        return None
    return result.failure if result.failure.kind is FailureKind.LAUNCH else None
