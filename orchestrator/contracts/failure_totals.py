"""Running totals over a supervisor's failures, so continue-as-new carries a bounded input.

A 2,048-host job fragments its host lists as hosts are replaced; carrying every failure
record in full passes Temporal's 2 MB payload limit after a few hundred failures (issue
24). The supervisor keeps the newest records in full and folds the older ones into a
:class:`FailureTotals`: counts by kind, lost steps, MTTD / MTTR sums and maxima, and the
outage seconds ETTR needs. Totals over *all* failures are the folded ones plus those of
the records still kept (:func:`totals_of`), so they are exact whatever was dropped.

Outages: ETTR merges overlapping outages before it sums them, so the downtime of the
dropped records is carried as seconds up to ``down_until`` (the earliest onset still
kept) plus the merged spans of dropped outages that reach past it (``tail``, usually
none or one), which the kept records' outages are merged with.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import AwareDatetime, Field

from orchestrator.models import StrictModel
from orchestrator.policy.training.ettr_observed import Outage, outage_seconds

if TYPE_CHECKING:
    from orchestrator.contracts.training_supervisor import FailureRecord

__all__ = ["FailureTotals", "fold_failures", "outages_of", "totals_of"]

#: the record kind that is no failure (the supervisor starting the job)
_LAUNCH = "launch"


class FailureTotals(StrictModel):
    #: records covered, launches included (failure numbers continue from here)
    records: int = Field(default=0, ge=0)
    #: failures by kind (launches left out)
    by_kind: dict[str, int] = Field(default_factory=dict)
    confirmed: int = Field(default=0, ge=0)
    quarantined_hosts: int = Field(default=0, ge=0)
    lost_steps: int = Field(default=0, ge=0)
    mttd_sum_s: float = 0.0
    mttd_max_s: float = 0.0
    #: failures with a recovery time (the MTTR mean's denominator)
    recovered: int = Field(default=0, ge=0)
    mttr_sum_s: float = 0.0
    mttr_max_s: float = 0.0
    #: merged outage seconds from supervision start up to ``down_until``
    down_s: float = Field(default=0.0, ge=0.0)
    down_until: AwareDatetime | None = None
    #: dropped outages' merged spans past ``down_until`` (closed, disjoint)
    tail: list[Outage] = Field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(self.by_kind.values())

    @property
    def mttd_mean_s(self) -> float | None:
        return self.mttd_sum_s / self.failures if self.failures else None

    @property
    def mttr_mean_s(self) -> float | None:
        return self.mttr_sum_s / self.recovered if self.recovered else None


def _add(totals: FailureTotals, records: Sequence[FailureRecord]) -> FailureTotals:
    """``totals`` plus the counts and sums of ``records`` (outages untouched)."""
    t = totals.model_copy(deep=True)
    t.records += len(records)
    for f in records:
        if f.kind == _LAUNCH:
            continue
        t.by_kind[f.kind.value] = t.by_kind.get(f.kind.value, 0) + 1
        t.confirmed += int(f.confirmed)
        t.quarantined_hosts += len(f.quarantined)
        t.lost_steps += f.lost_steps or 0
        t.mttd_sum_s += f.mttd_s
        t.mttd_max_s = max(t.mttd_max_s, f.mttd_s)
        if f.mttr_s is not None:
            t.recovered += 1
            t.mttr_sum_s += f.mttr_s
            t.mttr_max_s = max(t.mttr_max_s, f.mttr_s)
    return t


def outages_of(records: Sequence[FailureRecord]) -> list[Outage]:
    return [
        Outage(onset_at=f.onset_at, recovered_at=f.recovered_at, lost_steps=f.lost_steps)
        for f in records
        if f.kind != _LAUNCH
    ]


def totals_of(carried: FailureTotals | None, kept: Sequence[FailureRecord]) -> FailureTotals:
    """Totals over every failure ever: the folded ones plus the records still kept."""
    return _add(carried or FailureTotals(), kept)


def _spans(outages: Sequence[Outage]) -> list[tuple[datetime, datetime | None]]:
    """Each outage as a span, in the order given; an unrecovered one ends at the next
    onset (as ETTR reads it), the newest unrecovered one is open (None)."""
    order = sorted(range(len(outages)), key=lambda i: outages[i].onset_at)
    ends: dict[int, datetime | None] = {}
    for k, i in enumerate(order):
        o = outages[i]
        end = o.recovered_at
        if end is None and k + 1 < len(order):
            end = outages[order[k + 1]].onset_at
        ends[i] = None if end is None else max(end, o.onset_at)
    return [(o.onset_at, ends[i]) for i, o in enumerate(outages)]


def fold_failures(
    carried: FailureTotals | None,
    records: list[FailureRecord],
    *,
    keep: int,
    started: datetime,
    now: datetime,
) -> tuple[FailureTotals, list[FailureRecord]]:
    """Fold all but the newest ``keep`` records into the totals; returns (totals, kept)."""
    base = carried or FailureTotals()
    if len(records) <= keep:
        return base, records
    dropped, kept = records[: len(records) - keep], records[len(records) - keep :]
    totals = _add(base, dropped)
    kept_outages = outages_of(kept)
    # Spans read in the context of every outage still known (an unrecovered dropped outage
    # ends at the next onset, which may be a kept one); the old tail joins them.
    gone = [*base.tail, *outages_of(dropped)]
    spans = _spans([*gone, *kept_outages])[: len(gone)]
    since = base.down_until or started
    if kept_outages:
        cut = min(o.onset_at for o in kept_outages)
    else:
        # Nothing kept to merge with: cut where the known outages end, not at ``now``. A
        # record still to come may date its onset back before now (a hang's last beat),
        # and the stretch between would be lost to both sides of the cut.
        cut = min(max((e for _, e in spans if e is not None), default=since), now)
    cut = max(cut, since)
    head = [Outage(onset_at=b, recovered_at=min(e or cut, cut)) for b, e in spans if b < cut]
    totals.down_s = base.down_s + outage_seconds(head, started=since, now=cut)
    totals.down_until = cut
    past = sorted((max(b, cut), e) for b, e in spans if e is not None and e > cut)
    merged: list[tuple[datetime, datetime]] = []
    for b, e in past:
        if merged and b <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((b, e))
    totals.tail = [Outage(onset_at=b, recovered_at=e) for b, e in merged]
    totals.tail += [Outage(onset_at=max(b, cut)) for b, e in spans if e is None]
    return totals, kept


def downtime_s(
    carried: FailureTotals | None,
    kept: Sequence[FailureRecord],
    *,
    started: datetime,
    now: datetime,
) -> float:
    """Merged outage seconds since ``started``: the folded part plus the kept records'."""
    if carried is None or carried.down_until is None:
        return outage_seconds(outages_of(kept), started=started, now=now)
    return carried.down_s + outage_seconds(
        [*carried.tail, *outages_of(kept)], started=carried.down_until, now=now
    )
