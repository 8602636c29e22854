"""Can every training job leave a building and keep its size? (issue 25, the GPU half)

Pure: given the hosts, the jobs and the buildings (or hosts) to empty, say for each job
with a host there whether healthy free hosts outside are enough for it to keep its size.
A job never spans regions, so only free hosts of its own region count. Jobs are served in
a fixed order (higher ``priority`` first, then larger, then by name), each taking spares
before idle hosts, by name; a job that finds too few ``waits`` (it keeps running where it
is until capacity frees up), or ``shrinks`` when it allows a smaller size that fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import AwareDatetime, Field

from orchestrator.models import StrictModel
from orchestrator.policy.training.models import (
    Host,
    HostState,
    Incident,
    JobSpec,
    QuarantineRecord,
)
from orchestrator.policy.training.placement import exclusion_reason

__all__ = ["EvacuationJob", "EvacuationPlan", "JobEvacuation", "plan_building_evacuation"]


class EvacuationJob(StrictModel):
    spec: JobSpec
    #: the hosts the job runs on now
    hosts: list[str]
    #: the smallest size (hosts) the job may run at; None: it must keep its size
    min_hosts: int | None = Field(default=None, ge=1)
    #: served first when capacity is short (higher first)
    priority: int = 0


class JobEvacuation(StrictModel):
    job: str
    region: str
    outcome: Literal["moves", "shrinks", "waits"]
    #: its hosts in the avoided set, and the ones it keeps outside it
    leaving: list[str]
    keeping: list[str]
    #: free hosts outside the avoided set it would take (spares first)
    taking: list[str]
    size: int
    new_size: int
    short_by: int = 0
    reason: str = ""


class EvacuationPlan(StrictModel):
    avoid_buildings: list[str]
    avoid_hosts: list[str] = Field(default_factory=list)
    #: only jobs with a host in the avoided set, in the order they were served
    jobs: list[JobEvacuation] = Field(default_factory=list)

    @property
    def short(self) -> bool:
        """True when some job cannot keep its size (it waits or shrinks)."""
        return any(j.outcome != "moves" for j in self.jobs)

    def lines(self) -> list[str]:
        """One line per job, for a forecast or an error message."""
        out = []
        for j in self.jobs:
            head = f"{j.job} ({j.region}, {j.size} hosts): {j.outcome}"
            if j.outcome == "moves":
                out.append(f"{head} to {', '.join(j.taking) or 'its own hosts'}")
            else:
                out.append(f"{head}: {j.reason}")
        return out


def plan_building_evacuation(
    hosts: Sequence[Host],
    jobs: Sequence[EvacuationJob],
    avoid_buildings: Sequence[str],
    *,
    now: AwareDatetime,
    avoid_hosts: Sequence[str] = (),
    quarantine: Sequence[QuarantineRecord] = (),
    incidents: Sequence[Incident] = (),
) -> EvacuationPlan:
    avoid_b, avoid_h = set(avoid_buildings), set(avoid_hosts)
    by_name = {h.name: h for h in hosts}

    def avoided(name: str) -> bool:
        h = by_name.get(name)
        return name in avoid_h or (h is not None and h.building in avoid_b)

    quarantined = {r.host for r in quarantine if r.active(now)}
    open_incidents = [i for i in incidents if i.is_open(now)]
    bad_buildings = {i.building for i in open_incidents if i.building is not None}
    bad_regions = {i.region for i in open_incidents if i.region is not None}
    taken: set[str] = set()
    plan = EvacuationPlan(avoid_buildings=sorted(avoid_b), avoid_hosts=sorted(avoid_h))
    order = sorted(jobs, key=lambda j: (-j.priority, -j.spec.hosts, j.spec.name))
    for job in order:
        leaving = sorted(n for n in job.hosts if avoided(n))
        if not leaving:
            continue
        keeping = sorted(n for n in job.hosts if not avoided(n))
        free = [
            h
            for h in hosts
            if h.region == job.spec.region
            and h.state in (HostState.SPARE, HostState.IDLE)
            and h.name not in taken
            and not avoided(h.name)
            and exclusion_reason(
                h,
                job.spec,
                quarantined=quarantined,
                bad_buildings=bad_buildings,
                bad_regions=bad_regions,
            )
            is None
        ]
        free.sort(key=lambda h: (h.state is not HostState.SPARE, h.name))
        need = job.spec.hosts - len(keeping)
        size = job.spec.hosts
        if len(free) >= need:
            taking = [h.name for h in free[:need]]
            outcome, new_size, short, reason = "moves", size, 0, ""
        else:
            short = need - len(free)
            smallest = job.min_hosts if job.min_hosts is not None else size
            fits = len(keeping) + len(free)
            if fits >= smallest and fits > 0:
                taking = [h.name for h in free]
                outcome, new_size = "shrinks", fits
                reason = f"short by {short} in {job.spec.region}: runs on {fits} of {size} hosts"
            else:
                taking, outcome, new_size = [], "waits", size
                reason = (
                    f"needs {need} free hosts in {job.spec.region} outside the building, "
                    f"{len(free)} free: short by {short}"
                )
        taken.update(taking)
        plan.jobs.append(
            JobEvacuation(
                job=job.spec.name,
                region=job.spec.region,
                outcome=outcome,
                leaving=leaving,
                keeping=keeping,
                taking=taking,
                size=size,
                new_size=new_size,
                short_by=short,
                reason=reason,
            )
        )
    return plan
