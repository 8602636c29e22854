"""ETTR from the outages a supervisor saw."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.exceptions import InvalidInstance
from orchestrator.policy.training.ettr_observed import Outage, observed_ettr, outage_seconds

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


class TestOutageSeconds:
    """Outages are clipped to the window, merged where they overlap, and one without a
    recovery ends where the next failure begins (or at ``now`` when it is the last)."""

    def test_recovered_outages_add_up(self) -> None:
        outages = [
            Outage(onset_at=at(10), recovered_at=at(20)),
            Outage(onset_at=at(50), recovered_at=at(55)),
        ]
        assert outage_seconds(outages, started=T0, now=at(100)) == 15

    def test_unrecovered_outage_ends_at_the_next_onset(self) -> None:
        outages = [Outage(onset_at=at(10)), Outage(onset_at=at(30), recovered_at=at(40))]
        assert outage_seconds(outages, started=T0, now=at(1000)) == 30

    def test_the_last_open_outage_runs_to_now(self) -> None:
        outages = [Outage(onset_at=at(10), recovered_at=at(20)), Outage(onset_at=at(90))]
        assert outage_seconds(outages, started=T0, now=at(100)) == 20

    def test_overlap_counts_once(self) -> None:
        # Confirmed at 40, but the next crash already began at 35.
        outages = [
            Outage(onset_at=at(10), recovered_at=at(40)),
            Outage(onset_at=at(35), recovered_at=at(60)),
        ]
        assert outage_seconds(outages, started=T0, now=at(100)) == 50

    def test_clipped_to_the_window(self) -> None:
        outages = [Outage(onset_at=at(-10), recovered_at=at(10)), Outage(onset_at=at(95))]
        assert outage_seconds(outages, started=T0, now=at(100)) == 15


class TestObservedEttr:
    """Wallclock minus outages and lost steps, over wallclock."""

    def test_outage_and_lost_steps(self) -> None:
        outages = [Outage(onset_at=at(100), recovered_at=at(200), lost_steps=50)]
        assert observed_ettr(outages, started=T0, now=at(1000), step_s=1.0) == pytest.approx(0.85)

    def test_no_time_yet(self) -> None:
        assert observed_ettr([], started=T0, now=T0, step_s=1.0) is None

    def test_never_negative(self) -> None:
        outages = [Outage(onset_at=at(0), lost_steps=10_000)]
        assert observed_ettr(outages, started=T0, now=at(10), step_s=1.0) == 0.0

    def test_negative_step_time_is_refused(self) -> None:
        with pytest.raises(InvalidInstance):
            observed_ettr([], started=T0, now=at(1), step_s=-1.0)
