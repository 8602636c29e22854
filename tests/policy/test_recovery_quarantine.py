"""Quarantine: cooldowns grow for repeat offenders, end on their own, are pure in (records, now)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.exceptions import InvalidInstance
from orchestrator.policy.training.recovery import (
    QuarantinePolicy,
    QuarantineRecord,
    active_quarantine,
    cooldown_for,
    due_for_release,
    quarantine_host,
    quarantined_hosts,
    release,
)

T0 = datetime(2025, 6, 1, tzinfo=UTC)
POLICY = QuarantinePolicy(base_cooldown_s=3600, factor=4, max_cooldown_s=86400, horizon_s=7 * 86400)


class TestCooldown:
    """The n-th offence within the horizon waits base * factor^(n-1), capped."""

    def test_cooldown_grows_and_caps(self) -> None:
        hours = [cooldown_for(n, POLICY) / timedelta(hours=1) for n in (1, 2, 3, 4, 50)]
        assert hours == [1, 4, 16, 24, 24]

    def test_repeat_offender_is_kept_out_longer(self) -> None:
        records: list[QuarantineRecord] = []
        now = T0
        for expected_hours in (1, 4, 16):
            record = quarantine_host(records, "h1", "xid", now, POLICY)
            assert record.until - now == timedelta(hours=expected_hours)
            records.append(record)
            now = record.until + timedelta(minutes=1)
        assert [r.offence for r in records] == [1, 2, 3]

    def test_offences_outside_horizon_are_forgiven(self) -> None:
        old = quarantine_host([], "h1", "xid", T0, POLICY)
        later = T0 + timedelta(days=8)
        assert quarantine_host([old], "h1", "xid", later, POLICY).offence == 1
        assert quarantine_host([old], "h2", "xid", T0 + timedelta(hours=2), POLICY).offence == 1

    def test_requarantine_never_shortens_an_active_stay(self) -> None:
        long = quarantine_host([], "h1", "ecc", T0, POLICY.model_copy(update={"factor": 1.0}))
        long = long.model_copy(update={"until": T0 + timedelta(hours=20)})
        again = quarantine_host([long], "h1", "xid", T0 + timedelta(hours=1), POLICY)
        assert again.until == T0 + timedelta(hours=20)

    def test_bad_offence_and_policy_are_refused(self) -> None:
        with pytest.raises(InvalidInstance, match="offence"):
            cooldown_for(0, POLICY)
        with pytest.raises(ValueError, match="max_cooldown_s"):
            QuarantinePolicy(base_cooldown_s=100, max_cooldown_s=10)


class TestRelease:
    """A host is out while a record is active and due for release once all have ended."""

    def test_active_then_due_then_released(self) -> None:
        record = quarantine_host([], "h1", "xid", T0, POLICY)
        during = T0 + timedelta(minutes=30)
        assert quarantined_hosts([record], during) == {"h1"}
        assert active_quarantine([record], "h1", during) == record
        assert due_for_release([record], during) == []
        after = record.until
        assert quarantined_hosts([record], after) == set()
        assert due_for_release([record], after) == [record]
        done = release(record, after)
        assert due_for_release([done], after + timedelta(hours=1)) == []
        with pytest.raises(InvalidInstance, match="already released"):
            release(done, after)

    def test_early_release_by_operator_ends_quarantine_but_offence_counts(self) -> None:
        record = quarantine_host([], "h1", "xid", T0, POLICY)
        freed = release(record, T0 + timedelta(minutes=5))
        assert quarantined_hosts([freed], T0 + timedelta(minutes=6)) == set()
        nxt = quarantine_host([freed], "h1", "xid", T0 + timedelta(hours=2), POLICY)
        assert nxt.offence == 2

    def test_host_with_a_later_active_record_is_not_due(self) -> None:
        first = quarantine_host([], "h1", "xid", T0, POLICY)
        second = quarantine_host([first], "h1", "ecc", T0 + timedelta(minutes=50), POLICY)
        at = first.until + timedelta(minutes=1)
        assert due_for_release([first, second], at) == []
        assert due_for_release([first, second], second.until) == [second]

    def test_naive_timestamps_are_refused(self) -> None:
        with pytest.raises(ValueError, match="timezone"):
            quarantine_host([], "h1", "xid", datetime(2025, 1, 1), POLICY)
