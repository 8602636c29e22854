"""How every command prints: Rich for people, ``--json`` for programs, one line for errors."""

from __future__ import annotations

import json
import re
import sys
from typing import Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console

console = Console()
err_console = Console(stderr=True)

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, list | tuple):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    return obj


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2, sort_keys=True, default=str) + "\n")


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one clear line to stderr and exit non-zero; never a traceback."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def error_reason(exc: Exception) -> str:
    """One line saying what is wrong: for pydantic, the first problem as ``field.path: reason``
    (plus how many more there are); a document that is not an object at all says so."""
    if not isinstance(exc, ValidationError):
        lines = str(exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the whole document"
    # pydantic names the model class ("or instance of SolverInstance"): not the user's word
    reason = re.sub(r" or instance of \w+", "", str(first["msg"]).removeprefix("Value error, "))
    text = f"{where}: {reason}".replace("\n", " ")
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more problems)"
    return text
