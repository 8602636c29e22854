"""What every Kraken step policy shares: the decision it returns and the unhealthy ends.

A step policy looks at the steps taken so far and answers a :class:`StepDecision`.
NOMORE stops the test and BACKOFF retreats, to the last healthy load (or the load
before the test), whatever the policy; :func:`unhealthy_decision` is that rule, and
:func:`capped` keeps an increase under ``max_load``. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pydantic import Field

from orchestrator.exceptions import InvalidInstance
from orchestrator.models import StrictModel
from orchestrator.policy.health_metrics import Band, MetricReading
from orchestrator.policy.loadtest.capacity import StepRecord

__all__ = [
    "PolicyBounds",
    "StepAction",
    "StepDecision",
    "capped",
    "check_history",
    "describe",
    "last_healthy_load",
    "unhealthy_decision",
]


class StepAction(StrEnum):
    INCREASE = "increase"
    #: stay at the same load for another window
    HOLD = "hold"
    #: NOMORE (or nothing left to add): end the test, stepping back to the last healthy load
    STOP = "stop"
    #: BACKOFF: leave the target at once for the last healthy load (or the baseline)
    RETREAT = "retreat"
    #: after the first NOMORE: one window inside the bracket (last healthy, first NOMORE),
    #: below the chord's crossing, to narrow it before the test ends
    PROBE = "probe"


class StepDecision(StrictModel):
    action: StepAction
    #: the load to hold next
    load: float = Field(ge=0)
    band: Band
    #: the metric that decided (the governing one, or the nearest to its threshold)
    metric: str | None = None
    reason: str
    #: where the policy expects the first NOMORE crossing, when a trend is known
    predicted_limit: float | None = None

    @property
    def terminal(self) -> bool:
        return self.action in (StepAction.STOP, StepAction.RETREAT)

    @property
    def moves(self) -> bool:
        """Whether the decision asks for a new load (an increase, or a probe back down)."""
        return self.action in (StepAction.INCREASE, StepAction.PROBE)


class PolicyBounds(StrictModel):
    #: the scale of step sizes (normally the theoretical capacity of the target)
    reference_load: float = Field(gt=0)
    #: never ask for more than this (e.g. all traffic that can be moved); None: no cap
    max_load: float | None = Field(default=None, gt=0)
    #: where to retreat when no step was healthy: the load the target had before the test
    baseline_load: float = Field(default=0.0, ge=0)


def check_history(history: Sequence[StepRecord]) -> StepRecord:
    if not history:
        raise InvalidInstance("history: at least one observed step is needed to decide")
    return history[-1]


def last_healthy_load(history: Sequence[StepRecord], below: float, baseline: float) -> float:
    loads = [s.load for s in history if s.band.healthy and s.load < below]
    return max(loads) if loads else min(baseline, below)


def unhealthy_decision(history: Sequence[StepRecord], bounds: PolicyBounds) -> StepDecision | None:
    """STOP at NOMORE, RETREAT at BACKOFF; None while the latest step is healthy."""
    current = history[-1]
    band = current.band
    if band.healthy:
        return None
    governing = current.governing
    name = governing.metric if governing else None
    why = describe(governing)
    back_to = last_healthy_load(history, current.load, bounds.baseline_load)
    if band is Band.BACKOFF:
        return StepDecision(
            action=StepAction.RETREAT,
            load=back_to,
            band=band,
            metric=name,
            reason=f"BACKOFF on {why}: retreat to {back_to:g}",
        )
    return StepDecision(
        action=StepAction.STOP,
        load=back_to,
        band=band,
        metric=name,
        reason=f"NOMORE on {why}: stop and step back to {back_to:g}",
    )


def describe(reading: MetricReading | None) -> str:
    if reading is None:
        return "no metrics"
    if reading.status != "ok":
        return f"{reading.metric} ({reading.status.replace('_', ' ')})"
    return f"{reading.metric}={reading.value:g} (threshold {reading.nomore_threshold:g})"


def capped(
    current: StepRecord, target: float, bounds: PolicyBounds, decision: StepDecision
) -> StepDecision:
    """Clamp an increase to ``max_load``; at the cap, the test ends."""
    cap = bounds.max_load
    if cap is None or target < cap:
        return decision
    if current.load >= cap:
        return decision.model_copy(
            update={
                "action": StepAction.STOP,
                "load": current.load,
                "reason": f"max_load {cap:g} reached while healthy; capacity is at least that",
            }
        )
    return decision.model_copy(
        update={"load": cap, "reason": decision.reason + f" (capped at {cap:g})"}
    )
