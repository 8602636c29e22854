"""How every command prints: Rich for people, ``--json`` for programs, one line for errors."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape

from orchestrator.logging import redact
from orchestrator.validation import describe_validation

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
    """Print one clear line to stderr and exit non-zero; never a traceback (nor a secret)."""
    # Escaped: a message is text, and "[redacted]" or a "[profile]" in it is not markup.
    err_console.print(
        f"[bold red]error:[/] {escape(redact(message))}", highlight=False, soft_wrap=True
    )
    raise typer.Exit(code)


def error_reason(exc: Exception) -> str:
    """One line saying what is wrong with an input (see ``describe_validation``)."""
    if isinstance(exc, ValidationError):
        return describe_validation(exc)
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
