"""Runs started by hand over HTTP: ``POST /v1/runbooks/{name}/runs``.

The parameters are checked against the runbook's declarations (every bad one named,
in FastAPI's 422 ``detail`` shape) before anything starts. An operator's start is
never held back by a cooldown, but it counts as the last start of its runbook and
parameter set, so an alert right after it does not start a second run.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.contracts.runbook import RunbookRunInput, TriggerContext
from orchestrator.exceptions import RunbookError
from orchestrator.logging import get_logger
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import ParamType, Runbook, RunMode
from orchestrator.triggers.cooldown import Cooldowns
from orchestrator.triggers.rules import manual_workflow_id
from orchestrator.triggers.starter import RunStarter, StartRequest

__all__ = [
    "ManualRun",
    "ManualRunResult",
    "ParameterErrors",
    "UnknownRunbook",
    "check_parameters",
    "region_of",
    "start_manual",
]

log = get_logger(__name__)


class ManualRun(BaseModel):
    """Body of ``POST /v1/runbooks/{name}/runs``."""

    model_config = {"extra": "forbid"}

    parameters: dict[str, Any] = Field(default_factory=dict)
    mode: RunMode | None = None
    requested_by: str = Field(default="api", min_length=1, max_length=200)
    #: the same key while the run is open returns that run instead of starting another
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)


class ManualRunResult(BaseModel):
    runbook: str
    workflow_id: str
    run_id: str
    started: bool
    mode: RunMode
    parameters: dict[str, Any]


class UnknownRunbook(RunbookError):
    def __init__(self, name: str, known: Sequence[str]) -> None:
        super().__init__(f"no runbook named {name!r} (known: {', '.join(known) or 'none'})")
        self.name = name


class ParameterErrors(RunbookError):
    """Manual parameters that do not fit the runbook, in FastAPI's 422 ``detail`` shape."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{e['loc'][-1]}: {e['msg']}" for e in errors))
        self.errors = errors


def region_of(runbook: Runbook, parameters: Mapping[str, Any]) -> str | None:
    """The value of the runbook's region parameter, if it has one."""
    for name, param in runbook.parameters.items():
        if param.type is ParamType.REGION and isinstance(parameters.get(name), str):
            return str(parameters[name])
    return None


def check_parameters(runbook: Runbook, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter's value, or :class:`ParameterErrors` naming each bad one."""
    errors: list[dict[str, Any]] = []

    def error(name: str, kind: str, msg: str) -> None:
        errors.append({"loc": ["body", "parameters", name], "msg": msg, "type": kind})

    for name in sorted(set(given) - set(runbook.parameters)):
        known = ", ".join(sorted(runbook.parameters)) or "none"
        error(name, "extra_forbidden", f"unknown parameter (known: {known})")
    values: dict[str, Any] = {}
    for name, param in runbook.parameters.items():
        if given.get(name) is not None:
            try:
                values[name] = param.coerce(given[name])
            except ValueError as exc:
                error(name, "value_error", str(exc))
        elif param.required:
            error(name, "missing", f"required ({param.type.value})")
        else:
            values[name] = param.default
    if errors:
        raise ParameterErrors(errors)
    return values


async def start_manual(
    runbooks: Mapping[str, Runbook],
    starter: RunStarter,
    cooldowns: Cooldowns,
    name: str,
    body: ManualRun,
) -> ManualRunResult:
    """Start ``name`` as ``body`` asks; :class:`UnknownRunbook` / :class:`ParameterErrors`
    before anything starts."""
    runbook = runbooks.get(name)
    if runbook is None:
        raise UnknownRunbook(name, sorted(runbooks))
    parameters = check_parameters(runbook, body.parameters)
    try:
        bound = bind(runbook, parameters)
    except RunbookError as exc:
        raise ParameterErrors(
            [{"loc": ["body", "parameters"], "msg": str(exc), "type": "value_error"}]
        ) from None
    mode = runbook.mode_for(body.mode)
    key = body.idempotency_key or uuid.uuid4().hex
    request = StartRequest(
        workflow_id=manual_workflow_id(runbook.name, key),
        region=region_of(runbook, parameters),
        input=RunbookRunInput(
            runbook=bound,
            parameters=parameters,
            mode=mode,
            requested_by=body.requested_by,
            trigger=TriggerContext(source="api", key=key, started_at=cooldowns.now()),
        ),
    )
    async with cooldowns.lock(runbook.name, parameters):
        started_at = cooldowns.now()
        result = await starter.start(request)
        if result.started:
            cooldowns.record(runbook.name, parameters, started_at)
    log.info("manual run", runbook=name, workflow_id=result.workflow_id, started=result.started)
    return ManualRunResult(
        runbook=name,
        workflow_id=result.workflow_id,
        run_id=result.run_id,
        started=result.started,
        mode=mode,
        parameters=parameters,
    )
