"""Health predicates: pre/post-conditions and step gates of runbook tasks.

A predicate compares one metric of the health report, for one service or the
region as a whole, in a selection of regions, with a number::

    {metric: rps, service: web, region: "${params.region}", op: "<=", value: 1}
    {metric: p99_ms, region: "others-of(${params.region})", op: "<", value: 250}

or the same as one line: ``"rps of web in ${params.region} <= 1"``,
``"p99_ms in others-of(eu-west) < 250"``, ``"error_rate in all < 0.01"``.

The region selector is a region name, ``all``, ``others-of(a, b)`` (every
region except those), or ``region-of(B)``: the region of building ``B`` (a runbook with
a ``building`` parameter only says ``region-of(${params.building})``, and
``others-of(region-of(${params.building}))`` for the rest). A predicate holds when every selected region satisfies
it. Missing data fails the predicate unless ``missing: pass`` says otherwise:
an unobserved region is not a healthy one (Kraken counts it unhealthy), but a
fully drained region legitimately serves nothing, so drain post-conditions opt in.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.models import HealthReport, Metrics, StrictModel
from orchestrator.runbook.types import PARAM_REF_RE, FloatOrRef

__all__ = [
    "METRICS",
    "Observation",
    "Predicate",
    "PredicateResult",
    "RegionReading",
    "evaluate",
    "evaluate_all",
    "parse_predicate",
    "select_regions",
]

MetricName = Literal["rps", "utilization", "p50_ms", "p99_ms", "error_rate"]
Op = Literal["<", "<=", ">", ">=", "==", "!="]

METRICS: tuple[str, ...] = ("rps", "utilization", "p50_ms", "p99_ms", "error_rate")

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}

_SHORTHAND = re.compile(
    r"^\s*(?P<metric>[a-z_0-9]+)"
    r"(?:\s+of\s+(?P<service>[A-Za-z0-9_.${}-]+))?"
    r"(?:\s+in\s+(?P<region>all|others-of\((?:[^()]|\([^()]*\))*\)|region-of\([^()]*\)"
    r"|[A-Za-z0-9_.${}-]+))?"
    r"\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<value>\S+)\s*$"
)
_OTHERS_OF = re.compile(r"^others-of\((?P<names>(?:[^()]|\([^()]*\))*)\)$")
_REGION_OF = re.compile(r"^region-of\((?P<name>[^()]*)\)$")
_REGION_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def parse_predicate(text: str) -> dict[str, Any]:
    """The structured form of a one-line predicate; raises ``ValueError`` saying the grammar."""
    match = _SHORTHAND.match(text)
    if match is None:
        raise ValueError(
            f"cannot read predicate {text!r}: expected "
            "'METRIC [of SERVICE] [in REGION|all|others-of(R)|region-of(B)] OP NUMBER'"
        )
    form: dict[str, Any] = {
        "metric": match["metric"],
        "op": match["op"],
        "value": match["value"],
    }
    if match["service"]:
        form["service"] = match["service"]
    if match["region"]:
        form["region"] = match["region"]
    return form


class Predicate(StrictModel):
    """One comparison of a health metric against a number, over selected regions."""

    metric: MetricName
    #: the service whose metrics count; None means the region's own aggregate
    service: str | None = None
    #: a region name, ``all`` or ``others-of(a, b)``
    region: str = "all"
    op: Op
    value: FloatOrRef
    #: what a region without data means for this predicate
    missing: Literal["fail", "pass"] = "fail"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return parse_predicate(data)
        return data

    @field_validator("region")
    @classmethod
    def _selector(cls, value: str) -> str:
        if PARAM_REF_RE.search(value):
            return value  # checked again once bound
        if value == "all" or _named(value):
            return value
        others = _OTHERS_OF.match(value)
        if others and all(_named(n.strip()) for n in others["names"].split(",")):
            return value
        raise ValueError(
            f"region selector {value!r}: use a region name, 'all', 'others-of(R)' "
            "or 'region-of(BUILDING)'"
        )

    def describe(self) -> str:
        """The one-line form, readable in findings and progress output."""
        subject = self.metric + (f" of {self.service}" if self.service else "")
        return (
            f"{subject} in {self.region} {self.op} {self.value:g}"
            if isinstance(self.value, float)
            else f"{subject} in {self.region} {self.op} {self.value}"
        )


class Observation(StrictModel):
    region: str
    #: the observed value; None when the region reported no data
    value: float | None
    ok: bool


class PredicateResult(StrictModel):
    predicate: str
    ok: bool
    observations: list[Observation] = Field(default_factory=list)
    #: one line naming the regions that failed and their values
    message: str
    #: the comparison in parts, for charts of gate readings (defaults: results recorded
    #: before they were kept still parse)
    metric: str = ""
    service: str | None = None
    op: str = ""
    threshold: float | None = None


class RegionReading(StrictModel):
    """A region's own p99 and error rate when a gate was read: what its chart draws."""

    p99_ms: float | None = None
    error_rate: float | None = None

    @classmethod
    def of(cls, metrics: Metrics) -> RegionReading:
        if metrics.missing:
            return cls()
        return cls(p99_ms=metrics.p99_ms, error_rate=metrics.error_rate)


def _named(name: str) -> bool:
    """A region name or ``region-of(BUILDING)``."""
    inner = _REGION_OF.match(name)
    return bool(_REGION_NAME.match(inner["name"].strip() if inner else name))


def _region(name: str, buildings: Mapping[str, str]) -> str:
    inner = _REGION_OF.match(name.strip())
    if inner is None:
        return name.strip()
    building = inner["name"].strip()
    if building not in buildings:
        known = ", ".join(sorted(buildings)) or "none"
        raise ValueError(f"region-of: unknown building {building!r} (known: {known})")
    return buildings[building]


def select_regions(
    selector: str, regions: Sequence[str], buildings: Mapping[str, str] | None = None
) -> list[str]:
    """The regions a selector names, given every region of the fleet (and every building's
    region, for ``region-of``).

    A single name need not be in ``regions`` (a drained region may have left the
    active set); ``others-of`` names that are unknown are simply not excluded.
    """
    if PARAM_REF_RE.search(selector):
        raise ValueError(f"region selector {selector!r} still holds an unbound parameter")
    if selector == "all":
        return list(regions)
    others = _OTHERS_OF.match(selector)
    if others:
        excluded = {_region(n, buildings or {}) for n in others["names"].split(",")}
        return [r for r in regions if r not in excluded]
    return [_region(selector, buildings or {})]


def _metrics_for(health: HealthReport, region: str, service: str | None) -> Metrics:
    if service is None:
        return health.region(region)
    for entry in health.services:
        if entry.region == region and entry.service == service:
            return entry
    return Metrics()


def evaluate(
    predicate: Predicate,
    health: HealthReport,
    regions: Sequence[str],
    buildings: Mapping[str, str] | None = None,
) -> PredicateResult:
    """Whether ``predicate`` holds in ``health``; ``regions`` is every region of the fleet,
    ``buildings`` every building's region."""
    if isinstance(predicate.value, str):
        raise ValueError(f"predicate {predicate.describe()!r} still holds an unbound parameter")
    compare = _OPS[predicate.op]
    observations: list[Observation] = []
    for region in select_regions(predicate.region, regions, buildings):
        metrics = _metrics_for(health, region, predicate.service)
        value = getattr(metrics, predicate.metric)
        if value is None or metrics.missing:
            observations.append(
                Observation(region=region, value=None, ok=predicate.missing == "pass")
            )
        else:
            observations.append(
                Observation(region=region, value=value, ok=compare(value, predicate.value))
            )
    failed = [o for o in observations if not o.ok]
    text = predicate.describe()
    if not observations:
        message = f"{text}: no region selected"
    elif not failed:
        message = f"{text}: holds"
    else:
        shown = ", ".join(
            f"{o.region}={'no data' if o.value is None else f'{o.value:g}'}" for o in failed
        )
        message = f"{text}: fails in {shown}"
    return PredicateResult(
        predicate=text,
        ok=bool(observations) and not failed,
        observations=observations,
        message=message,
        metric=predicate.metric,
        service=predicate.service,
        op=predicate.op,
        threshold=predicate.value,
    )


def evaluate_all(
    predicates: Sequence[Predicate],
    health: HealthReport,
    regions: Sequence[str],
    buildings: Mapping[str, str] | None = None,
) -> list[PredicateResult]:
    """Every predicate's result, in order (callers decide whether one failure stops them)."""
    return [evaluate(p, health, regions, buildings) for p in predicates]
