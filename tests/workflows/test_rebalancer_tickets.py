"""The rebalancer's override tickets as pure state: taken at once, settled FIFO by an epoch,
withdrawn when an epoch cannot honour them (the Temporal side is in test_rebalancer.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.contracts.rebalancer import (
    KEPT_TICKETS,
    ClearOverrideInput,
    RebalancerState,
    SetOverrideInput,
)
from orchestrator.policy.rebalance.inputs import FleetView, RegionView
from workflows.rebalancer_tickets import find_ticket, known, settle_tickets, take_clear, take_set

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def state() -> RebalancerState:
    regions = [
        RegionView(name=n, status="active", capacity=100.0, load=40.0, utilization=0.4)
        for n in ("a", "b", "c")
    ]
    view = FleetView(regions=regions, total_demand=120.0, observed_at=NOW)
    return RebalancerState(epoch=4, view=view, last_good_version=9, shares={"a": 0.2})


def drain(region: str, owner: str = "runbook:a", share: float = 0.0) -> SetOverrideInput:
    return SetOverrideInput(region=region, owner=owner, reason="t", max_share=share)


class TestIntake:
    """A request is taken or refused at once; the same ticket twice is one request."""

    def test_set_is_pending_and_held(self) -> None:
        s = state()
        assert take_set(s, drain("a"), "t1", 0.9, NOW)
        assert s.overrides["a"].max_share == 0.0
        assert find_ticket(s, "t1").outcome == "pending" and known(s, "t1")
        assert find_ticket(s, "nope").outcome == "unknown" and not known(s, "nope")

    def test_conflict_is_refused_with_its_type(self) -> None:
        s = state()
        take_set(s, drain("a"), "t1", 0.9, NOW)
        assert not take_set(s, drain("a", owner="loadtest:x", share=0.5), "t2", 0.9, NOW)
        refused = find_ticket(s, "t2")
        assert (refused.outcome, refused.error_type) == ("failed", "OverrideConflict")
        assert "runbook:a" in refused.error
        assert s.overrides["a"].owner == "runbook:a"

    def test_unsafe_is_refused_and_leaves_nothing(self) -> None:
        s = state()
        take_set(s, drain("a"), "t1", 0.9, NOW)
        # Two regions of 100 left at a target of 0.9 could not carry 120.
        assert not take_set(s, drain("b", owner="runbook:b"), "t2", 0.9, NOW)
        assert find_ticket(s, "t2").error_type == "UnsafeRequest"
        assert sorted(s.overrides) == ["a"] and len(s.pending) == 1

    def test_clear_of_nothing_is_applied_at_once(self) -> None:
        s = state()
        assert not take_clear(s, ClearOverrideInput(region="a", owner="runbook:a"), "t1")
        done = find_ticket(s, "t1")
        assert (done.outcome, done.epoch, done.version, done.region_share) == (
            "applied",
            4,
            9,
            0.2,
        )


class TestSettle:
    """An epoch settles the requests pending when it began; a failed set is withdrawn."""

    def test_applied_in_order_later_ones_wait(self) -> None:
        s = state()
        take_set(s, drain("a"), "t1", 0.9, NOW)
        taken = len(s.pending)
        take_clear(s, ClearOverrideInput(region="a", owner="runbook:a"), "t2")
        assert not settle_tickets(s, taken)
        assert find_ticket(s, "t1").outcome == "applied"
        assert find_ticket(s, "t2").outcome == "pending"

    def test_failed_sets_put_back_the_hold_before_them(self) -> None:
        s = state()
        take_set(s, drain("a", share=0.3), "t1", 0.9, NOW)
        settle_tickets(s, 1)
        take_set(s, drain("a", share=0.1), "t2", 0.9, NOW)
        take_set(s, drain("a", share=0.0), "t3", 0.9, NOW)
        assert settle_tickets(s, 2, failure="no trusted view")
        assert s.overrides["a"].max_share == 0.3
        failed = find_ticket(s, "t3")
        assert (failed.outcome, failed.error_type) == ("failed", "Infeasible")
        assert failed.error == "override on a could not be applied: no trusted view"

    def test_failed_first_set_leaves_no_hold(self) -> None:
        s = state()
        take_set(s, drain("a"), "t1", 0.9, NOW)
        assert settle_tickets(s, 1, failure="x")
        assert s.overrides == {}

    def test_settled_list_is_bounded(self) -> None:
        s = state()
        for i in range(KEPT_TICKETS + 5):
            take_clear(s, ClearOverrideInput(region="a", owner="o"), f"t{i}")
        assert len(s.settled) == KEPT_TICKETS
        assert not known(s, "t0") and known(s, f"t{KEPT_TICKETS + 4}")
