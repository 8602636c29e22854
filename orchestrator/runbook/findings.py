"""Lint findings and the error that carries them."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from orchestrator.exceptions import RunbookError
from orchestrator.models import StrictModel

__all__ = ["Finding", "RunbookInvalid"]


class Finding(StrictModel):
    """One problem in a runbook file, located by line and (when it belongs to one) task."""

    file: str
    line: int
    #: the task id, or ``tasks[N]`` when the task has no usable id; None for runbook-level
    task: str | None = None
    #: a stable kind, e.g. ``yaml``, ``schema``, ``cycle``, ``no-restore``
    code: str
    message: str

    def format(self) -> str:
        """``file:line: task: message`` on one line, whatever keys or ids the YAML held."""
        return _one_line(f"{self.file}:{self.line}: {self.task or '-'}: {self.message}")


def _one_line(text: str) -> str:
    # A finding quotes the runbook's own keys and ids, which YAML lets contain newlines
    # and control characters; escaped, a finding stays one line (and one terminal row).
    return "".join(
        repr(ch)[1:-1] if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in text
    )


class RunbookInvalid(RunbookError):
    """A runbook failed lint; ``findings`` says where and why. Travels as ``RunbookError``."""

    def __init__(self, source: str, findings: Sequence[Finding]) -> None:
        self.findings = list(findings)
        first = self.findings[0].format() if self.findings else source
        more = len(self.findings) - 1
        suffix = f" (and {more} more finding{'s' if more != 1 else ''})" if more > 0 else ""
        super().__init__(f"invalid runbook {source}: {first}{suffix}")

    @classmethod
    def type_name(cls) -> str:
        # Retry policies list RunbookError as non-retryable; this is one.
        return RunbookError.__name__
