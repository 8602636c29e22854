"""Hand-built report models: one run of each workflow type, for the rendering tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.contracts.load_test import LoadTestBaseline, LoadTestResult, StepSummary
from orchestrator.contracts.rebalancer import EpochRecord, RebalancerStatus
from orchestrator.contracts.runbook import GateReading, TaskPhase, TaskState, record_gate
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    FailureRecord,
    SupervisorState,
    SupervisorStatus,
)
from orchestrator.models import HealthReport, RegionHealth
from orchestrator.policy.health_metrics import Band, MetricReading, default_lab_metrics
from orchestrator.policy.loadtest.capacity import CapacityEstimate
from orchestrator.policy.loadtest.kraken import StepAction, StepDecision
from orchestrator.policy.rebalance.inputs import Override
from orchestrator.reports.models import (
    LoadTestReport,
    RebalancerReport,
    RunbookReportView,
    RunHeader,
    SharePoint,
    TrainingReport,
)
from orchestrator.runbook.predicates import Predicate, RegionReading, evaluate_all

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
REGIONS = ("us-east", "us-west", "eu-west")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def header(workflow_type: str, workflow_id: str, end_s: float | None = 60.0) -> RunHeader:
    return RunHeader(
        workflow_id=workflow_id,
        run_id="run-1",
        workflow_type=workflow_type,
        status="completed" if end_s is not None else "running",
        start=T0,
        end=at(end_s) if end_s is not None else None,
        source="result" if end_s is not None else "query",
    )


def rebalancer(epochs: int = 6) -> RebalancerReport:
    records = []
    for e in range(1, epochs + 1):
        skew = 0.3 / e
        shares = {"us-east": 0.4 + skew, "us-west": 0.35 - skew / 2, "eu-west": 0.25 - skew / 2}
        util = {r: 0.6 + (s - 0.33) for r, s in shares.items()}
        records.append(
            EpochRecord(
                epoch=e,
                at=at(5 * e),
                outcome="published" if e < 4 else "unchanged",
                max_utilization_after=max(util.values()),
                shares=shares,
                utilization=util,
            )  # fmt: skip
        )
    records.append(EpochRecord(epoch=epochs + 1, at=at(5 * epochs + 5), outcome="skipped",
                               reason="health data missing for eu-west"))  # fmt: skip
    last = records[-2]
    status = RebalancerStatus(
        epoch=epochs + 1, paused_by=None, pause_reason="", last_good_version=7,
        overrides=[Override(region="eu-west", owner="runbook:eu-west", max_share=0.1)],
        utilization=last.utilization, shares=last.shares, fractions={}, epochs=records,
        capacity_shares={"us-east": 0.4, "us-west": 0.35, "eu-west": 0.25},
    )  # fmt: skip
    return RebalancerReport(
        header=header("TrafficRebalanceWorkflow", "rebalancer", None),
        status=status,
        target_utilization=0.75,
    )


def load_test() -> LoadTestReport:
    metrics = default_lab_metrics("eu-west", service="web", p99_slo_ms=400, max_utilization=0.9)
    history = []
    for i, load in enumerate([30.0, 40.0, 50.0, 60.0, 68.0]):
        values = {"p99_ms": 50 + load, "error_rate": 0.0005 * i, "utilization": load / 75.0}
        readings = []
        for m in metrics:
            value = values[m.key]
            readings.append(
                MetricReading(
                    metric=m.name,
                    key=m.key,
                    entity=m.entity,
                    better=m.better,
                    band=m.band_of(value),
                    value=value,
                    samples=100,
                    status="ok",
                    nomore_threshold=m.nomore_threshold,
                )  # fmt: skip
            )
        band = max(r.band for r in readings)
        decision = StepDecision(action=StepAction.STOP if band >= Band.NOMORE else StepAction.INCREASE,
                                load=load, band=band, reason="next step")  # fmt: skip
        history.append(
            StepSummary(
                index=i,
                target_load=None if i == 0 else load,
                pin_share=None if i == 0 else load / 120.0,
                load=load,
                band=band,
                readings=readings,
                decision=decision,
                at=at(10 * i),
            )  # fmt: skip
        )
    estimate = CapacityEstimate(load=67.5, bottleneck=metrics[2].name, bottleneck_key="utilization",
                                method="interpolated", max_load_tested=68.0)  # fmt: skip
    baseline = LoadTestBaseline(theoretical_capacity=75.0, region_load=30.0, total_demand=120.0,
                                region_share=0.25, routing_version=3, fractions={})  # fmt: skip
    result = LoadTestResult(
        workflow_id="loadtest-eu-west", region="eu-west", service="web", outcome="stopped",
        reason="utilization at NOMORE", steps=4, load_reached=68.0, estimate=estimate,
        theoretical_capacity=75.0, capacity_ratio=0.9, bottleneck=estimate.bottleneck,
        bottleneck_key="utilization", history=history, windows_unhealthy=1, restore_s=0.4,
        routing_restored=True, routing_max_difference=0.0, baseline=baseline,
        started_at=T0, finished_at=at(50),
    )  # fmt: skip
    return LoadTestReport(
        header=header("LiveLoadTestWorkflow", "loadtest-eu-west"),
        region="eu-west",
        service="web",
        result=result,
        metrics=metrics,
    )


def task(tid: str, start: float | None, end: float | None, **extra: object) -> TaskState:
    phase = TaskPhase.DONE if end is not None else TaskPhase.PENDING
    return TaskState.model_validate(
        {"id": tid, "template": "traffic_shift", "phase": phase,
         "started_at": at(start) if start is not None else None,
         "finished_at": at(end) if end is not None else None, **extra}
    )  # fmt: skip


#: the gates of the sample's traffic shift, on the regions receiving eu-west's traffic
GATES = ["error_rate in others-of(eu-west) <= 0.05", "p99_ms in others-of(eu-west) < 250"]
#: seconds -> (step, us-east p99, us-east error rate); us-west stays at 120 ms and 0.002
GATE_READS = {3: (1, 130.0, 0.004), 6: (2, 260.0, 0.09), 9: (2, 240.0, 0.07),
              12: (2, 180.0, 0.01), 15: (3, 150.0, 0.006), 18: (4, 140.0, 0.004)}  # fmt: skip


def gate_readings() -> list[GateReading]:
    """Gate readings as the workflow records them: us-east fails at 6 s and 9 s, so the
    task holds twice at step 2, then passes."""
    predicates = [Predicate.model_validate(g) for g in GATES]
    readings: list[GateReading] = []
    for second, (step, p99, errors) in GATE_READS.items():
        health = HealthReport(window_s=5.0, observed_at=at(second), regions=[
            RegionHealth(region="us-east", p99_ms=p99, error_rate=errors, samples=50),
            RegionHealth(region="us-west", p99_ms=120.0, error_rate=0.002, samples=50),
            RegionHealth(region="eu-west", p99_ms=90.0, error_rate=0.0, samples=50),
        ])  # fmt: skip
        results = evaluate_all(predicates, health, REGIONS)
        regions = {r: RegionReading.of(health.region(r)) for r in ("us-east", "us-west")}
        record_gate(readings, at=at(second), step=step, results=results, regions=regions,
                    held=not all(r.ok for r in results))  # fmt: skip
    return readings


def runbook() -> RunbookReportView:
    tasks = [
        task("shift-traffic", 1, 20, gates=gate_readings()),
        task("sessions-off", 20, 22, template="service_weight"),
        task("move-kv", 20, 35, template="shard_shift", overrides=["gate by bob: known blip"]),
        task("stop-batch", 35, 37, template="job_update"),
        task("sign-off", 37, 45, template="approval"),
        task("notify", None, None, phase=TaskPhase.SKIPPED, template="notify"),
    ]
    return RunbookReportView(
        header=header("RunbookWorkflow", "region-drain-eu-west", 46.0),
        runbook="region-drain",
        mode="real",
        outcome="completed",
        region="eu-west",
        tasks=tasks,
        critical_path=["shift-traffic", "move-kv", "stop-batch", "sign-off"],
        critical_path_s=44.0,
        sequential_s=46.0,
        events=[
            "12:00:00 real run of region-drain by alice",
            "12:00:30 move-kv: condition overridden by bob: known blip",
            "12:00:44 sign-off: approved by alice: ok",
        ],
        region_shares=[SharePoint(at=at(s), share=v) for s, v in
                       [(0, 0.25), (5, 0.2), (10, 0.12), (15, 0.05), (20, 0.0), (40, 0.0)]],
    )  # fmt: skip


def training() -> TrainingReport:
    failures = [
        FailureRecord(number=1, kind=FailureKind.GPU, onset_at=at(20), detected_at=at(21),
                      decided_at=at(22), restarted_at=at(25), recovered_at=at(27),
                      failed_at_step=200, resumed_from_step=150, quarantined=["h3"],
                      detail="xid 79 on h3"),
        FailureRecord(number=2, kind=FailureKind.BUILDING, onset_at=at(50), detected_at=at(51.5),
                      restarted_at=at(58), recovered_at=at(61), failed_at_step=420,
                      resumed_from_step=400, detail="building b1 power loss"),
    ]  # fmt: skip
    status = SupervisorStatus(
        job="llm", state=SupervisorState.FINISHED, failures=failures, step=800,
        total_steps=800, ettr=0.71, mttd_s=[f.mttd_s for f in failures],
        mttr_s=[f.mttr_s for f in failures], lost_steps=[f.lost_steps for f in failures],
    )  # fmt: skip
    return TrainingReport(
        header=header("TrainingJobSupervisorWorkflow", "training-llm", 100.0),
        status=status,
        started_at=T0,
        as_of=at(100),
    )
