"""Runbook lint, restores: every mutating drain task must say how it is undone.

A drain or drill task on a template that changes the fleet needs a restore: a task id in
the paired restore runbook (which must have that task), an inline template call (whose
arguments must validate), or ``auto`` (only where the template can derive its restore).
``undoes`` must name a task of the same runbook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from orchestrator.runbook.loader import Parsed, validation_findings
from orchestrator.runbook.spec import RunbookKind
from orchestrator.runbook.templates import InlineRestore, TemplateRegistry

__all__ = ["check_restores"]

_DRAIN_KINDS = (RunbookKind.DRAIN, RunbookKind.DRILL)

#: a value with every parameter reference replaced by a sample of the parameter's type
Sampled = Callable[[Any], Any]


def check_restores(
    p: Parsed,
    registry: TemplateRegistry,
    sampled: Sampled,
    paired_ref: object,
    paired: Parsed | None,
) -> None:
    """Each task's restore against its template and ``paired``, the restore runbook that
    ``paired_ref`` (the runbook's ``restore_runbook``) names, when it could be read."""
    kind = (p.data or {}).get("kind")
    by_id = {task.id: task for _, task in p.tasks}
    paired_ids = {t.id for _, t in paired.tasks} if paired is not None else set()
    for index, task in p.tasks:
        tmpl = registry.get(task.template)
        where = ("tasks", index, "restore")
        if task.undoes is not None:
            target = by_id.get(task.undoes)
            if target is None:
                p.add(
                    ("tasks", index, "undoes"),
                    "restore-missing",
                    f"undoes: no task {task.undoes!r} in this runbook",
                )
        restore = task.restore
        if restore is None:
            if (
                kind in _DRAIN_KINDS
                and tmpl is not None
                and tmpl.mutates
                and tmpl.needs_restore
                and not task.undoes
            ):
                p.add(
                    ("tasks", index, "template"),
                    "no-restore",
                    f"{tmpl.name} changes the fleet but the task has no restore "
                    "(a task id in the restore runbook, an inline spec, or 'auto')",
                )
        elif restore == "auto":
            if tmpl is not None and tmpl.derive_restore is None:
                p.add(
                    where,
                    "no-restore",
                    f"restore: auto, but template {tmpl.name} cannot derive its restore",
                )
        elif isinstance(restore, InlineRestore):
            _check_inline_restore(p, registry, sampled, index, restore)
        elif paired_ref is None:
            p.add(
                where,
                "restore-missing",
                f"restore: {restore!r} names a restore task but restore_runbook is not set",
            )
        elif paired is not None and restore not in paired_ids:
            p.add(
                where,
                "restore-missing",
                f"restore: no task {restore!r} in restore runbook {paired_ref!r}",
            )


def _check_inline_restore(
    p: Parsed, registry: TemplateRegistry, sampled: Sampled, index: int, restore: InlineRestore
) -> None:
    where = ("tasks", index, "restore")
    tmpl = registry.get(restore.template)
    if tmpl is None:
        p.add(
            (*where, "template"),
            "unknown-template",
            f"restore.template: unknown template {restore.template!r}",
        )
        return
    args = sampled(restore.args)
    try:
        tmpl.validate_args(args)
    except ValidationError as exc:
        validation_findings(p, exc, args, (*where, "args"), "bad-args")
