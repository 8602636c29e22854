"""The runbook format: a named DAG of templated tasks, with parameters and triggers.

These models are pure vocabulary (no I/O), so workflows can carry them. A runbook
as written may reference its parameters as ``${params.NAME}``;
:func:`orchestrator.runbook.params.bind` substitutes them before a run.
Cross-field checks that need the template registry or other files (unknown
templates, restores in the paired runbook, cycles) live in
:mod:`orchestrator.runbook.lint`, which maps each finding to its YAML line.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from orchestrator.models import StrictModel
from orchestrator.runbook.predicates import Predicate
from orchestrator.runbook.templates import InlineRestore
from orchestrator.runbook.types import DurationOrRef, RunbookRef, parse_duration

__all__ = [
    "FRACTION_TOLERANCE",
    "MAX_NESTING_DEPTH",
    "LabelMatcher",
    "OnFailure",
    "ParamType",
    "Parameter",
    "Runbook",
    "RunbookKind",
    "RunMode",
    "Steps",
    "Task",
    "TaskId",
    "Trigger",
    "When",
]

FRACTION_TOLERANCE = 1e-6
#: How many levels of nested runbooks a run may start below itself (a run a person, an
#: alert or a schedule started is level 0). Lint refuses a deeper chain, and a nested run
#: deeper than this fails its task at run time, whatever the runbooks it was given.
MAX_NESTING_DEPTH = 4

TaskId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=80)]
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=80)]


class RunbookKind(StrEnum):
    DRAIN = "drain"
    RESTORE = "restore"
    DRILL = "drill"
    RECOVERY = "recovery"


class ParamType(StrEnum):
    STRING = "string"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    REGION = "region"
    #: a building of the fleet (its topology's ``buildings``); named like a region
    BUILDING = "building"
    DURATION = "duration"


OnFailure = Literal["rollback", "pause", "continue"]
When = Literal["drill", "real", "always"]
RunMode = Literal["drill", "real"]

#: a region name: a letter or digit, then letters, digits, ``_`` or ``-`` (at most 63,
#: like a DNS label), dotted parts allowed but never ``..``: it goes into fleet URLs,
#: search attributes and workflow ids
_REGION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}(\.[A-Za-z0-9_-]{1,63}){0,3}")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class Parameter(StrictModel):
    type: ParamType = ParamType.STRING
    description: str = ""
    #: absent means the parameter is required
    default: Any = None
    #: allowed values, when the set is closed
    choices: list[Any] | None = None

    @property
    def required(self) -> bool:
        return self.default is None

    def coerce(self, value: Any) -> Any:
        """``value`` as this parameter's type (strings from a CLI or alert labels are parsed).

        Raises ``ValueError`` with the reason.
        """
        result = self._convert(value)
        if self.choices is not None and result not in self.choices:
            raise ValueError(f"{result!r} is not one of {self.choices}")
        return result

    def _convert(self, value: Any) -> Any:
        kind = self.type
        if kind in (ParamType.STRING, ParamType.REGION, ParamType.BUILDING):
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError(f"expected a {kind.value}, got {type(value).__name__}")
            text = str(value)
            if kind is not ParamType.STRING and not _REGION_NAME.fullmatch(text):
                raise ValueError(f"{text[:80]!r} is not a {kind.value} name")
            return text
        if kind is ParamType.BOOL:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
                return value.lower() in _TRUE
            raise ValueError(f"expected a bool, got {value!r}")
        if kind is ParamType.DURATION:
            return parse_duration(value)
        if isinstance(value, bool):
            raise ValueError(f"expected a {kind.value}, got a bool")
        try:
            number = float(value) if kind is ParamType.FLOAT else int(str(value), 10)
        except (TypeError, ValueError):
            raise ValueError(f"expected a {kind.value}, got {value!r}") from None
        if isinstance(number, float) and not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        return number

    @model_validator(mode="after")
    def _default_fits(self) -> Parameter:
        if self.default is not None:
            try:
                self.default = self.coerce(self.default)
            except ValueError as exc:
                raise ValueError(f"default: {exc}") from None
        return self


_STEPS_SHORTHAND = re.compile(
    r"^\s*(?:(?P<first>\d+(?:\.\d+)?)%\s*\+\s*)?(?P<count>\d+)\s*[x×]\s*(?P<size>\d+(?:\.\d+)?)%\s*$"
)


class Steps(StrictModel):
    """How a stepped task is paced: ``count`` steps of ``size`` (after an optional small
    ``first`` step), or an explicit list of step ``sizes``; every form covers the whole move.

    Shorthand: ``"5 x 20%"`` or ``"5% + 5 x 20%"`` (a small first step, then 20% steps;
    the last step takes what is left).
    """

    count: int | None = Field(default=None, ge=1, le=1000)
    size: float | None = Field(default=None, gt=0.0, le=1.0)
    first: float | None = Field(default=None, gt=0.0, le=1.0)
    sizes: list[Annotated[float, Field(gt=0.0, le=1.0)]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, int) and not isinstance(data, bool):
            return {"count": data, "size": 1.0 / data} if data > 0 else {"count": data}
        if isinstance(data, str):
            match = _STEPS_SHORTHAND.match(data)
            if match is None:
                raise ValueError(f"cannot read steps {data!r}: use '5 x 20%' or '5% + 5 x 20%'")
            form: dict[str, Any] = {
                "count": int(match["count"]),
                "size": float(match["size"]) / 100,
            }
            if match["first"]:
                form["first"] = float(match["first"]) / 100
            return form
        return data

    @model_validator(mode="after")
    def _covers_the_move(self) -> Steps:
        if self.sizes is not None:
            if self.count is not None or self.size is not None or self.first is not None:
                raise ValueError("steps: give either sizes or count/size/first, not both")
            total = sum(self.sizes)
            if abs(total - 1.0) > FRACTION_TOLERANCE:
                raise ValueError(f"steps.sizes sum to {total:g}, not 1")
            return self
        if self.count is None or self.size is None:
            raise ValueError("steps: give count and size (e.g. 5 x 20%) or a list of sizes")
        covered = (self.first or 0.0) + self.count * self.size
        if covered < 1.0 - FRACTION_TOLERANCE:
            raise ValueError(f"steps cover only {covered:.0%} of the move")
        return self

    def progress(self) -> list[float]:
        """The cumulative share of the move done after each step; the last is exactly 1."""
        sizes = list(self.sizes) if self.sizes is not None else []
        if self.sizes is None:
            assert self.count is not None and self.size is not None
            sizes = ([self.first] if self.first else []) + [self.size] * self.count
        points: list[float] = []
        done = 0.0
        for size in sizes:
            if done >= 1.0 - FRACTION_TOLERANCE:
                break
            # rounding keeps 0.85 from printing as 0.8500000000000001 in plans
            done = min(1.0, round(done + size, 9))
            points.append(done)
        points[-1] = 1.0
        return points


_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"?(.*?)"?\s*$')


class LabelMatcher(StrictModel):
    """An Alertmanager-style matcher: ``severity="critical"``, ``region=~"eu-.*"``."""

    label: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    op: Literal["=", "!=", "=~", "!~"] = "="
    value: str

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            match = _MATCHER.match(data)
            if match is None:
                raise ValueError(f'cannot read matcher {data!r}: use label="value" or label=~"re"')
            return {"label": match[1], "op": match[2], "value": match[3]}
        return data

    @model_validator(mode="after")
    def _regex_compiles(self) -> LabelMatcher:
        if self.op in ("=~", "!~"):
            try:
                re.compile(self.value)
            except re.error as exc:
                raise ValueError(f"value: bad regular expression: {exc}") from None
        return self

    def matches(self, labels: dict[str, str]) -> bool:
        actual = labels.get(self.label, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        # Alertmanager anchors regex matchers at both ends.
        found = re.fullmatch(self.value, actual) is not None
        return found if self.op == "=~" else not found


class Trigger(StrictModel):
    """Which alerts start this runbook, and how their labels fill its parameters."""

    alertname: str = Field(min_length=1)
    matchers: list[LabelMatcher] = Field(default_factory=list)
    #: parameter name -> the alert label whose value fills it
    parameters: dict[str, str] = Field(default_factory=dict)
    #: minimum time between two runs started by this trigger
    cooldown: DurationOrRef = 0.0

    @field_validator("matchers", mode="before")
    @classmethod
    def _mapping_form(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return [{"label": k, "op": "=", "value": v} for k, v in value.items()]
        return value

    def matches(self, labels: dict[str, str]) -> bool:
        return labels.get("alertname") == self.alertname and all(
            m.matches(labels) for m in self.matchers
        )

    def parameters_from(self, labels: dict[str, str]) -> dict[str, str]:
        """Parameter values taken from an alert's labels (absent labels are left out)."""
        return {p: labels[label] for p, label in self.parameters.items() if label in labels}


class Task(StrictModel):
    id: TaskId
    template: str = Field(min_length=1)
    description: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    #: must be done (or skipped) before this task starts; a failure blocks it
    depends_on: list[str] = Field(default_factory=list)
    #: must have finished, however, before this task starts; may be overridden in a disaster
    weak_depends_on: list[str] = Field(default_factory=list)
    pre_conditions: list[Predicate] = Field(default_factory=list)
    post_conditions: list[Predicate] = Field(default_factory=list)
    steps: Steps | None = None
    #: time between two steps, before the gates are read
    wait: DurationOrRef = 0.0
    #: checked after every step; a failure triggers on_failure
    gates: list[Predicate] = Field(default_factory=list)
    #: a failing gate holds the task at its step and is read again after ``wait``, up to
    #: this many times in a row, before the failure counts (Flagger's ``threshold``): a
    #: transient, such as the receiving region warming its caches, passes; an overload
    #: that lasts still triggers on_failure
    gate_holds: int = Field(default=0, ge=0, le=10)
    timeout: DurationOrRef | None = None
    expected_duration: DurationOrRef | None = None
    on_failure: OnFailure = "rollback"
    when: When = "always"
    #: the undo: a task id in the paired restore runbook, an inline spec, or ``auto``
    #: (derived by the template)
    restore: Literal["auto"] | TaskId | InlineRestore | None = Field(
        default=None, union_mode="left_to_right"
    )
    #: this task undoes another task of the same runbook (e.g. a drill's restore phase)
    undoes: TaskId | None = None

    @field_validator("depends_on", "weak_depends_on", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def active_in(self, mode: RunMode) -> bool:
        return self.when in ("always", mode)

    @property
    def dependencies(self) -> list[str]:
        return [*self.depends_on, *self.weak_depends_on]


class Runbook(StrictModel):
    name: Name
    kind: RunbookKind
    description: str = ""
    parameters: dict[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], Parameter
    ] = Field(default_factory=dict)
    #: the paired restore runbook (a name next to this file, or a path relative to it)
    restore_runbook: RunbookRef | None = None
    tasks: list[Task] = Field(min_length=1)
    triggers: list[Trigger] = Field(default_factory=list)

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    @property
    def task_ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    def mode_for(self, requested: RunMode | None = None) -> RunMode:
        """A drill runbook always runs as a drill; others run as asked (real by default)."""
        if self.kind == RunbookKind.DRILL:
            return "drill"
        return requested or "real"

    def active_tasks(self, mode: RunMode) -> list[Task]:
        return [t for t in self.tasks if t.active_in(mode)]

    def required_parameters(self) -> list[str]:
        return [name for name, p in self.parameters.items() if p.required]
