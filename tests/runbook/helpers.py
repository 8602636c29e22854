"""Builders for runbook texts used across the runbook tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from orchestrator.runbook import Finding, lint_text

HEADER = """\
name: sample
kind: drain
parameters:
  region: {type: region}
  slo: {type: float, default: 250}
"""


def runbook_text(tasks: str, header: str = HEADER) -> str:
    """A runbook text: ``header`` followed by a ``tasks:`` block (dedented)."""
    return header + "tasks:\n" + textwrap.indent(textwrap.dedent(tasks).strip("\n"), "  ") + "\n"


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """The 1-based line of the ``occurrence``-th line containing ``needle``."""
    seen = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{needle!r} not in text")


def lint(text: str, base_dir: Path | None = None) -> list[Finding]:
    return lint_text(text, "rb.yaml", base_dir=base_dir)


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]
