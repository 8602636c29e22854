"""Small value types shared by the runbook models: durations and parameter references.

A runbook as written may hold ``${params.NAME}`` where a value goes; the typed
fields therefore accept either their value or such a reference, and binding
(:mod:`orchestrator.runbook.params`) replaces every reference before a run.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints

__all__ = [
    "PARAM_REF_PATTERN",
    "PARAM_REF_RE",
    "Duration",
    "DurationOrRef",
    "FloatOrRef",
    "ParamRef",
    "format_duration",
    "parse_duration",
    "param_refs_in",
]

#: One reference to a runbook parameter inside a string.
PARAM_REF_RE = re.compile(r"\$\{params\.([A-Za-z_][A-Za-z0-9_]*)\}")
#: A string that is exactly one reference (keeps the parameter's type when bound).
PARAM_REF_PATTERN = r"^\$\{params\.[A-Za-z_][A-Za-z0-9_]*\}$"

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds from a number of seconds or a string such as ``90s``, ``5m``, ``1h30m``.

    Raises ``ValueError`` naming the accepted forms, so pydantic reports the field.
    """
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '30s', '5m', '1h30m'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if text and _DURATION_PART.sub("", text) == "":
            return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            if seconds >= 0:
                return seconds
    raise ValueError(
        f"{value!r} is not a duration: use seconds or a string like '30s', '5m', '1h30m'"
    )


def format_duration(seconds: float) -> str:
    """The short human form of a duration, e.g. ``1h5m`` or ``42s``."""
    whole = round(seconds)
    if abs(seconds - whole) > 1e-9 and seconds < 60:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join(parts) or "0s"


def param_refs_in(value: Any) -> list[str]:
    """Names of every parameter referenced anywhere inside ``value`` (strings, lists, dicts)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.extend(PARAM_REF_RE.findall(item))
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


#: Non-negative seconds, written as a number or '30s', '5m', '1h30m'.
Duration = Annotated[float, BeforeValidator(parse_duration)]
#: A string that is exactly ``${params.NAME}``.
ParamRef = Annotated[str, StringConstraints(pattern=PARAM_REF_PATTERN)]
#: A duration, or a reference bound later.
DurationOrRef = Annotated[ParamRef | Duration, Field(union_mode="left_to_right")]
#: A number, or a reference bound later.
FloatOrRef = Annotated[ParamRef | float, Field(union_mode="left_to_right")]
