"""How a pydantic validation error reads to a person: one line naming the field.

Shared vocabulary (like ``exceptions``): the CLI, the trigger server and the Temporal
data converter all describe a bad input the same way.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

__all__ = ["describe_validation"]


def describe_validation(exc: ValidationError) -> str:
    """The first problem as ``field.path: reason`` (plus how many more there are); a
    document that is not an object at all says so."""
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the whole document"
    # pydantic names the model class ("or instance of SolverInstance"): not the user's word
    reason = re.sub(r" or instance of \w+", "", str(first["msg"]).removeprefix("Value error, "))
    text = f"{where}: {reason}".replace("\n", " ")
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more problems)"
    return text
