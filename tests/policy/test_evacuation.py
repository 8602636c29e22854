"""Building evacuation for training jobs: enough free hosts outside, in the job's own
region, or the plan says which job waits or shrinks, in a fixed priority order."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.policy.training.evacuation import EvacuationJob, plan_building_evacuation
from orchestrator.policy.training.models import Host, HostState, JobSpec

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def building(region: str, name: str, spares: int, idle: int) -> list[Host]:
    out = []
    for i in range(spares + idle):
        state = HostState.SPARE if i < spares else HostState.IDLE
        out.append(Host(name=f"{name}-h{i:02d}", region=region, building=name, state=state))
    return out


def running(hosts: list[Host], job: str, names: list[str]) -> list[Host]:
    return [
        h.model_copy(update={"state": HostState.ALLOCATED, "job": job}) if h.name in names else h
        for h in hosts
    ]


def job(name: str, names: list[str], *, region: str = "r1", **kw: object) -> EvacuationJob:
    spec = JobSpec(name=name, hosts=len(names), region=region)
    return EvacuationJob.model_validate({"spec": spec, "hosts": names} | kw)


class TestEnoughCapacity:
    """Every job with a host in the building moves, spares first, keeping its hosts outside."""

    def test_spares_first(self) -> None:
        fleet = building("r1", "a", 1, 3) + building("r1", "b", 1, 3)
        fleet = running(fleet, "j", ["a-h01", "b-h01"])
        plan = plan_building_evacuation(fleet, [job("j", ["a-h01", "b-h01"])], ["a"], now=NOW)
        [j] = plan.jobs
        assert (j.outcome, j.leaving, j.keeping, j.taking) == (
            "moves",
            ["a-h01"],
            ["b-h01"],
            ["b-h00"],
        )
        assert not plan.short

    def test_jobs_elsewhere_are_left_out(self) -> None:
        fleet = running(building("r1", "a", 1, 3) + building("r1", "b", 1, 3), "j", ["b-h01"])
        plan = plan_building_evacuation(fleet, [job("j", ["b-h01"])], ["a"], now=NOW)
        assert plan.jobs == []


class TestShortCapacity:
    """Too few free hosts in the region: the lower-priority job waits (or shrinks when it
    allows a smaller size); hosts of another region never count."""

    def test_lower_priority_waits(self) -> None:
        fleet = building("r1", "a", 0, 4) + building("r1", "b", 1, 1) + building("r2", "c", 4, 0)
        fleet = running(fleet, "big", ["a-h00", "a-h01"])
        fleet = running(fleet, "small", ["a-h02", "a-h03"])
        jobs = [job("small", ["a-h02", "a-h03"]), job("big", ["a-h00", "a-h01"], priority=1)]
        plan = plan_building_evacuation(fleet, jobs, ["a"], now=NOW)
        assert [(j.job, j.outcome) for j in plan.jobs] == [("big", "moves"), ("small", "waits")]
        assert plan.jobs[1].short_by == 2 and "short by 2" in plan.jobs[1].reason
        assert plan.short

    def test_shrinks_when_allowed(self) -> None:
        fleet = running(
            building("r1", "a", 0, 3) + building("r1", "b", 1, 0), "j", ["a-h00", "a-h01", "a-h02"]
        )
        plan = plan_building_evacuation(
            fleet, [job("j", ["a-h00", "a-h01", "a-h02"], min_hosts=1)], ["a"], now=NOW
        )
        [j] = plan.jobs
        assert (j.outcome, j.new_size, j.taking) == ("shrinks", 1, ["b-h00"])


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Host], list[EvacuationJob]]:
    hosts: list[Host] = []
    for b in range(draw(st.integers(2, 4))):
        region = f"r{draw(st.integers(1, 2))}"
        hosts += building(region, f"b{b}", draw(st.integers(0, 2)), draw(st.integers(0, 4)))
    jobs = []
    free = [h for h in hosts if h.state is HostState.IDLE]
    for n in range(draw(st.integers(0, 3))):
        region = free[0].region if free else "r1"
        mine = [h.name for h in free if h.region == region][: draw(st.integers(1, 3))]
        if not mine:
            break
        hosts = running(hosts, f"j{n}", mine)
        free = [h for h in free if h.name not in mine]
        jobs.append(job(f"j{n}", mine, region=region, priority=draw(st.integers(0, 2))))
    return hosts, jobs


class TestProperties:
    """Whatever the fleet: no host is given twice, nothing taken is in the building or in
    another region, a job that moves keeps its size, and the answer does not depend on
    the order the jobs are listed in."""

    @settings(max_examples=200, deadline=None)
    @given(fleets(), st.data())
    def test_sound_and_deterministic(
        self, drawn: tuple[list[Host], list[EvacuationJob]], data: st.DataObject
    ) -> None:
        hosts, jobs = drawn
        plan = plan_building_evacuation(hosts, jobs, ["b0"], now=NOW)
        region = {h.name: h.region for h in hosts}
        where = {h.name: h.building for h in hosts}
        taken = [n for j in plan.jobs for n in j.taking]
        assert len(taken) == len(set(taken))
        for j in plan.jobs:
            assert all(where[n] != "b0" and region[n] == j.region for n in j.taking)
            if j.outcome == "moves":
                assert len(j.keeping) + len(j.taking) == j.size
        shuffled = data.draw(st.permutations(jobs))
        assert plan_building_evacuation(hosts, shuffled, ["b0"], now=NOW) == plan
