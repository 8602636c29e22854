"""Kraken-style live load test policy: the next step, the baseline, the capacity found.

Pure: every function takes the steps taken so far (the load on the target and
every metric's reading in the window after it) and returns a pydantic model.
Loads are in whatever unit the caller moves (rps or a traffic share); step
sizes are fractions of ``reference_load``, normally the theoretical capacity.

The adaptive policy (:func:`next_step`) extrapolates, for every metric, where
its NOMORE threshold will be crossed from the slope measured over the steps so
far, and closes part of that gap: large steps far from every threshold, small
ones near it, each capped by the governing band (BOLD / MODERATE / CAUTIOUS).
Kraken's published policy (:func:`kraken_fixed_step`) is the baseline: 15%
steps, 1% steps once any metric is within 10% of its threshold.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from orchestrator.models import StrictModel
from orchestrator.policy.health_metrics import Band
from orchestrator.policy.loadtest.capacity import (
    EXTRAPOLATION_LIMIT,
    CapacityEstimate,
    StepRecord,
    capacity_ratio,
    crossing_candidates,
    estimate_capacity,
    metric_points,
    theoretical_capacity,
)
from orchestrator.policy.loadtest.fixed import FixedPolicyConfig, kraken_fixed_step
from orchestrator.policy.loadtest.steps import (
    PolicyBounds,
    StepAction,
    StepDecision,
    capped,
    check_history,
    describe,
    unhealthy_decision,
)

__all__ = [
    "CapacityEstimate",
    "FixedPolicyConfig",
    "StepAction",
    "StepDecision",
    "StepPolicyConfig",
    "StepRecord",
    "capacity_ratio",
    "estimate_capacity",
    "kraken_fixed_step",
    "next_step",
    "theoretical_capacity",
]


class StepPolicyConfig(PolicyBounds):
    """Step sizes are fractions of ``reference_load``."""

    #: largest step, allowed only while every metric is BOLD
    bold_step: float = Field(default=0.25, gt=0, le=1)
    moderate_step: float = Field(default=0.10, gt=0, le=1)
    cautious_step: float = Field(default=0.04, gt=0, le=1)
    #: smallest increase; steps below it cost a window and teach little
    min_step: float = Field(default=0.01, gt=0, le=1)
    #: share of the predicted gap to the NOMORE threshold closed per step when trends disagree
    aim: float = Field(default=0.6, gt=0, le=1)
    #: share closed when every trend agrees on the crossing (scaled by their agreement)
    confident_aim: float = Field(default=0.9, gt=0, le=1)
    #: how close (fraction of reference) the predicted crossing must be to finish
    resolution: float = Field(default=0.02, gt=0, le=1)
    #: at ``resolution``: ``extrapolate`` stops below the threshold and reports the trend's
    #: crossing; ``bracket`` steps onto it so a reading confirms the threshold
    finish: Literal["extrapolate", "bracket"] = "extrapolate"
    #: a trend is trusted once its proportional and secant crossings agree this closely
    #: (relative to the gap): the metric is linear in load, like utilization, and the
    #: step may then land just below the crossing whatever the band's cap
    #: None: never (the default; behind a hidden error cliff a straight utilization trend
    #: leads the step past the cliff, see benchmarks/kraken_policy.py)
    trust: float | None = Field(default=None, gt=0, le=1)
    #: a trusted step lands this far (fraction of reference) below the predicted crossing
    landing: float = Field(default=0.02, ge=0, le=1)
    #: largest step even on a trusted trend
    max_jump: float = Field(default=0.6, gt=0, le=1)
    #: after the first NOMORE, probe once inside a bracket wider than this (fraction of
    #: reference) before stopping, so the interpolated capacity is not read off a long chord
    probe_wider_than: float | None = Field(default=None, gt=0, le=1)
    #: how far (fraction of reference) the probe sits below the chord's crossing; None:
    #: a quarter of ``resolution``. Wider where a window's reading is noisy (the live lab),
    #: so noise alone does not put the probe over the threshold too
    probe_margin: float | None = Field(default=None, gt=0, le=1)
    #: hold one window when the band worsens by two or more levels in one step
    #: (useful where a new load is served cold at first, as in the lab; the simulator has no
    #: warm-up, so it is off by default)
    confirm_jumps: bool = False

    @model_validator(mode="after")
    def _ordered_steps(self) -> StepPolicyConfig:
        chain = ["min_step", "cautious_step", "moderate_step", "bold_step"]
        pairs = [*zip(chain, chain[1:], strict=False), ("aim", "confident_aim")]
        for smaller, larger in pairs:
            if getattr(self, smaller) > getattr(self, larger):
                raise ValueError(
                    f"{smaller} ({getattr(self, smaller)}) must not exceed "
                    f"{larger} ({getattr(self, larger)})"
                )
        return self


# --- the adaptive policy -------------------------------------------------------------------


def _band_cap(band: Band, config: StepPolicyConfig) -> float:
    return {
        Band.BOLD: config.bold_step,
        Band.MODERATE: config.moderate_step,
        Band.CAUTIOUS: config.cautious_step,
    }[band]


class _Limit(StrictModel):
    #: the lowest trend crossing (guards the step size)
    load: float
    #: the median trend crossing (decides convergence)
    central: float
    metric: str
    #: how much the trends agree, 0 (widely apart) to 1 (identical)
    agreement: float
    #: the same from two loads on (proportional against secant): how straight the trend is
    straight: float


def _nearest_limit(history: Sequence[StepRecord]) -> _Limit | None:
    """The lowest predicted NOMORE crossing over every metric."""
    current = history[-1]
    best: _Limit | None = None
    for reading in current.readings:
        points = metric_points(history, reading.metric)
        candidates = crossing_candidates(points, reading.badness_threshold, up_to=current.load)
        if not candidates:
            continue
        low, high = min(candidates), max(candidates)
        gap = low - current.load
        # Trends only confirm each other once the parabola has three points to see a bend
        # (with two points the lines are the same fit); agreement then means a straight trend.
        agreement = 0.0
        if gap > 0 and len(points) >= 3 and len(candidates) >= 4:
            agreement = 1.0 - min(1.0, (high - low) / gap)
        straight = agreement
        if gap > 0 and len(points) == 2 and len(candidates) >= 2:
            # Two loads: the proportional trend and the secant are independent views; when
            # they agree the metric runs through the origin in a straight line. (Only trust
            # reads this: the aim keeps waiting for the parabola's third point.)
            straight = 1.0 - min(1.0, (high - low) / gap)
        if best is None or low < best.load:
            best = _Limit(
                load=low,
                central=statistics.median(candidates),
                metric=reading.metric,
                agreement=agreement,
                straight=straight,
            )
    return best


def _others_allow(history: Sequence[StepRecord], config: StepPolicyConfig, trusted: str) -> float:
    """The largest step every metric but ``trusted`` allows: its own band's cap, or less
    when its own trend nears its threshold. A straight trend in one metric says nothing
    about another that may bend (latency near saturation)."""
    current = history[-1]
    ref = config.reference_load
    allowed = config.max_jump * ref
    for reading in current.readings:
        if reading.metric == trusted:
            continue
        cap = _band_cap(reading.band, config) * ref if reading.band.healthy else 0.0
        points = metric_points(history, reading.metric)
        candidates = crossing_candidates(points, reading.badness_threshold, up_to=current.load)
        if candidates:
            cap = min(cap, config.aim * (min(candidates) - current.load))
        allowed = min(allowed, cap)
    return allowed


def _chord_crossing(low: StepRecord, high: StepRecord, metric: str) -> float | None:
    """Where the straight line between two steps' readings of ``metric`` meets NOMORE."""
    a = next((r for r in low.readings if r.metric == metric), None)
    b = next((r for r in high.readings if r.metric == metric), None)
    if a is None or b is None or a.badness is None or b.badness is None:
        return None
    if a.status != "ok" or b.status != "ok" or b.badness <= a.badness:
        return None
    threshold = b.badness_threshold
    share = (threshold - a.badness) / (b.badness - a.badness)
    return low.load + min(max(share, 0.0), 1.0) * (high.load - low.load)


def _probe(history: Sequence[StepRecord], config: StepPolicyConfig) -> StepDecision | None:
    """After the first NOMORE (never BACKOFF), one window inside a wide bracket.

    The probe sits a little below the chord's crossing: for a metric that bends
    upwards (latency) the chord meets the threshold before the curve does, so
    the probe stays healthy and the threshold is crossed by that one step only.
    """
    current = history[-1]
    if config.probe_wider_than is None or current.band is not Band.NOMORE:
        return None
    if any(not s.band.healthy for s in history[:-1]):
        return None
    below = [s for s in history[:-1] if s.band.healthy and s.load < current.load]
    if not below:
        return None
    last = max(below, key=lambda s: s.load)
    width = current.load - last.load
    ref = config.reference_load
    governing = current.governing
    if width <= config.probe_wider_than * ref or governing is None:
        return None
    chord = _chord_crossing(last, current, governing.metric)
    if chord is None:
        return None
    margin = config.resolution / 4 if config.probe_margin is None else config.probe_margin
    target = min(max(chord - margin * ref, last.load + width / 4), current.load - width / 4)
    return StepDecision(
        action=StepAction.PROBE,
        load=target,
        band=current.band,
        metric=governing.metric,
        reason=(
            f"NOMORE on {describe(governing)} after a step of {width:g}: probe once at "
            f"{target:g}, below the chord's crossing at {chord:g}"
        ),
        predicted_limit=chord,
    )


def _after_probe(history: Sequence[StepRecord], config: StepPolicyConfig) -> StepDecision | None:
    """The window after a probe ends the test: the bracket is as narrow as it gets safely."""
    if len(history) < 2 or config.probe_wider_than is None:
        return None
    crossed = [i for i, s in enumerate(history) if not s.band.healthy]
    if not crossed or crossed[0] != len(history) - 2 or history[-2].band is not Band.NOMORE:
        return None
    current, over = history[-1], history[-2]
    if current.load >= over.load:
        return None
    if not current.band.healthy:
        # The probe crossed too: end at once, below both.
        return unhealthy_decision(history, config)
    return StepDecision(
        action=StepAction.STOP,
        load=current.load,
        band=current.band,
        metric=over.governing.metric if over.governing else None,
        reason=(
            f"probe at {current.load:g} healthy below NOMORE at {over.load:g}: capacity "
            f"bracketed, stop"
        ),
    )


def next_step(history: Sequence[StepRecord], config: StepPolicyConfig) -> StepDecision:
    """The next action after the latest step in ``history``.

    Far from every threshold the step is the band's cap; once a trend predicts
    where a metric crosses NOMORE, the step closes ``aim`` of the gap (up to
    ``confident_aim`` when the trends agree). Once the median predicted crossing
    is within ``resolution`` the test stops just below it (``finish="extrapolate"``,
    no window over the threshold) or steps onto it (``finish="bracket"``, at most
    one window over, so a reading confirms the threshold). A trend that is
    straight (its proportional and secant crossings agree within ``trust``) is
    believed: the step lands just below its crossing, past the band's cap. A
    step that lands on NOMORE after a wide step is followed by one probe below
    the chord's crossing (see :func:`_probe`), then the test stops.
    """
    current = check_history(history)
    probe = _probe(history, config)
    if probe is not None:
        return probe
    settled = _after_probe(history, config)
    if settled is not None:
        return settled
    unhealthy = unhealthy_decision(history, config)
    if unhealthy is not None:
        return unhealthy
    band = current.band
    governing = current.governing
    if (
        config.confirm_jumps
        and len(history) >= 2
        and band - history[-2].band >= 2
        and history[-2].load != current.load
    ):
        return StepDecision(
            action=StepAction.HOLD,
            load=current.load,
            band=band,
            metric=governing.metric if governing else None,
            reason=f"band jumped {history[-2].band.name} -> {band.name}: confirm for one window",
        )

    ref = config.reference_load
    step = _band_cap(band, config) * ref
    limit = _nearest_limit(history)
    reason = f"{band.name}: step {step / ref:.1%} of reference"
    if limit is not None:
        gap = limit.load - current.load
        if (
            limit.central - current.load <= config.resolution * ref
            # Believing straight trends, it also steps on until the estimator will take
            # the extrapolation (else the capacity would be read as a lower bound).
            and (
                config.trust is None
                or limit.central <= current.load * (1 + 0.8 * EXTRAPOLATION_LIMIT)
            )
            and config.finish == "extrapolate"
        ):
            return StepDecision(
                action=StepAction.STOP,
                load=current.load,
                band=band,
                metric=limit.metric,
                reason=(
                    f"converged: {limit.metric} predicted to cross NOMORE at {limit.central:g}, "
                    f"within {config.resolution:.0%} of reference above {current.load:g}"
                ),
                predicted_limit=limit.central,
            )
        if gap <= config.resolution * ref:
            step = min(step, gap)
            reason = f"{limit.metric} predicted to cross NOMORE at {limit.load:g}: step onto it"
        elif config.trust is not None and limit.straight >= config.trust:
            # A straight trend is worth believing: land just below the crossing, so the
            # next window either finishes the test or brackets the threshold.
            step = min(
                gap - config.landing * ref,
                config.max_jump * ref,
                _others_allow(history, config, limit.metric),
            )
            reason = (
                f"{band.name}; {limit.metric} trend is straight ({limit.straight:.0%} "
                f"agreement), crossing NOMORE at {limit.load:g}: step to just below it"
            )
        else:
            aim = config.aim + (config.confident_aim - config.aim) * limit.agreement
            step = min(step, aim * gap)
            reason = (
                f"{band.name}; {limit.metric} predicted to cross NOMORE at {limit.load:g}: "
                f"close {aim:.0%} of the gap"
            )
    step = max(step, config.min_step * ref)
    target = current.load + step
    decision = StepDecision(
        action=StepAction.INCREASE,
        load=target,
        band=band,
        metric=limit.metric if limit else (governing.metric if governing else None),
        reason=reason,
        predicted_limit=limit.load if limit else None,
    )
    return capped(current, target, config, decision)
