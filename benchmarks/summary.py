"""The shared summary every benchmark's results JSON carries, and the table built from them.

Each benchmark ends its results document with ``"summary": [claim, ...]``: one row
per claim it makes, computed from what it measured in that run. A claim's ``met``
is not the benchmark's to choose: it must agree with the target applied to the
value (or to the ratio to the baseline), which the model checks on load, so a
hand-edited or stale verdict is refused.

Build claims with :func:`claim` (it computes the ratio and the verdict) and
attach them with :func:`dump`::

    report["summary"] = dump([claim("solve time at 1000x50", 0.42, "s",
                                    Target.below(1.0, "< 1 s"), baseline=2.81)])
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import model_validator

from orchestrator.models import StrictModel

Op = Literal["<", "<=", ">", ">=", "==", "between"]


class Target(StrictModel):
    """A numeric bound with a direction, on the value or on its ratio to the baseline."""

    text: str
    op: Op
    bound: float
    #: the upper end when ``op`` is ``between`` (``bound <= x <= upper``)
    upper: float | None = None
    on: Literal["value", "ratio"] = "value"

    @model_validator(mode="after")
    def _between_has_upper(self) -> Target:
        if (self.op == "between") != (self.upper is not None):
            raise ValueError("'upper' is required with op 'between' and only with it")
        return self

    def holds(self, x: float | None) -> bool:
        """Whether ``x`` meets the bound; a missing or NaN number meets nothing."""
        if x is None or math.isnan(x):
            return False
        if self.op == "<":
            return x < self.bound
        if self.op == "<=":
            return x <= self.bound
        if self.op == ">":
            return x > self.bound
        if self.op == ">=":
            return x >= self.bound
        if self.op == "==":
            return x == self.bound
        assert self.upper is not None
        return self.bound <= x <= self.upper

    # Constructors named for what they say, so call sites read like the target.
    @classmethod
    def below(cls, bound: float, text: str, *, on: Literal["value", "ratio"] = "value") -> Target:
        return cls(text=text, op="<", bound=bound, on=on)

    @classmethod
    def at_most(cls, bound: float, text: str, *, on: Literal["value", "ratio"] = "value") -> Target:
        return cls(text=text, op="<=", bound=bound, on=on)

    @classmethod
    def above(cls, bound: float, text: str, *, on: Literal["value", "ratio"] = "value") -> Target:
        return cls(text=text, op=">", bound=bound, on=on)

    @classmethod
    def at_least(
        cls, bound: float, text: str, *, on: Literal["value", "ratio"] = "value"
    ) -> Target:
        return cls(text=text, op=">=", bound=bound, on=on)

    @classmethod
    def equal(cls, bound: float, text: str) -> Target:
        return cls(text=text, op="==", bound=bound)

    @classmethod
    def between(
        cls, low: float, high: float, text: str, *, on: Literal["value", "ratio"] = "value"
    ) -> Target:
        return cls(text=text, op="between", bound=low, upper=high, on=on)


def ratio(value: float | None, baseline: float | None) -> float | None:
    """value / baseline, or None when either is missing or the baseline is zero."""
    if value is None or baseline is None or baseline == 0:
        return None
    return value / baseline


class Claim(StrictModel):
    """One row of a benchmark's summary."""

    claim: str
    #: None when the benchmark could not measure it (it then meets no target)
    value: float | None
    #: the unit ``value``, ``baseline`` and the target's bound are in; ``bool`` means 1 = yes
    unit: str
    baseline: float | None = None
    #: what the baseline is, e.g. "Kraken fixed policy, same lab"
    baseline_name: str | None = None
    ratio_to_baseline: float | None = None
    target: Target
    met: bool

    @model_validator(mode="after")
    def _consistent(self) -> Claim:
        expected = ratio(self.value, self.baseline)
        if not _same(self.ratio_to_baseline, expected):
            raise ValueError(
                f"{self.claim}: ratio_to_baseline {self.ratio_to_baseline} is not "
                f"value / baseline ({expected})"
            )
        subject = self.value if self.target.on == "value" else self.ratio_to_baseline
        if self.met != self.target.holds(subject):
            raise ValueError(f"{self.claim}: met={self.met} disagrees with the target")
        return self


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _number(x: float | None) -> float | None:
    """A float, with NaN (a measurement that did not happen) as None: JSON has no NaN."""
    return None if x is None or math.isnan(x) else float(x)


def claim(
    name: str,
    value: float | None,
    unit: str,
    target: Target,
    *,
    baseline: float | None = None,
    baseline_name: str | None = None,
) -> Claim:
    """A claim with its ratio and verdict computed from the measured numbers."""
    measured, base = _number(value), _number(baseline)
    r = ratio(measured, base)
    subject = measured if target.on == "value" else r
    return Claim(
        claim=name,
        value=measured,
        unit=unit,
        baseline=base,
        baseline_name=baseline_name,
        ratio_to_baseline=r,
        target=target,
        met=target.holds(subject),
    )


def flag(name: str, ok: bool, text: str = "yes") -> Claim:
    """A yes/no claim (1 = yes) that must be yes."""
    return claim(name, 1.0 if ok else 0.0, "bool", Target.equal(1.0, text))


def dump(claims: Iterable[Claim]) -> list[dict[str, Any]]:
    """The claims as JSON-ready dicts for a results document's ``summary`` field."""
    return [c.model_dump(mode="json") for c in claims]


def load(document: dict[str, Any]) -> list[Claim]:
    """The claims of a results document; raises if it has none or one is inconsistent."""
    if "summary" not in document:
        raise KeyError("no 'summary' in the results document")
    return [Claim.model_validate(c) for c in document["summary"]]
