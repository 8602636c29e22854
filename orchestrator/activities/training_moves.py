"""Runbook activities for the training half of a building incident (issue 25).

``training_move`` plans (which jobs have hosts in the building, and whether the GPU
capacity outside is enough: :func:`~orchestrator.policy.training.evacuation.plan_building_evacuation`)
and then asks each job's supervisor to move it, through its ``move_job`` Update: the
supervisor is the job's single writer, a runbook never stops a job behind its back.
The Update id is the runbook's idempotency key, so a retried activity moves once.
``hosts_quarantine`` refuses a host that still runs a job; ``hosts_release`` lets
hosts back in. Every fleet change carries ``<task key>/<host>``.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.activities.errors import reported
from orchestrator.activities.heartbeat import heartbeating
from orchestrator.clients.gpu_forecast import evacuation_plan, resolve_hosts
from orchestrator.contracts.training import JobState, QuarantineRequest, TrainingCluster
from orchestrator.contracts.training_moves import MOVE_JOB_UPDATE, MoveJobRequest, MoveJobResult
from orchestrator.contracts.training_supervisor import (
    SupervisorState,
    SupervisorStatus,
    supervisor_id,
)
from orchestrator.exceptions import GpuCapacityShort, HostsBusy, InvalidRequest, RunbookError
from orchestrator.fleet.protocol import Fleet
from orchestrator.policy.training.evacuation import EvacuationPlan

__all__ = [
    "HostsInput",
    "MoveCallInput",
    "MovePlanInput",
    "MovePlanResult",
    "TrainingMoveActivities",
]

#: how long a runbook's quarantine holds when nobody releases it (a restore does)
QUARANTINE_HOLD = timedelta(days=30)
#: a failure this recent that took a job off the hosts is the incident a run is handling
RECENT_FAILURE = timedelta(hours=1)


class MovePlanInput(BaseModel):
    building: str | None = None
    hosts: list[str] = Field(default_factory=list)
    jobs: list[str] = Field(default_factory=list)
    allow_waiting: bool = False


class MovePlanResult(BaseModel):
    #: the hosts to empty (the building's and the named ones), sorted
    hosts: list[str]
    #: the jobs to ask, sorted
    jobs: list[str]
    plan: EvacuationPlan


class MoveCallInput(BaseModel):
    job: str
    request: MoveJobRequest


class HostsInput(BaseModel):
    hosts: list[str]
    reason: str = ""
    key: str = ""


class TrainingMoveActivities:
    def __init__(self, fleet: Fleet, client: Client) -> None:
        self._fleet = fleet
        self._client = client

    @activity.defn(name="training_move_plan")
    @reported
    async def plan(self, inp: MovePlanInput) -> MovePlanResult:
        cluster = await self._fleet.training_cluster()
        avoid, jobs, plan = evacuation_plan(cluster, inp.building, inp.hosts, inp.jobs)
        if plan.short and not inp.allow_waiting:
            raise GpuCapacityShort(
                "not every training job can keep its size outside "
                f"{inp.building or ', '.join(inp.hosts)}: "
                + "; ".join(plan.lines())
                + " (set allow_waiting after an approval to go ahead)"
            )
        gone = await self._recovered_off(cluster, set(avoid), set(jobs), inp.jobs)
        return MovePlanResult(hosts=avoid, jobs=sorted({*jobs, *gone}), plan=plan)

    async def _recovered_off(
        self, cluster: TrainingCluster, there: set[str], planned: set[str], named: list[str]
    ) -> list[str]:
        """Jobs no longer on those hosts whose supervisor moved them off by a recovery (a
        power loss: the supervisor is usually faster than the alert), or is recovering them
        now. They are asked too: the move answers "not needed" with what the failure cost,
        so the run accounts for it."""
        found = []
        for job in cluster.jobs:
            name = job.spec.name
            if name in planned or job.state is JobState.FINISHED or (named and name not in named):
                continue
            try:
                status = await self._client.get_workflow_handle(supervisor_id(name)).query(
                    "status", result_type=SupervisorStatus
                )
            except RPCError:
                continue  # no supervisor: nothing recovered it, and nothing of it is there
            if status.state is SupervisorState.RECOVERING:
                # its failure is recorded when the recovery ends; the move waits for that
                # and then says whether it came from here
                found.append(name)
                continue
            for failure in status.failures:
                left = failure.hosts_out if failure.hosts_compacted else failure.hosts_before
                recent = failure.onset_at >= cluster.now - RECENT_FAILURE
                if failure.kind != "launch" and recent and there & set(left):
                    found.append(name)
                    break
        return found

    @activity.defn(name="training_move_job")
    @reported
    async def move(self, inp: MoveCallInput) -> MoveJobResult:
        """Ask the job's supervisor to move it; the Update id is the request id, so a
        retried attempt gets the first answer (the supervisor dedups the id as well)."""
        handle = self._client.get_workflow_handle(supervisor_id(inp.job))
        try:
            return await heartbeating(
                handle.execute_update(
                    MOVE_JOB_UPDATE,
                    inp.request,
                    id=inp.request.request_id,
                    result_type=MoveJobResult,
                )
            )
        except WorkflowUpdateFailedError as exc:
            raise InvalidRequest(f"job {inp.job}: {exc.cause or exc}") from exc
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise RunbookError(
                    f"jobs: {inp.job} has no running supervisor ({supervisor_id(inp.job)}); "
                    "a move goes through it"
                ) from exc
            raise

    @activity.defn(name="training_hosts")
    @reported
    async def hosts(self, inp: MovePlanInput) -> list[str]:
        """The hosts of ``building`` and the named ones (what a quarantine acts on)."""
        return resolve_hosts(await self._fleet.training_cluster(), inp.building, inp.hosts)

    @activity.defn(name="training_quarantine_hosts")
    @reported
    async def quarantine(self, inp: HostsInput) -> list[str]:
        cluster = await self._fleet.training_cluster()
        wanted = set(inp.hosts)
        busy = [
            f"{', '.join(sorted(wanted & set(j.hosts)))} ({j.spec.name})"
            for j in cluster.jobs
            if j.state in (JobState.RUNNING, JobState.PENDING) and wanted & set(j.hosts)
        ]
        if busy:
            raise HostsBusy(
                f"hosts: still running a training job: {'; '.join(busy)}; move the job first "
                "(training_move asks its supervisor)"
            )
        until = cluster.now + QUARANTINE_HOLD
        for host in inp.hosts:
            await self._fleet.quarantine_host(
                QuarantineRequest(host=host, reason=inp.reason or "runbook", until=until),
                idempotency_key=f"{inp.key}/{host}",
            )
        return list(inp.hosts)

    @activity.defn(name="training_release_hosts")
    @reported
    async def release(self, inp: HostsInput) -> list[str]:
        for host in inp.hosts:
            await self._fleet.release_host(host, idempotency_key=f"{inp.key}/{host}")
        return list(inp.hosts)
