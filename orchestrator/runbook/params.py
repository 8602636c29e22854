"""Parameter binding: check the values a run is started with and substitute them.

A string that is exactly ``${params.x}`` becomes the parameter's typed value
(an int stays an int); a reference inside a longer string is replaced by the
value's text. Binding re-validates the whole runbook, so a bound runbook holds
no reference and every typed field has its type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from orchestrator.exceptions import RunbookError
from orchestrator.runbook.spec import Parameter, ParamType, Runbook
from orchestrator.runbook.types import PARAM_REF_RE, format_duration, param_refs_in

__all__ = ["bind", "resolve_parameters", "sample_value", "substitute"]

#: Stand-ins used to type-check template arguments before a run supplies values.
_SAMPLES: dict[ParamType, Any] = {
    ParamType.STRING: "sample",
    ParamType.INT: 1,
    ParamType.FLOAT: 1.0,
    ParamType.BOOL: True,
    ParamType.REGION: "sample-region",
    ParamType.BUILDING: "sample-building",
    ParamType.DURATION: 60.0,
}


def sample_value(param: Parameter) -> Any:
    """The parameter's default, or a well-typed stand-in when it has none."""
    if param.default is not None:
        return param.default
    if param.choices:
        return param.choices[0]
    return _SAMPLES[param.type]


def _text(value: Any, param: Parameter | None) -> str:
    if param is not None and param.type is ParamType.DURATION and isinstance(value, float):
        return format_duration(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def substitute(
    value: Any, values: Mapping[str, Any], params: Mapping[str, Parameter] | None = None
) -> Any:
    """``value`` with every ``${params.x}`` replaced; raises ``KeyError`` on an unknown name."""
    if isinstance(value, str):
        whole = PARAM_REF_RE.fullmatch(value)
        if whole:
            return values[whole[1]]
        return PARAM_REF_RE.sub(lambda m: _text(values[m[1]], (params or {}).get(m[1])), value)
    if isinstance(value, dict):
        return {
            substitute(k, values, params): substitute(v, values, params) for k, v in value.items()
        }
    if isinstance(value, list):
        return [substitute(v, values, params) for v in value]
    return value


def resolve_parameters(runbook: Runbook, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter's value: given ones coerced to their type, defaults for the rest.

    Raises :class:`RunbookError` naming each unknown, missing or ill-typed parameter.
    """
    problems: list[str] = []
    unknown = sorted(set(given) - set(runbook.parameters))
    if unknown:
        known = ", ".join(sorted(runbook.parameters)) or "none"
        problems.append(f"unknown parameter(s) {', '.join(unknown)} (known: {known})")
    values: dict[str, Any] = {}
    for name, param in runbook.parameters.items():
        if name in given and given[name] is not None:
            try:
                values[name] = param.coerce(given[name])
            except ValueError as exc:
                problems.append(f"parameter {name}: {exc}")
        elif param.required:
            problems.append(f"parameter {name} is required ({param.type.value})")
        else:
            values[name] = param.default
    if problems:
        raise RunbookError(f"runbook {runbook.name}: " + "; ".join(problems))
    return values


def bind(runbook: Runbook, given: Mapping[str, Any] | None = None) -> Runbook:
    """A copy of ``runbook`` with parameters substituted and every field re-validated.

    The parameters keep their declarations, with ``default`` set to the bound
    value, so a bound runbook records what it was started with.
    """
    values = resolve_parameters(runbook, given or {})
    raw = runbook.model_dump(mode="python", exclude={"parameters"})
    undeclared = sorted(set(param_refs_in(raw)) - set(values))
    if undeclared:
        raise RunbookError(
            f"runbook {runbook.name}: reference(s) to undeclared parameter(s) "
            + ", ".join(undeclared)
        )
    bound = substitute(raw, values, runbook.parameters)
    bound["parameters"] = {
        name: param.model_copy(update={"default": values[name]})
        for name, param in runbook.parameters.items()
    }
    try:
        return Runbook.model_validate(bound)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RunbookError(
            f"runbook {runbook.name}: after binding parameters, {where}: {first['msg']}"
        ) from None
