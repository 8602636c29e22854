"""Runbooks: a YAML format for DAGs of templated tasks, its templates, lint and binding.

``spec``, ``templates``, ``predicates``, ``params`` and ``types`` are pure vocabulary
(workflows and policy may import them); ``loader`` and ``lint`` read files (and YAML)
and are for the CLI and activities. Their names are importable from here too, but
loaded only when asked for: importing ``orchestrator.runbook.spec`` (as policy does)
runs this file, and must not pull in the YAML loader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.runbook.findings import Finding, RunbookInvalid
from orchestrator.runbook.params import bind
from orchestrator.runbook.predicates import Predicate, PredicateResult, evaluate
from orchestrator.runbook.spec import Parameter, Runbook, RunbookKind, Steps, Task, Trigger
from orchestrator.runbook.templates import REGISTRY, InlineRestore, Template, template

__all__ = [
    "REGISTRY",
    "Finding",
    "InlineRestore",
    "Parameter",
    "Predicate",
    "PredicateResult",
    "Runbook",
    "RunbookInvalid",
    "RunbookKind",
    "Steps",
    "Task",
    "Template",
    "Trigger",
    "bind",
    "evaluate",
    "lint_file",
    "lint_files",
    "lint_text",
    "load_runbook",
    "nested_runbooks",
    "template",
]

_LINT = {"lint_file", "lint_files", "lint_text", "load_runbook", "nested_runbooks"}

if TYPE_CHECKING:
    from orchestrator.runbook.lint import (
        lint_file,
        lint_files,
        lint_text,
        load_runbook,
        nested_runbooks,
    )


def __getattr__(name: str) -> Any:
    if name in _LINT:
        from orchestrator.runbook import lint

        return getattr(lint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
