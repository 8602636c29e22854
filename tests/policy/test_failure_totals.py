"""The supervisor's carried input stays bounded however many failures a job has, and the
totals it folds older records into equal those of the full list (issue 24)."""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.contracts.failure_totals import (
    downtime_s,
    fold_failures,
    outages_of,
    totals_of,
)
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    FailureRecord,
    SupervisorInput,
    SupervisorStatus,
)
from orchestrator.policy.training.crashloop import crash_loop_decision, trim_attempts
from orchestrator.policy.training.ettr_observed import observed_ettr
from orchestrator.policy.training.models import QuarantinePolicy, RecoveryAttempt
from orchestrator.policy.training.quarantine import prune_quarantine, quarantine_host
from orchestrator.temporal import data_converter
from workflows.training_carry import carry, observed_ettr_carried

LIMIT = 256 * 1024
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _wire(inp: SupervisorInput) -> int:
    [payload] = data_converter.payload_converter.to_payloads([inp])
    return len(payload.data)


def simulate(hosts: int, failures: int, *, bounded: bool, seed: int = 7) -> SupervisorInput:
    """A job of ``hosts`` over 8 buildings losing one random host per failure to a spare:
    its host list fragments as it would in production. Continue-as-new every 25 failures."""
    rng = random.Random(seed)
    per = hosts // 8
    job = [f"b{b}-h{i:05d}" for b in range(8) for i in range(per)]
    inp = SupervisorInput(job="llama", started_at=T0)
    now = T0
    for n in range(1, failures + 1):
        # the Llama 3 rate (466 in 54 days at 2,048 hosts), scaled with the host count
        now += timedelta(seconds=rng.uniform(0.2, 1.8) * 54 * 86400 / 466 * 2048 / hosts)
        i = rng.randrange(len(job))
        bad = job[i]
        after = [*job[:i], f"b{n % 8}-h{90000 + n:05d}", *job[i + 1 :]]  # spare n
        gpu = rng.random() < 0.6
        inp.failures.append(
            FailureRecord(
                number=n,
                kind=FailureKind.GPU if gpu else FailureKind.CRASH,
                onset_at=now,
                detected_at=now + timedelta(seconds=5),
                decided_at=now + timedelta(seconds=6),
                restarted_at=now + timedelta(seconds=60),
                recovered_at=now + timedelta(seconds=300),
                failed_at_step=10 * n + 7,
                resumed_from_step=10 * n,
                hosts_before=job,
                hosts_after=after,
                quarantined=[bad] if gpu else [],
                confirmed=True,
                detail="xid 79" if gpu else "exit 1",
            )
        )
        if gpu:
            inp.quarantine.append(quarantine_host(inp.quarantine, bad, "gpu: xid 79", now))
        inp.attempts.append(
            RecoveryAttempt(
                failed_at_step=10 * n + 7,
                resumed_from_step=10 * n,
                reached_step=10 * n + 17,
                checkpointed_step=10 * n + 10,
            )
        )
        job = after
        if bounded and len(inp.failures) > 1:  # as the workflow appends (newest kept full)
            inp.failures[-2] = inp.failures[-2].compacted()
        if bounded and n % 25 == 0:
            inp = carry(inp, now)
    return inp


def test_carried_input_stays_under_256_kb_at_2048_and_8192_hosts() -> None:
    for hosts, failures in ((2048, 466), (2048, 500), (2048, 2000), (8192, 500), (8192, 2000)):
        inp = simulate(hosts, failures, bounded=True)
        size = _wire(inp)
        assert size < LIMIT, (hosts, failures, size)
        assert len(inp.failures) <= 30 + 25
        assert inp.totals is not None and inp.totals.failures + len(inp.failures) == failures


def test_unbounded_carry_is_what_broke() -> None:
    # The payload the fix bounds: every record carried passes 256 KB well before 500.
    assert _wire(simulate(2048, 100, bounded=False)) > LIMIT


def _records(draw: st.DrawFn) -> list[FailureRecord]:
    # As a supervisor records them: one failure at a time, so the next onset comes after
    # the last recovery (a hang dates its onset back to its last beat, which is after it);
    # a failure during a recovery leaves that one unrecovered.
    n = draw(st.integers(1, 40))
    now = T0
    out: list[FailureRecord] = []
    for i in range(1, n + 1):
        if out and out[-1].recovered_at is not None:
            now = max(now, out[-1].recovered_at)
        now += timedelta(seconds=draw(st.integers(0, 3000)))
        kind = draw(st.sampled_from(list(FailureKind)))
        mttd = draw(st.integers(0, 100))
        recovered = draw(st.one_of(st.none(), st.integers(0, 6000)))
        failed = draw(st.integers(0, 1000))
        resumed = draw(st.one_of(st.none(), st.integers(0, failed)))
        out.append(
            FailureRecord(
                number=i,
                kind=kind,
                onset_at=now,
                detected_at=now + timedelta(seconds=mttd),
                recovered_at=None if recovered is None else now + timedelta(seconds=recovered),
                failed_at_step=failed,
                resumed_from_step=resumed,
                quarantined=[f"h{i}"] * draw(st.integers(0, 2)),
                confirmed=draw(st.booleans()),
            )
        )
    return out


records_st = st.composite(_records)()


@settings(max_examples=int(os.environ.get("TOTALS_EXAMPLES", "150")), deadline=None)
@given(records_st, st.integers(1, 6), st.integers(1, 9))
def test_folded_totals_equal_the_full_lists(
    records: list[FailureRecord], keep: int, every: int
) -> None:
    """Fold in batches as continue-as-new would; totals and ETTR match the full list."""
    carried = None
    held: list[FailureRecord] = []
    for i, r in enumerate(records, 1):
        held.append(r)
        if i % every == 0:
            carried, held = fold_failures(carried, held, keep=keep, started=T0, now=r.detected_at)
    now = records[-1].detected_at + timedelta(seconds=7000)
    full = totals_of(None, records)
    got = totals_of(carried, held)
    for field in ("by_kind", "confirmed", "quarantined_hosts", "lost_steps", "recovered"):
        assert getattr(got, field) == getattr(full, field), field
    for field in ("mttd_sum_s", "mttd_max_s", "mttr_sum_s", "mttr_max_s"):
        assert abs(getattr(got, field) - getattr(full, field)) < 1e-6, field
    assert got.records == len(records)
    inp = SupervisorInput(job="j", started_at=T0, failures=held, totals=carried)
    old = SupervisorInput(job="j", started_at=T0, failures=records)
    assert (
        abs(
            downtime_s(carried, held, started=T0, now=now)
            - downtime_s(None, records, started=T0, now=now)
        )
        < 1e-6
    )
    ettr, ettr_full = observed_ettr_carried(inp, now, 2.0), observed_ettr_carried(old, now, 2.0)
    assert ettr is not None and ettr_full is not None and abs(ettr - ettr_full) < 1e-9


def test_old_payloads_give_the_same_numbers() -> None:
    """An input or status written before there were totals lists every record: the totals
    are derived from it."""
    records = simulate(64, 12, bounded=False).failures
    wire = SupervisorInput(job="j", started_at=T0, failures=records).model_dump(mode="json")
    del wire["totals"], wire["keep_failures"]
    inp = SupervisorInput.model_validate(wire)
    assert inp.totals is None and inp.failures == records
    now = records[-1].recovered_at or T0
    assert observed_ettr_carried(inp, now, 1.0) == observed_ettr(
        outages_of(records), started=T0, now=now, step_s=1.0
    )
    status = SupervisorStatus.model_validate(
        {"job": "j", "state": "watching", "failures": [r.model_dump(mode="json") for r in records]}
    )
    assert status.totals.failures == 12 and status.totals == totals_of(None, records)
    assert status.dropped == 0


@settings(max_examples=int(os.environ.get("TOTALS_EXAMPLES", "150")), deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 60), st.booleans()),
        min_size=1,
        max_size=30,
    ),
    st.integers(1, 4),
)
def test_trimmed_attempts_decide_as_the_full_list(
    raw: list[tuple[int, int, int, bool]], limit: int
) -> None:
    attempts = []
    for a, b, extra, ckpt in raw:
        resumed, failed = min(a, b), max(a, b)
        reached = resumed + extra
        attempts.append(
            RecoveryAttempt(
                failed_at_step=failed,
                resumed_from_step=resumed,
                reached_step=reached,
                checkpointed_step=reached if ckpt and reached > resumed else None,
            )
        )
    trimmed = trim_attempts(attempts, keep=limit + 2)
    assert len(trimmed) <= len(attempts) + 1
    assert crash_loop_decision(trimmed, limit=limit) == crash_loop_decision(attempts, limit=limit)
    nxt = RecoveryAttempt(failed_at_step=raw[-1][0], resumed_from_step=0, reached_step=0)
    assert crash_loop_decision([*trimmed, nxt], limit=limit) == crash_loop_decision(
        [*attempts, nxt], limit=limit
    )


def test_pruned_quarantine_keeps_what_decides() -> None:
    policy = QuarantinePolicy()
    records = []
    now = T0
    for i in range(300):
        now += timedelta(hours=5)
        host = f"h{i % 40}"
        records.append(quarantine_host(records, host, "gpu", now, policy))
    pruned = prune_quarantine(records, now, policy)
    assert len(pruned) < len(records)
    later = now + timedelta(days=3)
    for h in (f"h{i}" for i in range(40)):
        assert quarantine_host(pruned, h, "gpu", later, policy) == quarantine_host(
            records, h, "gpu", later, policy
        )


def test_a_carried_record_keeps_the_change_of_hosts() -> None:
    record = simulate(64, 3, bounded=False).failures[-1]
    small = record.compacted()
    assert small.hosts_before == [] and small.hosts_after == [] and small.hosts_compacted
    assert set(record.hosts_before) - set(small.hosts_out) == set(record.hosts_after) - set(
        small.hosts_in
    )
    assert len(small.hosts_out) == len(small.hosts_in) == 1
    assert small.compacted() == small
    assert small.mttd_s == record.mttd_s and small.lost_steps == record.lost_steps


def test_carry_reports_what_it_dropped() -> None:
    inp = carry(simulate(64, 40, bounded=False), T0 + timedelta(days=40))
    assert inp.totals is not None and inp.totals.records == 10
    assert [f.number for f in inp.failures] == list(range(11, 41))
    assert all(f.hosts_compacted for f in inp.failures)
    assert len(inp.attempts) <= inp.crash_loop_limit + 3


class TestCheckpointWritesInEttr:
    """A stated checkpoint write takes its share Δt / (Δt + w) of the running time out of
    ETTR; without one (old inputs) ETTR is what it was."""

    def test_write_share_is_taken_from_running_time(self) -> None:
        failure = FailureRecord(
            number=1,
            kind=FailureKind.CRASH,
            onset_at=T0 + timedelta(seconds=1000),
            detected_at=T0 + timedelta(seconds=1010),
            recovered_at=T0 + timedelta(seconds=1100),
            failed_at_step=900,
            resumed_from_step=800,
        )
        plain = SupervisorInput(job="j", started_at=T0, failures=[failure])
        now = T0 + timedelta(seconds=10_000)
        # 10,000 s of wall, 100 s down, 100 steps of 1 s lost: 9,800 s running
        assert observed_ettr_carried(plain, now, 1.0) == 0.98
        told = plain.model_copy(update={"checkpoint_write_s": 20.0, "checkpoint_interval_s": 80.0})
        assert observed_ettr_carried(told, now, 1.0) == pytest.approx(0.98 * 0.8)
        second = failure.model_copy(
            update={
                "number": 2,
                "onset_at": T0 + timedelta(seconds=5000),
                "detected_at": T0 + timedelta(seconds=5010),
                "recovered_at": T0 + timedelta(seconds=5100),
            }
        )
        both = told.model_copy(update={"failures": [failure, second], "keep_failures": 1})
        folded = carry(both, now)
        assert folded.totals is not None and len(folded.failures) == 1
        # 200 s down, 200 steps lost: 9,600 s running, 80% of it computing
        assert observed_ettr_carried(folded, now, 1.0) == pytest.approx(0.96 * 0.8)
        assert observed_ettr_carried(both, now, 1.0) == pytest.approx(0.96 * 0.8)
        no_interval = plain.model_copy(update={"checkpoint_write_s": 20.0})
        assert observed_ettr_carried(no_interval, now, 1.0) == 0.98
