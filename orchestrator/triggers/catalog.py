"""The runbooks a trigger server serves: every runbook file of a directory, linted."""

from __future__ import annotations

from pathlib import Path

from orchestrator.exceptions import ConfigError, RunbookError
from orchestrator.runbook.lint import load_runbook
from orchestrator.runbook.spec import Runbook

__all__ = ["load_runbooks"]


def load_runbooks(directory: Path) -> list[Runbook]:
    """Every ``*.yaml``/``*.yml`` runbook in ``directory``, each only if it lints clean.

    Raises :class:`RunbookInvalid` for the first bad file, :class:`ConfigError` when
    the directory is missing, and :class:`RunbookError` when two files share a name:
    a server that silently skipped a runbook would silently skip its alerts.
    """
    if not directory.is_dir():
        raise ConfigError("--runbooks", f"{directory} is not a directory")
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    runbooks: list[Runbook] = []
    seen: dict[str, Path] = {}
    for path in files:
        runbook = load_runbook(path)
        if runbook.name in seen:
            raise RunbookError(
                f"runbook name {runbook.name!r} is used by {seen[runbook.name]} and {path}"
            )
        seen[runbook.name] = path
        runbooks.append(runbook)
    return runbooks
