"""Inputs, progress and result of LiveLoadTestWorkflow, and its activities' messages.

Loads are requests per second of one service in the target region; the lever the
test pulls is the region's pinned share of that service's total demand.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from orchestrator.models import Fraction
from orchestrator.policy.health_metrics import (
    Band,
    HealthMetric,
    MetricReading,
    default_lab_metrics,
)
from orchestrator.policy.loadtest.kraken import (
    CapacityEstimate,
    FixedPolicyConfig,
    StepAction,
    StepDecision,
    StepPolicyConfig,
    StepRecord,
    capacity_ratio,
    estimate_capacity,
    kraken_fixed_step,
    next_step,
)
from orchestrator.runbook.load_defaults import (
    DEFAULT_MAX_ERROR_RATE,
    DEFAULT_MAX_UTILIZATION,
    DEFAULT_P99_SLO_MS,
    DEFAULT_SETTLE_S,
    DEFAULT_WINDOW_S,
)

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "DEFAULT_MAX_UTILIZATION",
    "DEFAULT_P99_SLO_MS",
    "DEFAULT_SETTLE_S",
    "DEFAULT_WINDOW_S",
    "AbortInput",
    "LoadTestBaseline",
    "LoadTestInput",
    "LoadTestPhase",
    "LoadTestProgress",
    "LoadTestResult",
    "ObserveInput",
    "PolicyChoice",
    "PrepareInput",
    "RoutingCheck",
    "RoutingCheckInput",
    "StepObservation",
    "StepSummary",
    "DirectWriteInput",
    "DirectWriteResult",
    "Writer",
    "decide",
    "load_test_owner",
    "outcome_of",
    "summarize",
]

#: ``waiting``: for the rebalancer's first trusted view of the fleet, before anything moves
LoadTestPhase = Literal["waiting", "preparing", "stepping", "restoring", "done", "failed"]
#: who writes the test's routing moves: the rebalancer (pins through its overrides), or,
#: with no rebalancer running, the test itself (If-Match writes, the table found put back)
Writer = Literal["rebalancer", "direct"]
#: how a test ended: ``stopped`` at NOMORE or convergence, ``backoff`` retreated at BACKOFF,
#: ``aborted`` by an operator, ``max_steps`` out of steps, ``refused`` the rebalancer could
#: not apply the next pin, ``max_load`` nothing more to move
Outcome = Literal["stopped", "backoff", "aborted", "max_steps", "refused", "max_load", "error"]


def load_test_owner(workflow_id: str) -> str:
    """The override owner of a load test: distinct from a drain's ``runbook:<region>``."""
    return f"loadtest:{workflow_id}"


class PolicyChoice(BaseModel):
    """Which step policy drives the test, with overrides of its settings."""

    #: ``adaptive`` (orchestrator.policy.loadtest.kraken.next_step) or Kraken's fixed 15%/1% policy
    kind: Literal["adaptive", "kraken_fixed"] = "adaptive"
    #: fields of StepPolicyConfig / FixedPolicyConfig other than the load bounds
    settings: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _valid_settings(self) -> PolicyChoice:
        bounds = {"reference_load", "max_load", "baseline_load"}
        given = sorted(bounds & set(self.settings))
        if given:
            raise ValueError(f"settings.{given[0]}: set by the workflow from the topology")
        self.config(reference_load=1.0, baseline_load=0.0, max_load=None)
        return self

    def config(
        self, *, reference_load: float, baseline_load: float, max_load: float | None
    ) -> StepPolicyConfig | FixedPolicyConfig:
        bounds = {
            "reference_load": reference_load,
            "baseline_load": baseline_load,
            "max_load": max_load,
        }
        if self.kind == "adaptive":
            return StepPolicyConfig.model_validate({**self.settings, **bounds})
        return FixedPolicyConfig.model_validate({**self.settings, **bounds})


class LoadTestInput(BaseModel):
    region: str = Field(min_length=1)
    service: str = Field(default="web", min_length=1)
    #: banded metrics to watch; None: the lab set (p99, error rate, utilization) of the
    #: service pool in the region, with the thresholds below
    metrics: list[HealthMetric] | None = None
    p99_slo_ms: float = Field(default=DEFAULT_P99_SLO_MS, gt=0)
    max_error_rate: float = Field(default=DEFAULT_MAX_ERROR_RATE, gt=0, le=1)
    max_utilization: float = Field(default=DEFAULT_MAX_UTILIZATION, gt=0, le=1)
    #: seconds of health judged per step (Kraken: 60 s aggregation; seconds in the lab)
    window_s: float = Field(default=DEFAULT_WINDOW_S, gt=0)
    #: seconds to let a new table take effect before the window starts (new buckets warm up)
    settle_s: float = Field(default=DEFAULT_SETTLE_S, ge=0)
    max_steps: int = Field(default=20, ge=1, le=200)
    #: the target never gets more than this share of the service's total demand
    max_pin_share: Fraction = 0.95
    policy: PolicyChoice = Field(default_factory=PolicyChoice)
    reason: str = ""

    @model_validator(mode="after")
    def _metrics_watch_the_region(self) -> LoadTestInput:
        for metric in self.metrics or []:
            if metric.entity.region != self.region:
                raise ValueError(
                    f"metrics.{metric.name}: watches region {metric.entity.region!r}, "
                    f"not the target {self.region!r}"
                )
        return self

    def watched_metrics(self) -> list[HealthMetric]:
        """The metrics given, or the lab set for the service pool in the region."""
        if self.metrics:
            return list(self.metrics)
        return default_lab_metrics(
            self.region,
            service=self.service,
            p99_slo_ms=self.p99_slo_ms,
            max_error_rate=self.max_error_rate,
            max_utilization=self.max_utilization,
            window_s=self.window_s,
        )


class AbortInput(BaseModel):
    by: str = Field(min_length=1)
    reason: str = ""


# --- activities ----------------------------------------------------------------------------


class PrepareInput(BaseModel):
    region: str
    service: str
    window_s: float = Field(gt=0)


class LoadTestBaseline(BaseModel):
    """What the fleet looked like before the test touched it."""

    theoretical_capacity: float
    #: the service's load in the region and over every region, rps
    region_load: float
    total_demand: float
    region_share: float
    routing_version: int
    #: the routing table found; put back verbatim at the end
    fractions: dict[str, dict[str, float]]


class ObserveInput(BaseModel):
    region: str
    service: str
    window_s: float = Field(gt=0)
    metrics: list[HealthMetric]
    #: the load the test asked for; sets the expected sample count (too few: unhealthy)
    expected_load: float | None = None


class StepObservation(BaseModel):
    #: measured load of the service in the region over the window, rps (offered: failures too)
    load: float
    total_demand: float
    readings: list[MetricReading]


class DirectWriteInput(BaseModel):
    """A routing write by a test that runs without a rebalancer (it is then the writer)."""

    region: str
    #: the region's pinned share of demand; None: write ``base`` itself (the restore)
    share: Fraction | None = None
    #: the table found at the start: every pin is derived from it, so a retried write
    #: sends the same body under the same key
    base: dict[str, dict[str, float]]
    #: the version the test last read or wrote: anyone else's write since is a conflict
    if_match: int
    idempotency_key: str
    reason: str = ""


class DirectWriteResult(BaseModel):
    version: int
    #: someone else wrote the table since ``if_match``: nothing was written
    conflict: bool = False


class RoutingCheckInput(BaseModel):
    fractions: dict[str, dict[str, float]]
    tolerance: float = Field(default=1e-6, ge=0)
    #: with ``region``: the share check that applies while a rebalancer keeps publishing
    region: str | None = None
    service: str = "web"
    baseline_share: float | None = None
    total_demand: float | None = None
    #: the version of the table the restore published
    released_version: int | None = None
    #: the rebalancer's ramp (max utilization increase per epoch); None: exact table only
    ramp: float | None = None


class RoutingCheck(BaseModel):
    identical: bool
    #: the largest difference of any PoP's share of any region
    max_difference: float
    version: int
    #: whether the routing counts as restored (see RoutingCheckInput); None: ``identical``
    restored: bool | None = None
    #: the region's share of demand read back, and how it was judged, in words
    region_share: float | None = None
    how: str = ""


# --- progress and result -------------------------------------------------------------------


class StepSummary(BaseModel):
    index: int
    #: the load asked for and the share pinned for it (None: the baseline observation)
    target_load: float | None
    pin_share: float | None
    #: the load measured over the window
    load: float
    band: Band
    readings: list[MetricReading]
    decision: StepDecision | None = None
    at: datetime | None = None


class LoadTestProgress(BaseModel):
    workflow_id: str
    region: str
    service: str
    phase: LoadTestPhase
    #: load steps applied so far (the baseline observation is not one)
    steps: int
    current_load: float | None = None
    current_share: float | None = None
    band: Band | None = None
    last_reason: str = ""
    theoretical_capacity: float | None = None
    history: list[StepSummary] = Field(default_factory=list)
    aborted_by: str | None = None
    outcome: Outcome | None = None


class LoadTestResult(BaseModel):
    workflow_id: str
    region: str
    service: str
    outcome: Outcome
    reason: str
    #: load steps applied (windows held under a pin)
    steps: int
    #: the highest load held on the region, rps
    load_reached: float
    estimate: CapacityEstimate
    theoretical_capacity: float
    #: estimate / theoretical (Kraken's headline number)
    capacity_ratio: float
    bottleneck: str | None
    bottleneck_key: str | None
    history: list[StepSummary]
    #: windows whose governing band was NOMORE or worse
    windows_unhealthy: int
    #: seconds from the end decision (stop, BACKOFF, abort) to the routing put back
    restore_s: float | None
    #: the routing found is back. With no rebalancer: the exact table. With one (which
    #: goes on publishing after the hold is released): the hold released, and the
    #: region's share of demand read back within the rebalancer's ramp, per table it
    #: published since the restore, of the share found (see ``routing_check``)
    routing_restored: bool
    routing_max_difference: float | None
    #: how ``routing_restored`` was judged, in words
    routing_check: str = ""
    writer: Writer = "rebalancer"
    baseline: LoadTestBaseline
    started_at: datetime
    finished_at: datetime


def decide(config: StepPolicyConfig | FixedPolicyConfig, history: list[StepRecord]) -> StepDecision:
    """The chosen policy's next decision after the steps in ``history``."""
    if isinstance(config, StepPolicyConfig):
        return next_step(history, config)
    return kraken_fixed_step(history, config)


def outcome_of(decision: StepDecision) -> Outcome:
    """How a terminal step decision ends the test."""
    if decision.action is StepAction.RETREAT:
        return "backoff"
    if decision.band is not Band.BACKOFF and decision.reason.startswith("max_load"):
        return "max_load"
    return "stopped"


def summarize(
    *,
    workflow_id: str,
    inp: LoadTestInput,
    outcome: Outcome,
    reason: str,
    steps: int,
    records: list[StepRecord],
    history: list[StepSummary],
    baseline: LoadTestBaseline,
    check: RoutingCheck,
    restore_s: float | None,
    started_at: datetime,
    finished_at: datetime,
    writer: Writer = "rebalancer",
) -> LoadTestResult:
    """The result of a finished test: the capacity its steps reveal, against the topology's."""
    estimate = estimate_capacity(records)
    return LoadTestResult(
        workflow_id=workflow_id,
        region=inp.region,
        service=inp.service,
        outcome=outcome,
        reason=reason,
        steps=steps,
        load_reached=max(s.load for s in history),
        estimate=estimate,
        theoretical_capacity=baseline.theoretical_capacity,
        capacity_ratio=capacity_ratio(estimate.load, baseline.theoretical_capacity),
        bottleneck=estimate.bottleneck,
        bottleneck_key=estimate.bottleneck_key,
        history=history,
        windows_unhealthy=sum(1 for s in history[1:] if not s.band.healthy),
        restore_s=restore_s,
        routing_restored=check.identical if check.restored is None else check.restored,
        routing_max_difference=check.max_difference,
        routing_check=check.how,
        writer=writer,
        baseline=baseline,
        started_at=started_at,
        finished_at=finished_at,
    )
