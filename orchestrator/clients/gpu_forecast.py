"""The GPU half of a building incident's forecast (issue 25): for each ``training_move``
task of a runbook, which jobs have hosts there and whether they keep their size outside.

``--dry-run`` prints it next to the plan; the ``training_move`` task's first activity
computes the same plan and refuses a short one without ``allow_waiting``.
"""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator.contracts.training import JobState, TrainingCluster
from orchestrator.exceptions import InvalidRequest
from orchestrator.fleet.protocol import Fleet
from orchestrator.policy.training.evacuation import (
    EvacuationJob,
    EvacuationPlan,
    plan_building_evacuation,
)
from orchestrator.runbook.spec import Runbook, RunMode
from orchestrator.runbook.templates import REGISTRY
from orchestrator.runbook.training_templates import TrainingMoveArgs

__all__ = ["GpuForecast", "evacuation_plan", "gpu_forecast", "resolve_hosts"]


class GpuForecast(BaseModel):
    task: str
    allow_waiting: bool
    plan: EvacuationPlan

    @property
    def refused(self) -> bool:
        return self.plan.short and not self.allow_waiting


def resolve_hosts(cluster: TrainingCluster, building: str | None, hosts: list[str]) -> list[str]:
    """The building's hosts and the named ones, sorted; unknown names are refused."""
    known = {h.name for h in cluster.hosts}
    unknown = sorted(set(hosts) - known)
    if unknown:
        raise InvalidRequest(f"hosts: unknown host(s) {', '.join(unknown)}")
    found = {h.name for h in cluster.hosts if building is not None and h.building == building}
    if building is not None and not found:
        raise InvalidRequest(f"building: no training host in building {building!r}")
    return sorted(found | set(hosts))


def evacuation_plan(
    cluster: TrainingCluster, building: str | None, hosts: list[str], jobs: list[str]
) -> tuple[list[str], list[str], EvacuationPlan]:
    """(hosts to empty, jobs to ask, the GPU plan) for a ``training_move``."""
    there = set(resolve_hosts(cluster, building, hosts))
    unknown = sorted(set(jobs) - {j.spec.name for j in cluster.jobs})
    if unknown:
        raise InvalidRequest(f"jobs: unknown training job(s) {', '.join(unknown)}")
    active = [
        j
        for j in cluster.jobs
        if j.state is not JobState.FINISHED
        and set(j.hosts) & there
        and (not jobs or j.spec.name in jobs)
    ]
    plan = plan_building_evacuation(
        cluster.hosts,
        [EvacuationJob(spec=j.spec, hosts=j.hosts) for j in active],
        [building] if building else [],
        now=cluster.now,
        avoid_hosts=hosts,
        quarantine=cluster.quarantine,
        incidents=cluster.incidents,
    )
    named = sorted(jobs) if jobs else sorted(j.spec.name for j in active)
    return sorted(there), named, plan


async def gpu_forecast(fleet: Fleet, runbook: Runbook, mode: RunMode) -> list[GpuForecast]:
    """One forecast per ``training_move`` task that runs in ``mode`` (none: no fleet read)."""
    tasks = [t for t in runbook.tasks if t.template == "training_move" and t.active_in(mode)]
    if not tasks:
        return []
    cluster = await fleet.training_cluster()
    out = []
    for task in tasks:
        args = REGISTRY["training_move"].validate_args(task.args)
        assert isinstance(args, TrainingMoveArgs)
        _hosts, _jobs, plan = evacuation_plan(cluster, args.building, args.hosts, args.jobs)
        out.append(GpuForecast(task=task.id, allow_waiting=args.allow_waiting, plan=plan))
    return out
