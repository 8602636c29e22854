"""The table a load test writes when no rebalancer runs, and what "restored" means."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.activities.load_test import judge_restore
from orchestrator.contracts.load_test import RoutingCheck, RoutingCheckInput
from orchestrator.exceptions import InvalidInstance
from orchestrator.models import Pop, Region, RoutingTable, Service, Topology
from orchestrator.policy.rebalance.pin_table import pinned_table, region_share

REGIONS = ["a", "b", "c"]


def topology(capacity: float = 100.0) -> Topology:
    return Topology(
        regions=[Region(name=r, capacity_rps={"web": capacity}) for r in REGIONS],
        pops=[
            Pop(name="p1", demand_weight=1.0, rtt_ms=dict.fromkeys(REGIONS, 10.0)),
            Pop(name="p2", demand_weight=3.0, rtt_ms=dict.fromkeys(REGIONS, 10.0)),
        ],
        services=[Service(name="web", kind="stateless")],
    )


BASE = {"p1": {"a": 0.5, "b": 0.5}, "p2": {"a": 0.2, "b": 0.3, "c": 0.5}}


class TestPinnedTable:
    """The region gets exactly the share asked, the others keep their proportions, and a
    region that got nothing still gets nothing."""

    @given(share=st.floats(min_value=0.0, max_value=1.0))
    @settings(max_examples=200, deadline=None)
    def test_share_is_exact_and_rows_sum_to_one(self, share: float) -> None:
        table = pinned_table(topology(), BASE, "a", share)
        assert region_share(topology(), table, "a") == pytest.approx(share, abs=1e-9)
        for shares in table.values():
            assert sum(shares.values()) == pytest.approx(1.0, abs=1e-9)
            assert all(0.0 <= f <= 1.0 + 1e-12 for f in shares.values())

    def test_others_keep_their_proportions_when_raising(self) -> None:
        table = pinned_table(topology(), BASE, "a", 0.6)
        assert table["p2"]["b"] / table["p2"]["c"] == pytest.approx(0.3 / 0.5)
        assert "c" not in table["p1"]  # a PoP that never used c does not start to

    def test_lowering_gives_back_to_the_same_regions(self) -> None:
        table = pinned_table(topology(), BASE, "a", 0.1)
        assert "c" not in table["p1"]
        assert table["p1"]["b"] > 0.5

    def test_same_inputs_same_table(self) -> None:
        # A retried write sends the same body under the same idempotency key.
        assert pinned_table(topology(), BASE, "b", 0.7) == pinned_table(topology(), BASE, "b", 0.7)

    def test_unknown_region_refused(self) -> None:
        with pytest.raises(InvalidInstance, match="region"):
            pinned_table(topology(), BASE, "zz", 0.5)


def check_of(table: RoutingTable, **changes: object) -> RoutingCheck:
    fields: dict[str, object] = {
        "fractions": BASE,
        "region": "a",
        "baseline_share": region_share(topology(), BASE, "a"),
        "total_demand": 100.0,
        "released_version": 10,
        "ramp": 0.04,
    }
    inp = RoutingCheckInput.model_validate({**fields, **changes})
    difference = max(
        abs(table.fractions[p].get(r, 0.0) - BASE[p].get(r, 0.0)) for p in BASE for r in REGIONS
    )
    check = RoutingCheck(identical=difference <= 1e-9, max_difference=difference, version=0)
    return judge_restore(inp, check, table, topology())


class TestRestored:
    """Restored: the exact table found; or, while a rebalancer keeps publishing after the
    hold is released, the region's share within its ramp per table published since."""

    def test_exact_table(self) -> None:
        check = check_of(RoutingTable(version=10, fractions=BASE))
        assert check.restored and "exactly" in check.how

    def test_one_rebalancer_epoch_later_within_the_ramp(self) -> None:
        # ramp 0.04 x capacity 100 / demand 100: each table may add 4% of demand to a; the
        # restore and one epoch since: 8%.
        moved = pinned_table(topology(), BASE, "a", region_share(topology(), BASE, "a") + 0.07)
        check = check_of(RoutingTable(version=11, fractions=moved))
        assert check.restored, check.how
        assert "published 1 table(s)" in check.how

    def test_beyond_the_ramp_is_not_restored(self) -> None:
        moved = pinned_table(topology(), BASE, "a", region_share(topology(), BASE, "a") + 0.1)
        check = check_of(RoutingTable(version=11, fractions=moved))
        assert check.restored is False and "allowed" in check.how

    def test_re_solved_restore_within_one_ramp(self) -> None:
        # The table found no longer fit: the restore re-solved it, within one ramp.
        moved = pinned_table(topology(), BASE, "a", region_share(topology(), BASE, "a") + 0.03)
        assert check_of(RoutingTable(version=10, fractions=moved)).restored

    def test_re_solved_restore_beyond_one_ramp_is_not_restored(self) -> None:
        moved = pinned_table(topology(), BASE, "a", region_share(topology(), BASE, "a") + 0.06)
        assert check_of(RoutingTable(version=10, fractions=moved)).restored is False

    def test_without_a_rebalancer_only_the_exact_table(self) -> None:
        moved = pinned_table(topology(), BASE, "a", region_share(topology(), BASE, "a") + 0.001)
        check = check_of(RoutingTable(version=11, fractions=moved), ramp=None)
        assert check.restored is False and "differs" in check.how

    def test_version_gone_back_is_not_restored(self) -> None:
        check = check_of(
            RoutingTable(version=3, fractions=pinned_table(topology(), BASE, "a", 0.9))
        )
        assert check.restored is False and "went back" in check.how
