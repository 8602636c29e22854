"""Maelstrom planning: DAG scheduling, the 79/109 generator, capacity check, stuck tasks."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from orchestrator.exceptions import InvalidInstance, UnsafeRequest
from orchestrator.models import (
    HealthReport,
    Pop,
    PopHealth,
    Region,
    RegionHealth,
    RegionStatus,
    RoutingTable,
    Service,
    ServiceHealth,
    ServiceKind,
    Topology,
)
from orchestrator.policy.drain.maelstrom import (
    Dag,
    DagTask,
    DrainRefused,
    blocked_tasks,
    check_drain_capacity,
    critical_path,
    forecast_drain,
    generate_drain_dag,
    percentile,
    ready_tasks,
    simulate,
    stuck_verdict,
    synthetic_runbook,
    topological_layers,
)
from orchestrator.runbook import REGISTRY


def dag(*tasks: tuple[str, list[str], list[str], float]) -> Dag:
    return Dag(
        tasks=[DagTask(id=i, depends_on=s, weak_depends_on=w, duration_s=d) for i, s, w, d in tasks]
    )


#    a(10) ─strong─> c(5) ─strong─> d(1)
#    b(20) ─weak───> c
DIAMOND = dag(
    ("a", [], [], 10.0),
    ("b", [], [], 20.0),
    ("c", ["a"], ["b"], 5.0),
    ("d", ["c"], [], 1.0),
)


class TestDagValidation:
    """A DAG with duplicate ids, unknown dependencies or a cycle is refused by name."""

    def test_refusals(self) -> None:
        with pytest.raises(InvalidInstance, match="duplicate id"):
            dag(("a", [], [], 1), ("a", [], [], 1))
        with pytest.raises(InvalidInstance, match="tasks.a: unknown dependency z"):
            dag(("a", ["z"], [], 1))
        with pytest.raises(InvalidInstance, match="cycle among a, b"):
            dag(("a", ["b"], [], 1), ("b", [], ["a"], 1))


class TestReadySet:
    """Strong dependencies must succeed (or be skipped); weak ones merely finish."""

    def test_roots_first(self) -> None:
        assert ready_tasks(DIAMOND, done=[]) == ["a", "b"]
        assert ready_tasks(DIAMOND, done=[], running=["a"]) == ["b"]

    def test_weak_dependency_waits_for_finish_not_success(self) -> None:
        assert ready_tasks(DIAMOND, done=["a"]) == ["b"]  # c waits for b to finish
        assert ready_tasks(DIAMOND, done=["a"], failed=["b"]) == ["c"]
        assert ready_tasks(DIAMOND, done=["a"], running=["b"], ignore_weak=True) == ["c"]

    def test_strong_failure_blocks_skip_does_not(self) -> None:
        assert ready_tasks(DIAMOND, done=["b"], failed=["a"]) == []
        assert blocked_tasks(DIAMOND, failed=["a"]) == ["c", "d"]
        assert blocked_tasks(DIAMOND, failed=["b"]) == []
        assert ready_tasks(DIAMOND, done=["b"], skipped=["a"]) == ["c"]

    def test_layers(self) -> None:
        assert topological_layers(DIAMOND) == [["a", "b"], ["c"], ["d"]]


class TestCriticalPath:
    """The critical path follows the longest chain, weak links included."""

    def test_diamond(self) -> None:
        path = critical_path(DIAMOND)
        assert path.tasks == ["b", "c", "d"]
        assert path.length_s == 26.0

    def test_simulation_unbounded_equals_critical_path(self) -> None:
        schedule = simulate(DIAMOND)
        assert schedule.makespan_s == 26.0
        assert schedule.sequential_s == 36.0
        assert schedule.start_s["c"] == 20.0
        assert schedule.speedup == pytest.approx(36 / 26)

    def test_simulation_one_slot_is_sequential(self) -> None:
        assert simulate(DIAMOND, parallelism=1).makespan_s == 36.0
        with pytest.raises(InvalidInstance, match="parallelism"):
            simulate(DIAMOND, parallelism=0)

    def test_bounded_never_beats_unbounded(self) -> None:
        generated = generate_drain_dag(seed=3)
        unbounded = simulate(generated).makespan_s
        spans = [simulate(generated, parallelism=p).makespan_s for p in (1, 2, 4, 8)]
        assert spans == sorted(spans, reverse=True)
        assert all(s >= unbounded - 1e-9 for s in spans)
        assert spans[0] == pytest.approx(simulate(generated).sequential_s)


class TestGenerator:
    """The generated drain has Meta's size, is seeded and is a valid DAG."""

    @pytest.mark.parametrize("seed", [0, 1, 7])
    def test_shape(self, seed: int) -> None:
        generated = generate_drain_dag(seed=seed)
        assert len(generated.tasks) == 79
        assert generated.dependency_count == 109
        assert len(topological_layers(generated)) == 8
        assert any(t.weak_depends_on for t in generated.tasks)
        assert all(t.duration_s > 0 for t in generated.tasks)
        schedule = simulate(generated)
        assert 1 < schedule.speedup < 79

    def test_seeded(self) -> None:
        assert generate_drain_dag(seed=5) == generate_drain_dag(seed=5)
        assert generate_drain_dag(seed=5) != generate_drain_dag(seed=6)

    def test_other_sizes_and_refusals(self) -> None:
        small = generate_drain_dag(seed=1, tasks=20, dependencies=30, depth=4)
        assert (len(small.tasks), small.dependency_count) == (20, 30)
        with pytest.raises(InvalidInstance, match="dependencies"):
            generate_drain_dag(tasks=10, dependencies=200, depth=3)

    def test_synthetic_runbook_keeps_the_shape(self) -> None:
        generated = generate_drain_dag(seed=2)
        runbook = synthetic_runbook(generated, time_scale=0.01)
        assert len(runbook.tasks) == 79
        first = runbook.tasks[-1]
        REGISTRY[first.template].validate_args(first.args)
        assert first.expected_duration == pytest.approx(generated.tasks[-1].duration_s * 0.01)


NOW = datetime(2024, 1, 1, tzinfo=UTC)


def fleet(
    loads: Mapping[str, float | None], capacity: Mapping[str, float], drained: tuple[str, ...] = ()
) -> tuple[Topology, HealthReport]:
    regions = [
        Region(
            name=name,
            capacity_rps={"web": cap},
            status=RegionStatus.DRAINED if name in drained else RegionStatus.ACTIVE,
        )
        for name, cap in capacity.items()
    ]
    topology = Topology(
        regions=regions,
        pops=[Pop(name="p", demand_weight=1.0, rtt_ms=dict.fromkeys(capacity, 10.0))],
        services=[Service(name="web", kind=ServiceKind.STATELESS)],
    )
    services = [
        ServiceHealth(region=r, service="web", rps=v, samples=0 if v is None else 100)
        for r, v in loads.items()
    ]
    report = HealthReport(window_s=30, observed_at=NOW, services=services)
    return topology, report


class TestCapacityCheck:
    """A drain that would push any remaining region past the target is refused with numbers."""

    def test_safe_drain_predicts_spread_by_spare_capacity(self) -> None:
        topology, health = fleet({"a": 400, "b": 300, "c": 100}, {"a": 1000, "b": 1000, "c": 1000})
        forecast = check_drain_capacity(topology, health, ["a"])
        after = {r.region: r.utilization_after for r in forecast.regions}
        # 400 rps move; spare is 700 (b) and 900 (c): b gets 175, c gets 225.
        assert after["b"] == pytest.approx(0.475)
        assert after["c"] == pytest.approx(0.325)
        assert after["a"] == 0.0
        assert forecast.safe and forecast.worst_region == "b"

    def test_spread_rules(self) -> None:
        topology, health = fleet({"a": 400, "b": 300, "c": 100}, {"a": 1000, "b": 1000, "c": 1000})
        by_cap = forecast_drain(topology, health, ["a"], spread="capacity")
        balanced = forecast_drain(topology, health, ["a"], spread="balanced")
        cap_after = {r.region: r.utilization_after for r in by_cap.regions}
        bal_after = {r.region: r.utilization_after for r in balanced.regions}
        assert cap_after["b"] == pytest.approx(0.5) and cap_after["c"] == pytest.approx(0.3)
        assert bal_after["b"] == pytest.approx(0.4) and bal_after["c"] == pytest.approx(0.4)

    def test_refused_with_the_numbers(self) -> None:
        topology, health = fleet({"a": 600, "b": 600, "c": 500}, {"a": 1000, "b": 1000, "c": 1000})
        with pytest.raises(DrainRefused) as caught:
            check_drain_capacity(topology, health, ["a"])
        message = str(caught.value)
        assert "refusing to drain a" in message
        assert "b would run web at 0.87" in message  # 600 + 600*400/900 = 866.7 rps
        assert "867 of 1000 rps" in message
        assert isinstance(caught.value, UnsafeRequest)
        assert caught.value.type_name() == "UnsafeRequest"
        assert not caught.value.forecast.safe

    def test_target_is_a_setting(self) -> None:
        topology, health = fleet({"a": 600, "b": 600, "c": 500}, {"a": 1000, "b": 1000, "c": 1000})
        assert check_drain_capacity(topology, health, ["a"], target=0.9).safe

    def test_second_drain_refused_together_with_running_one(self) -> None:
        capacity = {"a": 1000, "b": 1000, "c": 1000, "d": 1000}
        topology, health = fleet({"a": 400, "b": 400, "c": 400, "d": 400}, capacity)
        assert check_drain_capacity(topology, health, ["a"]).safe
        assert check_drain_capacity(topology, health, ["b"]).safe
        with pytest.raises(UnsafeRequest, match="together with running drain.s. of a") as caught:
            check_drain_capacity(topology, health, ["b"], running=["a"])
        # alone each drain puts 400/3 more on the others (0.53); together 800/2 (0.80)
        assert "c would run web at 0.80" in str(caught.value)
        assert "d would run web at 0.80" in str(caught.value)
        with pytest.raises(UnsafeRequest, match="already being drained"):
            check_drain_capacity(topology, health, ["a"], running=["a"])

    def test_drained_region_does_not_receive(self) -> None:
        topology, health = fleet(
            {"a": 300, "b": 300, "c": None}, {"a": 1000, "b": 1000, "c": 1000}, drained=("c",)
        )
        with pytest.raises(UnsafeRequest, match="b would run web at 0.60"):
            check_drain_capacity(topology, health, ["a"], target=0.5)

    def test_missing_health_and_no_receiver_refuse(self) -> None:
        topology, health = fleet({"a": 300, "b": None}, {"a": 1000, "b": 1000})
        with pytest.raises(UnsafeRequest, match="no health data for web in b"):
            check_drain_capacity(topology, health, ["a"])
        topology, health = fleet({"a": 300, "b": 10}, {"a": 1000, "b": 1000})
        with pytest.raises(UnsafeRequest, match="no active region left"):
            check_drain_capacity(topology, health, ["a", "b"])

    def test_region_aggregate_used_for_a_single_service(self) -> None:
        topology, _ = fleet({}, {"a": 1000, "b": 1000})
        health = HealthReport(
            window_s=30,
            observed_at=NOW,
            regions=[
                RegionHealth(region="a", utilization=0.3, samples=5),
                RegionHealth(region="b", rps=200, samples=5),
            ],
        )
        forecast = check_drain_capacity(topology, health, ["a"])
        assert forecast.worst_utilization == pytest.approx(0.5)

    def test_bad_input_names_the_field(self) -> None:
        topology, health = fleet({"a": 1, "b": 1}, {"a": 10, "b": 10})
        with pytest.raises(InvalidInstance, match="drain: unknown region"):
            forecast_drain(topology, health, ["zz"])
        with pytest.raises(InvalidInstance, match="target"):
            forecast_drain(topology, health, ["a"], target=1.5)


def two_pops(
    loads: Mapping[str, float | None], pop_rps: Mapping[str, float | None]
) -> tuple[Topology, HealthReport, RoutingTable]:
    """Regions a, b, c (1000 rps each) behind PoPs p (weight 3) and q (weight 1):
    p sends half to a, q sends everything to b; c gets only what p sends it."""
    capacity = {"a": 1000.0, "b": 1000.0, "c": 1000.0}
    topology, health = fleet(loads, capacity)
    topology = topology.model_copy(
        update={
            "pops": [
                Pop(name="p", demand_weight=3.0, rtt_ms=dict.fromkeys(capacity, 10.0)),
                Pop(name="q", demand_weight=1.0, rtt_ms=dict.fromkeys(capacity, 10.0)),
            ]
        }
    )
    health.pops = [
        PopHealth(pop=p, rps=v, samples=0 if v is None else 100) for p, v in pop_rps.items()
    ]
    routing = RoutingTable(
        version=1,
        fractions={"p": {"a": 0.5, "b": 0.0, "c": 0.5}, "q": {"a": 0.0, "b": 1.0, "c": 0.0}},
    )
    return topology, health, routing


class TestMissingHealth:
    """Missing health for the region being drained is estimated from the edge (PoP demand x
    its routing share), since what matters is how much load moves; a region that would
    receive load and reports nothing still refuses, as nothing shows it can take more."""

    def test_drained_region_estimated_from_edge_demand(self) -> None:
        topology, health, routing = two_pops({"a": None, "b": 100, "c": 300}, {"p": 600, "q": 100})
        forecast = check_drain_capacity(topology, health, ["a"], routing=routing)
        a = next(r for r in forecast.regions if r.region == "a")
        # p's 600 rps x a's 0.5 share = 300 rps move, spread by spare capacity 900 : 700
        assert a.services[0].load_before_rps == pytest.approx(300.0)
        assert a.services[0].estimated
        after = {r.region: r.utilization_after for r in forecast.regions}
        assert after["b"] == pytest.approx((100 + 300 * 900 / 1600) / 1000)
        assert after["c"] == pytest.approx((300 + 300 * 700 / 1600) / 1000)
        assert forecast.notes == [
            "no health data for web in a: 300 rps estimated from edge demand x routing share"
        ]

    def test_estimate_can_refuse(self) -> None:
        topology, health, routing = two_pops({"a": 500, "b": None, "c": 500}, {"p": 1800})
        # q has no data either: its demand weight's share of p's rate (1800 / 3) is assumed,
        # all of it routed to b; 600 rps move, 300 onto each of a and c
        with pytest.raises(DrainRefused, match="a would run web at 0.80") as caught:
            check_drain_capacity(topology, health, ["b"], routing=routing)
        assert caught.value.forecast.notes

    def test_unrouted_drained_region_moves_nothing(self) -> None:
        topology, health, routing = two_pops({"a": 100, "b": 100, "c": None}, {"p": 200, "q": 100})
        routing.fractions["p"] = {"a": 1.0, "b": 0.0, "c": 0.0}
        forecast = check_drain_capacity(topology, health, ["c"], routing=routing)
        assert forecast.safe and forecast.worst_utilization == pytest.approx(0.1)

    def test_receiving_region_without_data_refuses(self) -> None:
        topology, health, routing = two_pops({"a": 300, "b": 100, "c": None}, {"p": 600, "q": 100})
        routing.fractions["p"] = {"a": 1.0, "b": 0.0, "c": 0.0}
        with pytest.raises(DrainRefused, match="no health data for web in c .the edge sends it no"):
            check_drain_capacity(topology, health, ["a"], routing=routing)

    def test_without_routing_or_edge_demand_still_refuses(self) -> None:
        topology, health, routing = two_pops({"a": None, "b": 100, "c": 100}, {"p": None})
        with pytest.raises(DrainRefused, match="no health data for web in a"):
            check_drain_capacity(topology, health, ["a"], routing=routing)
        topology, health, _ = two_pops({"a": None, "b": 100, "c": 100}, {"p": 600})
        with pytest.raises(DrainRefused, match="no health data for web in a"):
            check_drain_capacity(topology, health, ["a"])

    def test_running_drain_region_estimated_too(self) -> None:
        topology, health, routing = two_pops({"a": 100, "b": None, "c": 100}, {"p": 400, "q": 200})
        forecast = check_drain_capacity(topology, health, ["a"], ["b"], routing=routing)
        # b's 200 (q) and a's 100 all land on c
        assert forecast.worst_region == "c"
        assert forecast.worst_utilization == pytest.approx(0.4)

    def test_service_mix_split_from_observed_regions(self) -> None:
        regions = [
            Region(name=n, capacity_rps={"web": 1000.0, "cache": 2000.0}) for n in ("a", "b")
        ]
        topology = Topology(
            regions=regions,
            pops=[Pop(name="p", demand_weight=1.0, rtt_ms={"a": 1.0, "b": 1.0})],
            services=[
                Service(name="web", kind=ServiceKind.STATELESS, depends_on=["cache"]),
                Service(name="cache", kind=ServiceKind.STATELESS),
            ],
        )
        health = HealthReport(
            window_s=30,
            observed_at=NOW,
            regions=[RegionHealth(region="b", rps=100, samples=100)],
            services=[
                ServiceHealth(region="b", service="web", rps=100, samples=100),
                ServiceHealth(region="b", service="cache", rps=250, samples=100),
            ],
            pops=[PopHealth(pop="p", rps=300, samples=100)],
        )
        routing = RoutingTable(version=1, fractions={"p": {"a": 0.5, "b": 0.5}})
        forecast = check_drain_capacity(topology, health, ["a"], routing=routing)
        a = {s.service: s.load_before_rps for s in forecast.regions[0].services}
        # 150 rps arrive at a; each request costs 2.5 cache requests where observed
        assert a == pytest.approx({"web": 150.0, "cache": 375.0})


def sessions_pinned_away(c_reports: bool) -> tuple[Topology, HealthReport, RoutingTable]:
    """a, b, c (web and sticky sessions, 1000 rps each): c's sessions served nothing in
    the window (its users' sessions pinned elsewhere), its web did if ``c_reports``."""
    names = ("a", "b", "c")
    topology = Topology(
        regions=[Region(name=n, capacity_rps={"web": 1000.0, "sessions": 1000.0}) for n in names],
        pops=[Pop(name="p", demand_weight=1.0, rtt_ms=dict.fromkeys(names, 1.0))],
        services=[
            Service(name="web", kind=ServiceKind.STATELESS),
            Service(name="sessions", kind=ServiceKind.STICKY),
        ],
    )
    c = 240.0 if c_reports else None
    health = HealthReport(
        window_s=5,
        observed_at=NOW,
        regions=[
            RegionHealth(region="a", rps=400, samples=100),
            RegionHealth(region="b", rps=100, samples=100),
            RegionHealth(region="c", rps=c, samples=100 if c_reports else 0),
        ],
        services=[
            ServiceHealth(region="a", service="web", rps=300, samples=100),
            ServiceHealth(region="a", service="sessions", rps=100, samples=100),
            ServiceHealth(region="b", service="web", rps=80, samples=100),
            ServiceHealth(region="b", service="sessions", rps=20, samples=100),
            ServiceHealth(region="c", service="web", rps=c, samples=100 if c_reports else 0),
            ServiceHealth(region="c", service="sessions", samples=0),
        ],
        pops=[PopHealth(pop="p", rps=700, samples=100)],
    )
    routing = RoutingTable(version=1, fractions={"p": {"a": 4 / 7, "b": 1 / 7, "c": 2 / 7}})
    return topology, health, routing


class TestSilentServiceInAReportingReceiver:
    """A receiver whose region reports but one of whose services served nothing in the
    window (sticky sessions pinned elsewhere, as right after a load test) is estimated from
    the edge like a drained region; a receiver that reports nothing still refuses."""

    def test_silent_sticky_service_is_estimated(self) -> None:
        topology, health, routing = sessions_pinned_away(c_reports=True)
        forecast = check_drain_capacity(topology, health, ["a"], routing=routing)
        # c's edge share: 700 x 2/7 = 200 rps; sessions per request in the regions where
        # sessions were observed: (100 + 20) / (400 + 100)
        expected = 200.0 * 120.0 / 500.0
        c = next(r for r in forecast.regions if r.region == "c")
        sessions = next(s for s in c.services if s.service == "sessions")
        assert sessions.load_before_rps == pytest.approx(expected)
        assert sessions.estimated
        assert forecast.safe
        assert forecast.notes == [
            f"no health data for sessions in c: {expected:.0f} rps estimated from edge "
            "demand x routing share"
        ]

    def test_receiver_reporting_nothing_still_refuses(self) -> None:
        topology, health, routing = sessions_pinned_away(c_reports=False)
        with pytest.raises(DrainRefused, match="no health data for web in c"):
            check_drain_capacity(topology, health, ["a"], routing=routing)


class TestDrainedPool:
    """A pool at weight 0 (a service already drained in a region) takes no load."""

    def test_weight_zero_pool_is_no_receiver(self) -> None:
        topology, health = fleet({"a": 300, "b": 100, "c": None}, dict.fromkeys("abc", 1000.0))
        topology.service_weights["c/web"] = 0.0
        with pytest.raises(DrainRefused, match="b would run web at 0.40"):
            check_drain_capacity(topology, health, ["a"], target=0.3)


class TestStuck:
    """A task running past the p75 of its earlier durations is stuck."""

    def test_percentile(self) -> None:
        assert percentile([10, 20, 30, 40], 0.75) == 32.5
        assert percentile([5], 0.75) == 5
        with pytest.raises(InvalidInstance):
            percentile([], 0.5)

    def test_from_history(self) -> None:
        history = [100.0, 110.0, 120.0, 130.0, 400.0]
        verdict = stuck_verdict(131.0, history)
        assert verdict.stuck and verdict.threshold_s == 130.0 and verdict.basis == "history"
        assert not stuck_verdict(129.0, history).stuck

    def test_fallbacks(self) -> None:
        assert stuck_verdict(61.0, [10.0], expected_s=60.0).basis == "expected"
        assert stuck_verdict(61.0, [10.0], expected_s=60.0).stuck
        never = stuck_verdict(1e9, [])
        assert not never.stuck and never.basis == "none"
