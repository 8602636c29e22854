"""The template registry: what each task template takes, whether it mutates, how it is undone.

A template here is declarative: a name, a pydantic model of its arguments,
whether it changes the fleet (so a drain needs a restore for it), whether it
runs in steps (so ``steps``, ``wait`` and ``gates`` apply), and how its restore
is derived from its arguments when the template can work that out alone.
Executing a template is the workflow's business, not this module's.

A user adds a template with the decorator on its argument model::

    @template("drain_queue", mutates=True, stepped=True,
              restore=lambda a: InlineRestore(template="drain_queue", args={...}))
    class DrainQueueArgs(StrictModel):
        queue: str
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import AnyHttpUrl, BaseModel, Field, model_validator

from orchestrator.models import Fraction, StrictModel
from orchestrator.runbook.load_defaults import (
    DEFAULT_MAX_ERROR_RATE,
    DEFAULT_MAX_UTILIZATION,
    DEFAULT_P99_SLO_MS,
    DEFAULT_SETTLE_S,
    DEFAULT_WINDOW_S,
)
from orchestrator.runbook.predicates import Predicate
from orchestrator.runbook.training_templates import (
    HostsQuarantineArgs,
    HostsReleaseArgs,
    TrainingMoveArgs,
)
from orchestrator.runbook.types import Duration, RunbookRef

__all__ = [
    "REGISTRY",
    "ApprovalArgs",
    "ConfigChangeArgs",
    "DelayArgs",
    "HostsQuarantineArgs",
    "HostsReleaseArgs",
    "InlineRestore",
    "JobUpdateArgs",
    "LoadTestArgs",
    "NotifyArgs",
    "RunbookArgs",
    "ServiceWeightArgs",
    "ShardShiftArgs",
    "Template",
    "TemplateRegistry",
    "TrafficShiftArgs",
    "TrainingMoveArgs",
    "WaitForArgs",
    "template",
]

ArgsT = TypeVar("ArgsT", bound=type[BaseModel])
RestoreFn = Callable[[Any], "InlineRestore | None"]


def _first_line(model: type[BaseModel]) -> str:
    lines = (model.__doc__ or "").strip().splitlines()
    return lines[0] if lines else ""


class InlineRestore(StrictModel):
    """A restore written in place: the template and arguments that undo a task."""

    template: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class Template:
    name: str
    args_model: type[BaseModel]
    mutates: bool
    stepped: bool
    description: str = ""
    #: how the undo is derived from validated args; None means it cannot be
    derive_restore: RestoreFn | None = None
    #: False: it changes the fleet but nothing needs undoing (``training_move``: a job
    #: moved off a building stays on its new hosts), so lint asks for no restore
    needs_restore: bool = True

    def validate_args(self, args: dict[str, Any]) -> BaseModel:
        """The typed arguments; raises pydantic's ``ValidationError`` naming the field."""
        return self.args_model.model_validate(args)

    def restore_for(self, args: dict[str, Any]) -> InlineRestore | None:
        if self.derive_restore is None:
            return None
        return self.derive_restore(self.validate_args(args))


class TemplateRegistry:
    """Templates by name; registering a name twice is refused unless ``replace`` is set."""

    def __init__(self, templates: dict[str, Template] | None = None) -> None:
        self._templates: dict[str, Template] = dict(templates or {})

    def register(self, tmpl: Template, *, replace: bool = False) -> Template:
        if not tmpl.name or not tmpl.name.replace("_", "").isalnum():
            raise ValueError(f"template name {tmpl.name!r}: use letters, digits and '_'")
        if tmpl.name in self._templates and not replace:
            raise ValueError(f"template {tmpl.name!r} is already registered")
        self._templates[tmpl.name] = tmpl
        return tmpl

    def unregister(self, name: str) -> None:
        self._templates.pop(name, None)

    def get(self, name: str) -> Template | None:
        return self._templates.get(name)

    def __getitem__(self, name: str) -> Template:
        found = self._templates.get(name)
        if found is None:
            known = ", ".join(sorted(self._templates))
            raise KeyError(f"unknown template {name!r}; known: {known}")
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._templates

    def __iter__(self) -> Iterator[Template]:
        return iter(sorted(self._templates.values(), key=lambda t: t.name))

    def names(self) -> list[str]:
        return sorted(self._templates)

    def copy(self) -> TemplateRegistry:
        return TemplateRegistry(self._templates)

    def template(
        self,
        name: str,
        *,
        mutates: bool,
        stepped: bool = False,
        restore: RestoreFn | None = None,
        description: str = "",
        replace: bool = False,
    ) -> Callable[[ArgsT], ArgsT]:
        """Decorator on an args model that registers it as template ``name``."""

        def decorate(model: ArgsT) -> ArgsT:
            self.register(
                Template(
                    name=name,
                    args_model=model,
                    mutates=mutates,
                    stepped=stepped,
                    description=description or _first_line(model),
                    derive_restore=restore,
                ),
                replace=replace,
            )
            return model

        return decorate


#: The process-wide registry the loader and lint use unless given another.
REGISTRY = TemplateRegistry()
#: Register a template in :data:`REGISTRY`.
template = REGISTRY.template


# --- built-in templates -------------------------------------------------------


class TrafficShiftArgs(StrictModel):
    """Scale a region's (or one building's) share of user traffic through the rebalancer."""

    region: str | None = Field(default=None, min_length=1)
    #: a building instead of a region: only its share of its region's traffic moves (the
    #: region keeps ``1 - share * (1 - ratio)`` of its normal share)
    building: str | None = Field(default=None, min_length=1)
    #: the target weight as a multiple of the normal share: 0 drains, 1 restores
    ratio: Fraction
    #: limit the shift to one service's traffic; None shifts all user traffic
    service: str | None = None
    #: the weight the restore returns to
    restore_ratio: Fraction = 1.0

    @model_validator(mode="after")
    def _region_or_building(self) -> TrafficShiftArgs:
        if (self.region is None) == (self.building is None):
            raise ValueError("region: give exactly one of region or building")
        return self


class ServiceWeightArgs(StrictModel):
    """Set a service pool's weight in a region (0 = drained, 1 = full)."""

    region: str = Field(min_length=1)
    service: str = Field(min_length=1)
    weight: Fraction
    restore_weight: Fraction = 1.0


class ShardShiftArgs(StrictModel):
    """Move a share of a stateful service's primaries out of (or back into) a region."""

    service: str = Field(min_length=1)
    region: str = Field(min_length=1)
    #: ``out`` moves primaries from ``region`` to ``peers``; ``in`` brings them back
    direction: Literal["out", "in"] = "out"
    #: the other side of the move; empty means every other active region
    peers: list[str] = Field(default_factory=list)
    #: the share of the primaries to move, spread over the steps
    ratio: Fraction = 1.0

    @model_validator(mode="after")
    def _not_to_self(self) -> ShardShiftArgs:
        if self.region in self.peers:
            raise ValueError(f"peers: {self.region} cannot exchange primaries with itself")
        return self


class JobUpdateArgs(StrictModel):
    """Start or stop batch jobs, named or every job of a region."""

    operation: Literal["start", "stop"]
    jobs: list[str] = Field(default_factory=list)
    region: str | None = None

    @model_validator(mode="after")
    def _some_jobs(self) -> JobUpdateArgs:
        if not self.jobs and self.region is None:
            raise ValueError("jobs: name the jobs or give a region whose jobs to update")
        return self


class ConfigChangeArgs(StrictModel):
    """Write a configuration file at the fleet (optimistic on ``expected_rev``)."""

    path: str = Field(min_length=1)
    content: str
    expected_rev: int | None = None


class WaitForArgs(StrictModel):
    """Wait until every predicate holds, polling, up to a timeout."""

    predicates: list[Predicate] = Field(min_length=1)
    poll_interval: Duration = 10.0
    timeout: Duration = 600.0


class ApprovalArgs(StrictModel):
    """Wait for a person to approve; times out to the task's on_failure."""

    approvers: list[str] = Field(min_length=1)
    timeout: Duration = 3600.0
    comment: str = ""


class NotifyArgs(StrictModel):
    """Post a message to a webhook; with no ``url`` there is nobody to tell, and the task is
    skipped, saying so (a runbook's default receiver must not be one the user lacks)."""

    url: AnyHttpUrl | Literal[""]
    message: str = Field(min_length=1)


class RunbookArgs(StrictModel):
    """Run another runbook as a nested task."""

    #: a name (``NAME.yaml`` in the runbooks directory) or a path inside that directory
    runbook: RunbookRef
    parameters: dict[str, Any] = Field(default_factory=dict)
    #: the nested run's mode; ``inherit`` takes the parent's
    mode: Literal["inherit", "drill", "real"] = "inherit"


LoadMetric = Literal["p99_ms", "error_rate", "utilization"]
DEFAULT_LOAD_METRICS: tuple[LoadMetric, ...] = ("p99_ms", "error_rate")


class LoadTestArgs(StrictModel):
    """A live load test of one region, run as a child LiveLoadTestWorkflow."""

    region: str = Field(min_length=1)
    #: which of the lab metrics (p99_ms, error_rate, utilization) to watch
    metrics: list[LoadMetric] = Field(default_factory=lambda: list(DEFAULT_LOAD_METRICS))
    service: str | None = None
    #: stop raising load once utilization reaches this (defaults: LoadTestInput's)
    max_utilization: Fraction = DEFAULT_MAX_UTILIZATION
    p99_slo_ms: float = Field(default=DEFAULT_P99_SLO_MS, gt=0)
    max_error_rate: float = Field(default=DEFAULT_MAX_ERROR_RATE, gt=0, le=1)
    #: health judged per load step, and the settling time before it
    window_s: Duration = DEFAULT_WINDOW_S
    settle_s: Duration = DEFAULT_SETTLE_S
    max_steps: int = Field(default=20, ge=1, le=200)


class DelayArgs(StrictModel):
    """Hold for a fixed time (let caches settle, or stand in for work in a synthetic runbook)."""

    duration: Duration
    #: spend it in an activity instead of a timer: a synthetic task then ends the way a
    #: real one (an activity) does, reported to the workflow at once, while a timer fires
    #: only at the Temporal server's timer resolution (about a second on the dev server)
    as_activity: bool = False


def _traffic_restore(args: TrafficShiftArgs) -> InlineRestore:
    return InlineRestore(
        template="traffic_shift",
        args={
            "region": args.region,
            "building": args.building,
            "ratio": args.restore_ratio,
            "service": args.service,
        },
    )


def _weight_restore(args: ServiceWeightArgs) -> InlineRestore:
    return InlineRestore(
        template="service_weight",
        args={"region": args.region, "service": args.service, "weight": args.restore_weight},
    )


def _job_restore(args: JobUpdateArgs) -> InlineRestore:
    flipped = "start" if args.operation == "stop" else "stop"
    return InlineRestore(
        template="job_update",
        args={"operation": flipped, "jobs": args.jobs, "region": args.region},
    )


def _shard_restore(args: ShardShiftArgs) -> InlineRestore:
    # The executor moves back exactly the shards it recorded moving; ratio bounds it.
    return InlineRestore(
        template="shard_shift",
        args={
            "service": args.service,
            "region": args.region,
            "direction": "in" if args.direction == "out" else "out",
            "peers": args.peers,
            "ratio": args.ratio,
        },
    )


def _load_test_restore(args: LoadTestArgs) -> InlineRestore:
    return InlineRestore(
        template="traffic_shift",
        args={"region": args.region, "ratio": 1.0, "service": args.service},
    )


def _release_restore(args: HostsQuarantineArgs) -> InlineRestore:
    return InlineRestore(
        template="hosts_release", args={"building": args.building, "hosts": args.hosts}
    )


def _quarantine_restore(args: HostsReleaseArgs) -> InlineRestore:
    return InlineRestore(
        template="hosts_quarantine",
        args={"building": args.building, "hosts": args.hosts, "reason": "restored quarantine"},
    )


def _register_builtins(registry: TemplateRegistry) -> None:
    builtins = [
        Template("traffic_shift", TrafficShiftArgs, True, True, "", _traffic_restore),
        Template("service_weight", ServiceWeightArgs, True, True, "", _weight_restore),
        Template("shard_shift", ShardShiftArgs, True, True, "", _shard_restore),
        Template("job_update", JobUpdateArgs, True, False, "", _job_restore),
        # the previous content is only known at run time
        Template("config_change", ConfigChangeArgs, True, False, ""),
        Template("wait_for", WaitForArgs, False, False, ""),
        Template("approval", ApprovalArgs, False, False, ""),
        Template("notify", NotifyArgs, False, False, ""),
        Template("runbook", RunbookArgs, True, False, ""),
        Template("load_test", LoadTestArgs, True, True, "", _load_test_restore),
        Template("delay", DelayArgs, False, False, ""),
        Template("training_move", TrainingMoveArgs, True, False, "", None, needs_restore=False),
        Template("hosts_quarantine", HostsQuarantineArgs, True, False, "", _release_restore),
        Template("hosts_release", HostsReleaseArgs, True, False, "", _quarantine_restore),
    ]
    for tmpl in builtins:
        registry.register(dataclasses.replace(tmpl, description=_first_line(tmpl.args_model)))


_register_builtins(REGISTRY)
