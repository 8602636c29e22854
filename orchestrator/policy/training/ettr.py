"""Checkpoint-interval advice and ETTR estimates: Young, Daly and Meta's model.

Units, everywhere in this module: durations in **seconds**; the failure rate is
given per **1000 node-days** (how RSC-1/RSC-2 report it: 6.50 and 2.34) and a
node is ``gpus_per_node`` GPUs (8 unless told), so a 16,384-GPU job is 2,048
nodes. ``rate_per_s`` is the job's failure rate λ = N_nodes·r_f in failures per
second and ``mtbf_s`` = 1/λ.

Formulas (w = checkpoint blocking cost, u0 = restart cost, Δt = interval):

- Young (1974): τ = √(2·w·M).
- Daly (2006, eq. 37): τ = √(2wM)·[1 + ⅓(w/2M)^½ + (1/9)(w/2M)] − w if w < 2M, else M.
- Meta (Kokolis et al., HPCA'25): E[ETTR] ≈ (1 − λ(u0 + Δt/2)) / (1 + w/Δt), best at
  Δt* = √(2w/λ), which is Young's interval. The form is linear in λ, so it drifts
  from the truth once λ(u0 + Δt) stops being small.
- Exponential (renewal) model, the exact expectation when failures are a Poisson
  process that can also strike during a restart or a checkpoint write:
  ETTR = λ·Δt·e^(−λ·u0) / (e^(λ(Δt+w)) − 1). Its first-order expansion is Meta's form.
"""

from __future__ import annotations

import math

from pydantic import Field, computed_field

from orchestrator.exceptions import InvalidInstance
from orchestrator.models import StrictModel
from orchestrator.policy.training.models import DEFAULT_GPUS_PER_HOST

__all__ = [
    "LINEAR_MODEL_LIMIT",
    "SECONDS_PER_DAY",
    "FailureModel",
    "IntervalAdvice",
    "advise_interval",
    "best_exponential_interval",
    "daly_interval",
    "exponential_ettr",
    "linearity",
    "meta_ettr",
    "meta_optimal_interval",
    "rate_from_interruptions",
    "young_interval",
]

SECONDS_PER_DAY = 86400.0

#: Meta's linear model is trusted while λ(u0 + Δt) stays at or below this. The term it
#: drops is about y²/2 with y = λ(u0 + Δt/2) ≤ λ(u0 + Δt), so at 0.2 it is at most 2%.
LINEAR_MODEL_LIMIT = 0.2


class FailureModel(StrictModel):
    """A job's size and its per-node failure rate."""

    gpus: int = Field(ge=1)
    gpus_per_node: int = Field(default=DEFAULT_GPUS_PER_HOST, ge=1)
    failures_per_1000_node_days: float = Field(ge=0.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def rate_per_s(self) -> float:
        return self.nodes * self.failures_per_1000_node_days / 1000.0 / SECONDS_PER_DAY

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mtbf_s(self) -> float:
        return math.inf if self.rate_per_s == 0 else 1.0 / self.rate_per_s


def rate_from_interruptions(
    interruptions: int, gpus: int, days: float, gpus_per_node: int = DEFAULT_GPUS_PER_HOST
) -> float:
    """Failures per 1000 node-days from a count seen on a job (Llama 3: 419, 16,384, 54)."""
    if interruptions < 0:
        raise InvalidInstance(f"interruptions must be non-negative, got {interruptions}")
    if gpus < 1 or days <= 0 or gpus_per_node < 1:
        raise InvalidInstance("gpus, days and gpus_per_node must be positive")
    return interruptions / (math.ceil(gpus / gpus_per_node) * days) * 1000.0


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    if math.isnan(value) or value < 0 or (value == 0 and not allow_zero):
        need = "non-negative" if allow_zero else "positive"
        raise InvalidInstance(f"{name} must be {need}, got {value}")


def young_interval(cost_s: float, mtbf_s: float) -> float:
    _positive("cost_s", cost_s)
    _positive("mtbf_s", mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s)


def daly_interval(cost_s: float, mtbf_s: float) -> float:
    _positive("cost_s", cost_s)
    _positive("mtbf_s", mtbf_s)
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost_s


def meta_optimal_interval(cost_s: float, rate_per_s: float) -> float:
    _positive("rate_per_s", rate_per_s)
    return young_interval(cost_s, 1.0 / rate_per_s)


def meta_ettr(interval_s: float, cost_s: float, restart_s: float, rate_per_s: float) -> float:
    """Meta's linear E[ETTR], floored at 0 (a negative value means "never finishes")."""
    _positive("interval_s", interval_s)
    _positive("cost_s", cost_s, allow_zero=True)
    _positive("restart_s", restart_s, allow_zero=True)
    _positive("rate_per_s", rate_per_s, allow_zero=True)
    value = (1.0 - rate_per_s * (restart_s + interval_s / 2.0)) / (1.0 + cost_s / interval_s)
    return max(0.0, value)


def exponential_ettr(
    interval_s: float, cost_s: float, restart_s: float, rate_per_s: float
) -> float:
    """Expected ETTR with Poisson failures, restarts and checkpoints that can fail too."""
    _positive("interval_s", interval_s)
    _positive("cost_s", cost_s, allow_zero=True)
    _positive("restart_s", restart_s, allow_zero=True)
    _positive("rate_per_s", rate_per_s, allow_zero=True)
    if rate_per_s == 0:
        return interval_s / (interval_s + cost_s)
    exponent = rate_per_s * (interval_s + cost_s)
    if exponent > 700 or rate_per_s * restart_s > 700:
        return 0.0
    return rate_per_s * interval_s * math.exp(-rate_per_s * restart_s) / math.expm1(exponent)


def best_exponential_interval(cost_s: float, restart_s: float, rate_per_s: float) -> float:
    """The interval maximising :func:`exponential_ettr` (golden section on log Δt).

    The restart cost scales ETTR by a constant, so the optimum does not depend on it.
    """
    _positive("cost_s", cost_s)
    _positive("rate_per_s", rate_per_s)
    young = meta_optimal_interval(cost_s, rate_per_s)
    lo, hi = math.log(young / 20.0), math.log(young * 20.0)
    phi = (math.sqrt(5.0) - 1.0) / 2.0

    def f(x: float) -> float:
        return exponential_ettr(math.exp(x), cost_s, restart_s, rate_per_s)

    a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(80):
        if fa < fb:
            lo, a, fa = a, b, fb
            b = lo + phi * (hi - lo)
            fb = f(b)
        else:
            hi, b, fb = b, a, fa
            a = hi - phi * (hi - lo)
            fa = f(a)
    return math.exp((lo + hi) / 2.0)


def linearity(rate_per_s: float, restart_s: float, interval_s: float) -> float:
    """λ(u0 + Δt): Meta's linear model is good while this is small."""
    return rate_per_s * (restart_s + interval_s)


class IntervalAdvice(StrictModel):
    """Best intervals by each formula, and ETTR at the current and the best interval."""

    rate_per_s: float
    mtbf_s: float
    interval_s: float
    cost_s: float
    restart_s: float
    young_s: float
    daly_s: float
    meta_s: float
    exponential_best_s: float
    meta_ettr: float
    exponential_ettr: float
    meta_ettr_at_best: float
    exponential_ettr_at_best: float
    #: λ(u0 + Δt) at the current interval
    linearity: float
    #: whether Meta's linear model is trusted at the current interval
    meta_model_holds: bool


def advise_interval(
    model: FailureModel, *, interval_s: float, cost_s: float, restart_s: float
) -> IntervalAdvice:
    """Interval advice for a job; needs a non-zero failure rate and checkpoint cost."""
    rate = model.rate_per_s
    if rate == 0:
        raise InvalidInstance("failures_per_1000_node_days must be positive for advice")
    _positive("cost_s", cost_s)
    mtbf = model.mtbf_s
    meta_best = meta_optimal_interval(cost_s, rate)
    exp_best = best_exponential_interval(cost_s, restart_s, rate)
    lin = linearity(rate, restart_s, interval_s)
    return IntervalAdvice(
        rate_per_s=rate,
        mtbf_s=mtbf,
        interval_s=interval_s,
        cost_s=cost_s,
        restart_s=restart_s,
        young_s=young_interval(cost_s, mtbf),
        daly_s=daly_interval(cost_s, mtbf),
        meta_s=meta_best,
        exponential_best_s=exp_best,
        meta_ettr=meta_ettr(interval_s, cost_s, restart_s, rate),
        exponential_ettr=exponential_ettr(interval_s, cost_s, restart_s, rate),
        meta_ettr_at_best=meta_ettr(meta_best, cost_s, restart_s, rate),
        exponential_ettr_at_best=exponential_ettr(exp_best, cost_s, restart_s, rate),
        linearity=lin,
        meta_model_holds=lin <= LINEAR_MODEL_LIMIT,
    )
