"""Runbooks: a YAML format for DAGs of templated tasks, its templates, lint and binding.

``spec``, ``templates``, ``predicates``, ``params`` and ``types`` are pure vocabulary
(workflows may import them); ``loader`` and ``lint`` read files and are for the CLI
and activities.
"""

from __future__ import annotations

from orchestrator.runbook.findings import Finding, RunbookInvalid
from orchestrator.runbook.lint import (
    lint_file,
    lint_files,
    lint_text,
    load_runbook,
    nested_runbooks,
)
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
