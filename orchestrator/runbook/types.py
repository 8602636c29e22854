"""Small value types shared by the runbook models: durations and parameter references.

A runbook as written may hold ``${params.NAME}`` where a value goes; the typed
fields therefore accept either their value or such a reference, and binding
(:mod:`orchestrator.runbook.params`) replaces every reference before a run.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints

__all__ = [
    "PARAM_REF_PATTERN",
    "PARAM_REF_RE",
    "Duration",
    "DurationOrRef",
    "FloatOrRef",
    "MAX_DURATION_S",
    "ParamRef",
    "RunbookRef",
    "check_runbook_ref",
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

#: The longest duration a runbook, a template argument or a parameter may hold: 30 days.
#: Every timer a run sets comes from one of these, and Temporal (and Python's datetime)
#: refuse timers far longer; a bound well inside theirs keeps a typo such as ``9999999d``
#: a lint finding instead of a run that cannot set its timer.
MAX_DURATION_S = 30 * 86400.0
_FORMS = "use seconds or a string like '30s', '5m', '1h30m'"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g}d" if seconds % 86400 == 0 else format_duration(seconds)


def _bounded(seconds: float, value: Any, maximum: float) -> float:
    if not math.isfinite(seconds):
        raise ValueError(f"{_shown(value)} is not a finite duration")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds > maximum:
        raise ValueError(f"{_shown(value)} is longer than the maximum duration {_days(maximum)}")
    return seconds + 0.0  # -0.0 reads as 0


def parse_duration(value: Any, maximum: float = MAX_DURATION_S) -> float:
    """Seconds from a number of seconds or a string such as ``90s``, ``5m``, ``1h30m``.

    Refuses negative, non-finite (``inf``, ``nan``) and longer-than-``maximum`` values.
    Raises ``ValueError`` with the reason, so pydantic reports the field.
    """
    if isinstance(value, bool):
        raise ValueError(f"a duration is a number of seconds or a string: {_FORMS}")
    if isinstance(value, int):
        # float() of a huge int raises OverflowError: compare as ints first.
        return _bounded(float(max(-1, min(value, int(maximum) + 1))), value, maximum)
    if isinstance(value, float):
        return _bounded(value, value, maximum)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if text and _DURATION_PART.sub("", text) == "":
            parts = _DURATION_PART.findall(text)
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
            # Digits alone are finite: a sum that overflows a float is just too long.
            return _bounded(seconds if math.isfinite(seconds) else 2 * maximum, value, maximum)
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            return _bounded(seconds, value, maximum)
    raise ValueError(f"{_shown(value)} is not a duration: {_FORMS}")


def format_duration(seconds: float) -> str:
    """The short human form of a duration, e.g. ``1h5m`` or ``42s``."""
    whole = round(seconds)
    if abs(seconds - whole) > 1e-9 and seconds < 60:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if v]
    return "".join(parts) or "0s"


def check_runbook_ref(value: str) -> str:
    """``value`` if it names a runbook inside the runbooks directory: a name, or a path
    relative to that directory that never climbs out of it."""
    parts = value.replace("\\", "/").split("/")
    if value.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", value) or ".." in parts:
        raise ValueError(
            f"{_shown(value)}: name a runbook in the runbooks directory (no absolute path, no '..')"
        )
    if "\x00" in value:
        raise ValueError("a runbook reference cannot hold a NUL character")
    return value


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


#: Seconds from 0 to :data:`MAX_DURATION_S`, written as a number or '30s', '5m', '1h30m'.
Duration = Annotated[float, BeforeValidator(parse_duration)]
#: A string that is exactly ``${params.NAME}``.
ParamRef = Annotated[str, StringConstraints(pattern=PARAM_REF_PATTERN)]
#: A duration, or a reference bound later.
DurationOrRef = Annotated[ParamRef | Duration, Field(union_mode="left_to_right")]
#: Another runbook: a name (``NAME.yaml`` in the runbooks directory) or a path inside it.
RunbookRef = Annotated[str, Field(min_length=1), AfterValidator(check_runbook_ref)]
#: A number, or a reference bound later.
FloatOrRef = Annotated[ParamRef | float, Field(union_mode="left_to_right")]
