"""Where a (re)started training job runs: healthy hosts, fewest buildings, its own region.

Hard constraints: a host must be up, have at least ``job.gpus_per_host`` healthy
GPUs, be free (spare, idle, or already the job's own), not be quarantined, and not
sit in a building or region with an open incident. A job never spans regions (its
collectives would cross the WAN), so the whole job goes to one region: its own
when that region has enough eligible hosts, else the region that needs the fewest
buildings (MAST's cross-region placement, in miniature).

Within a region the number of buildings is minimised first, because a job's
blast radius and its cross-building traffic both grow with it; among the ways to
use that few buildings, the ones keeping most of the job's own hosts and then
using most spares win. Hosts are then taken in the order: the job's own, spares,
idle capacity, each by name, so the answer is deterministic.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from pydantic import AwareDatetime

from orchestrator.exceptions import Infeasible, InvalidInstance
from orchestrator.policy.training.models import (
    Host,
    HostState,
    Incident,
    JobSpec,
    Placement,
    QuarantineRecord,
)

__all__ = ["exclusion_reason", "place_job"]

# Preference among eligible hosts: lower is better.
_OWN, _SPARE, _IDLE = 0, 1, 2


def exclusion_reason(
    host: Host,
    job: JobSpec,
    *,
    quarantined: set[str],
    bad_buildings: set[str],
    bad_regions: set[str],
) -> str | None:
    """Why ``host`` cannot run ``job`` now, or None when it can."""
    if host.name in quarantined:
        return "quarantined"
    if host.region in bad_regions:
        return "region incident"
    if host.building in bad_buildings:
        return "building incident"
    if host.state is HostState.DOWN:
        return "down"
    if host.state is HostState.ALLOCATED and host.job != job.name:
        return "allocated to another job"
    if host.healthy_gpus < job.gpus_per_host:
        return "unhealthy GPUs"
    return None


def _rank(host: Host, job: JobSpec) -> int:
    if host.state is HostState.ALLOCATED and host.job == job.name:
        return _OWN
    return _SPARE if host.state is HostState.SPARE else _IDLE


def _choose_buildings(by_building: dict[str, list[Host]], need: int, job: JobSpec) -> list[str]:
    """The fewest buildings holding ``need`` hosts, preferring own hosts, then spares."""
    capacity = {b: len(hs) for b, hs in by_building.items()}
    largest_first = sorted(capacity.values(), reverse=True)
    count, total = 0, 0
    for cap in largest_first:
        count, total = count + 1, total + cap
        if total >= need:
            break

    def preference(b: str) -> tuple[int, int, int, str]:
        ranks = Counter(_rank(h, job) for h in by_building[b])
        return (-ranks[_OWN], -ranks[_SPARE], -capacity[b], b)

    # Greedy by preference, but only take a building if the largest remaining
    # ones can still finish the job within ``count`` buildings: that keeps the
    # building count minimal while favouring own hosts and spares.
    chosen: list[str] = []
    remaining = sorted(by_building, key=preference)
    got = 0
    while got < need:
        slots_after = count - len(chosen) - 1
        for b in remaining:
            others = sorted((capacity[o] for o in remaining if o != b), reverse=True)
            if got + capacity[b] + sum(others[:slots_after]) >= need:
                chosen.append(b)
                remaining.remove(b)
                got += capacity[b]
                break
        else:  # pragma: no cover - unreachable: ``count`` came from the same capacities
            raise AssertionError("building selection lost feasibility")
    return chosen


def _place_in_region(region: str, hosts: list[Host], job: JobSpec) -> Placement:
    by_building: dict[str, list[Host]] = defaultdict(list)
    for h in hosts:
        by_building[h.building].append(h)
    buildings = _choose_buildings(by_building, job.hosts, job)
    pool = [h for b in buildings for h in by_building[b]]
    picked = sorted(pool, key=lambda h: (_rank(h, job), buildings.index(h.building), h.name))
    picked = picked[: job.hosts]
    used = sorted({h.building for h in picked}, key=buildings.index)
    return Placement(
        job=job.name,
        region=region,
        hosts=sorted(h.name for h in picked),
        buildings=used,
        kept=sorted(h.name for h in picked if _rank(h, job) == _OWN),
        from_spares=sorted(h.name for h in picked if _rank(h, job) == _SPARE),
        from_idle=sorted(h.name for h in picked if _rank(h, job) == _IDLE),
        moved_region=region != job.region,
    )


def place_job(
    job: JobSpec,
    hosts: Sequence[Host],
    *,
    now: AwareDatetime,
    quarantine: Iterable[QuarantineRecord] = (),
    incidents: Iterable[Incident] = (),
) -> Placement:
    """Hosts for ``job``; :class:`Infeasible` says, per region, what is short."""
    names = Counter(h.name for h in hosts)
    dupes = sorted(n for n, c in names.items() if c > 1)
    if dupes:
        raise InvalidInstance(f"hosts: names listed twice: {', '.join(dupes)}")
    quarantined = {r.host for r in quarantine if r.active(now)}
    open_incidents = [i for i in incidents if i.is_open(now)]
    bad_buildings = {i.building for i in open_incidents if i.building is not None}
    bad_regions = {i.region for i in open_incidents if i.region is not None}

    eligible: dict[str, list[Host]] = defaultdict(list)
    excluded: dict[str, Counter[str]] = defaultdict(Counter)
    for h in hosts:
        why = exclusion_reason(
            h, job, quarantined=quarantined, bad_buildings=bad_buildings, bad_regions=bad_regions
        )
        if why is None:
            eligible[h.region].append(h)
        else:
            excluded[h.region][why] += 1

    if len(eligible.get(job.region, [])) >= job.hosts:
        return _place_in_region(job.region, eligible[job.region], job)
    options = [
        _place_in_region(r, hs, job)
        for r, hs in sorted(eligible.items())
        if r != job.region and len(hs) >= job.hosts
    ]
    if options:
        return min(
            options,
            key=lambda p: (len(p.buildings), -len(p.kept), -len(p.from_spares), p.region),
        )

    regions = sorted(set(eligible) | set(excluded) | {job.region})
    parts = []
    for r in regions:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(excluded[r].items()))
        have = len(eligible.get(r, []))
        parts.append(f"{r} has {have} eligible" + (f" ({why})" if why else ""))
    raise Infeasible(
        "hosts",
        f"job {job.name} needs {job.hosts} hosts with {job.gpus_per_host} healthy GPUs in one "
        f"region; short by {job.hosts - max((len(v) for v in eligible.values()), default=0)}: "
        + "; ".join(parts),
    )
