"""Host placement: healthy, free, unquarantined hosts; spares first; fewest buildings; one region."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.exceptions import Infeasible, InvalidInstance
from orchestrator.policy.training.recovery import (
    Host,
    HostState,
    Incident,
    JobSpec,
    QuarantinePolicy,
    place_job,
    quarantine_host,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def hosts(
    region: str,
    building: str,
    count: int,
    state: HostState = HostState.IDLE,
    job: str | None = None,
) -> list[Host]:
    return [
        Host(
            name=f"{building}-{state.value}-{i:02d}",
            region=region,
            building=building,
            state=state,
            job=job,
        )
        for i in range(count)
    ]


JOB = JobSpec(name="llm", hosts=4, region="east")


class TestPreferences:
    """The job keeps its own healthy hosts, then takes spares, then idle hosts."""

    def test_replacement_comes_from_spares_before_idle(self) -> None:
        own = hosts("east", "e1", 3, HostState.ALLOCATED, job="llm")
        fleet = own + hosts("east", "e1", 2, HostState.SPARE) + hosts("east", "e1", 2)
        placement = place_job(JOB, fleet, now=NOW)
        assert sorted(placement.kept) == sorted(h.name for h in own)
        assert len(placement.from_spares) == 1 and placement.from_idle == []
        assert placement.buildings == ["e1"] and not placement.moved_region

    def test_fewest_buildings_beats_keeping_hosts(self) -> None:
        # Three own hosts in e1 with nothing else there; e2 can take the whole job.
        own = hosts("east", "e1", 3, HostState.ALLOCATED, job="llm")
        fleet = own + hosts("east", "e2", 4, HostState.SPARE)
        placement = place_job(JOB, fleet, now=NOW)
        assert placement.buildings == ["e2"]
        assert placement.kept == [] and len(placement.from_spares) == 4

    def test_among_minimal_building_sets_spares_win(self) -> None:
        fleet = hosts("east", "e1", 4) + hosts("east", "e2", 4, HostState.SPARE)
        placement = place_job(JOB, fleet, now=NOW)
        assert placement.buildings == ["e2"] and len(placement.from_spares) == 4

    def test_spans_the_minimum_number_of_buildings(self) -> None:
        job = JobSpec(name="big", hosts=9, region="east")
        fleet = hosts("east", "e1", 5) + hosts("east", "e2", 2) + hosts("east", "e3", 4)
        placement = place_job(job, fleet, now=NOW)
        assert sorted(placement.buildings) == ["e1", "e3"]
        assert len(placement.hosts) == 9 and len(set(placement.hosts)) == 9

    def test_other_jobs_hosts_and_bad_gpus_are_never_used(self) -> None:
        broken = Host(name="e1-bad", region="east", building="e1", gpu_health=[True] * 7 + [False])
        fleet = [broken] + hosts("east", "e1", 4, HostState.ALLOCATED, job="other")
        fleet += hosts("east", "e1", 4)
        placement = place_job(JOB, fleet, now=NOW)
        assert "e1-bad" not in placement.hosts
        assert all("allocated" not in h for h in placement.hosts)


class TestQuarantineAndIncidents:
    """Quarantined hosts and buildings with an open incident are excluded; the job moves."""

    def test_quarantined_hosts_are_skipped_until_released(self) -> None:
        fleet = hosts("east", "e1", 5)
        record = quarantine_host([], fleet[0].name, "xid 79", NOW, QuarantinePolicy())
        placement = place_job(JOB, fleet, now=NOW, quarantine=[record])
        assert fleet[0].name not in placement.hosts
        later = place_job(JOB, fleet[:4], now=record.until, quarantine=[record])
        assert fleet[0].name in later.hosts

    def test_lost_building_moves_job_to_healthy_building(self) -> None:
        own = hosts("east", "e1", 4, HostState.ALLOCATED, job="llm")
        fleet = own + hosts("east", "e2", 2, HostState.SPARE) + hosts("east", "e3", 4)
        power = Incident(id="pwr-1", building="e1", opened_at=NOW - timedelta(minutes=3))
        placement = place_job(JOB, fleet, now=NOW, incidents=[power])
        assert placement.buildings == ["e3"] and placement.region == "east"
        assert not set(placement.hosts) & {h.name for h in own}

    def test_closed_incident_no_longer_excludes(self) -> None:
        fleet = hosts("east", "e1", 4)
        closed = Incident(
            id="pwr-0", building="e1", opened_at=NOW - timedelta(hours=2), closed_at=NOW
        )
        assert place_job(JOB, fleet, now=NOW, incidents=[closed]).buildings == ["e1"]

    def test_other_region_when_own_region_is_short(self) -> None:
        fleet = hosts("east", "e1", 4) + hosts("west", "w1", 2) + hosts("west", "w2", 4)
        fleet += hosts("south", "s1", 2) + hosts("south", "s2", 2)
        region_down = Incident(id="r", region="east", opened_at=NOW)
        placement = place_job(JOB, fleet, now=NOW, incidents=[region_down])
        assert placement.moved_region and placement.region == "west"
        assert placement.buildings == ["w2"]

    def test_infeasible_names_what_is_short(self) -> None:
        fleet = hosts("east", "e1", 3) + hosts("east", "e2", 2)
        records = [quarantine_host([], fleet[0].name, "ecc", NOW)]
        power = Incident(id="p", building="e2", opened_at=NOW)
        with pytest.raises(Infeasible) as err:
            place_job(JOB, fleet, now=NOW, quarantine=records, incidents=[power])
        message = str(err.value)
        assert err.value.constraint == "hosts"
        assert "needs 4 hosts" in message and "short by 2" in message
        assert "1 quarantined" in message and "2 building incident" in message

    def test_duplicate_host_names_are_invalid(self) -> None:
        fleet = hosts("east", "e1", 4)
        with pytest.raises(InvalidInstance, match="listed twice"):
            place_job(JOB, fleet + fleet[:1], now=NOW)

    def test_placement_is_deterministic(self) -> None:
        fleet = hosts("east", "e1", 6) + hosts("east", "e2", 6, HostState.SPARE)
        first = place_job(JOB, fleet, now=NOW)
        assert place_job(JOB, list(reversed(fleet)), now=NOW) == first


class TestPlacementProperties:
    """On random fleets a placement uses only eligible hosts and the fewest possible buildings."""

    @settings(max_examples=150, deadline=None)
    @given(
        sizes=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=6),
        need=st.integers(min_value=1, max_value=12),
        quarantined=st.sets(st.integers(min_value=0, max_value=40), max_size=8),
        lost=st.sets(st.integers(min_value=0, max_value=5), max_size=2),
    )
    def test_eligible_and_minimal(
        self, sizes: list[int], need: int, quarantined: set[int], lost: set[int]
    ) -> None:
        fleet: list[Host] = []
        for b, size in enumerate(sizes):
            state = HostState.SPARE if b % 2 else HostState.IDLE
            fleet += hosts("east", f"b{b}", size, state)
        names = [h.name for h in fleet]
        records = [quarantine_host([], names[i], "xid", NOW) for i in quarantined if i < len(names)]
        incidents = [Incident(id=f"i{b}", building=f"b{b}", opened_at=NOW) for b in lost]
        job = JobSpec(name="j", hosts=need, region="east")
        out = {r.host for r in records}
        usable: dict[str, int] = {}
        for h in fleet:
            if h.name not in out and h.building not in {f"b{b}" for b in lost}:
                usable[h.building] = usable.get(h.building, 0) + 1
        if sum(usable.values()) < need:
            with pytest.raises(Infeasible):
                place_job(job, fleet, now=NOW, quarantine=records, incidents=incidents)
            return
        placement = place_job(job, fleet, now=NOW, quarantine=records, incidents=incidents)
        assert len(set(placement.hosts)) == need
        assert not set(placement.hosts) & out
        assert not set(placement.buildings) & {f"b{b}" for b in lost}
        caps = sorted(usable.values(), reverse=True)
        fewest = next(k for k in range(1, len(caps) + 1) if sum(caps[:k]) >= need)
        assert len(placement.buildings) == fewest
        if placement.from_idle:
            # Idle capacity is only taken once every usable spare in those buildings is used.
            spares = {
                h.name
                for h in fleet
                if h.state is HostState.SPARE
                and h.building in placement.buildings
                and h.name not in out
            }
            assert spares <= set(placement.from_spares)
