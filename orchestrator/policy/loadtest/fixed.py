"""Kraken's published step policy (OSDI'16 section 4): the baseline the adaptive one is measured against.

15% steps of the reference load until any metric is within 10% of its threshold,
then 1% steps; NOMORE stops, BACKOFF retreats (:mod:`orchestrator.policy.loadtest.steps`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from orchestrator.policy.loadtest.capacity import StepRecord
from orchestrator.policy.loadtest.steps import (
    PolicyBounds,
    StepAction,
    StepDecision,
    capped,
    check_history,
    unhealthy_decision,
)

__all__ = ["FixedPolicyConfig", "kraken_fixed_step"]


class FixedPolicyConfig(PolicyBounds):
    """Kraken's published policy (OSDI'16 §4)."""

    big_step: float = Field(default=0.15, gt=0, le=1)
    small_step: float = Field(default=0.01, gt=0, le=1)
    #: relative distance to a threshold at which steps become small
    near: float = Field(default=0.10, gt=0, lt=1)


def kraken_fixed_step(history: Sequence[StepRecord], config: FixedPolicyConfig) -> StepDecision:
    """Kraken's policy: ``big_step`` until any metric is within ``near`` of its threshold,
    then ``small_step``; stop at NOMORE, retreat at BACKOFF."""
    current = check_history(history)
    unhealthy = unhealthy_decision(history, config)
    if unhealthy is not None:
        return unhealthy
    near = [r for r in current.readings if r.headroom is not None and r.headroom <= config.near]
    fraction = config.small_step if near else config.big_step
    closest = min(near, key=lambda r: r.headroom or 0.0) if near else current.governing
    target = current.load + fraction * config.reference_load
    decision = StepDecision(
        action=StepAction.INCREASE,
        load=target,
        band=current.band,
        metric=closest.metric if closest else None,
        reason=(
            f"{closest.metric if closest else 'a metric'} within {config.near:.0%} of its "
            f"threshold: {fraction:.0%} step"
            if near
            else f"every metric more than {config.near:.0%} from its threshold: {fraction:.0%} step"
        ),
    )
    return capped(current, target, config, decision)
