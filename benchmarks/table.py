"""The suite's summary table: every benchmark's claims, from their results JSON.

Pure: reads documents, builds rows, renders them as a Rich table or as Markdown.
What ran and how it ended (:class:`Run`) comes from the runner in ``__main__``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from rich.table import Table

from benchmarks.summary import Claim, load
from orchestrator.models import StrictModel

#: ok: ran and wrote a fresh results document; earlier: not run now, an earlier document
Status = Literal["ok", "crashed", "timed out", "no results", "earlier", "not run"]
FAILED: frozenset[str] = frozenset({"crashed", "timed out", "no results"})
HEADERS = ("benchmark", "claim", "value", "baseline", "ratio", "target", "met")


class Run(StrictModel):
    """One benchmark in this invocation of the suite."""

    name: str
    status: Status
    seconds: float | None = None
    exit_code: int | None = None
    quick: bool | None = None
    #: why it failed (the last line of its output), or a note
    detail: str | None = None
    #: the machine's 1-minute load average when it finished: timings depend on it
    load_average: float | None = None
    #: sha256 of the results file it wrote, so a later table knows it is still that run's
    results_sha256: str | None = None


class Section(StrictModel):
    """A benchmark's run and the claims its results document makes."""

    run: Run
    claims: list[Claim] = []


def read_section(run: Run, results: Path) -> Section:
    """The claims of ``results`` for ``run``; a failed run shows none (its file is stale)."""
    if run.status in FAILED:
        return Section(run=run)
    if results.stem != run.name:
        # e.g. fuzz.py writes a section of chaos.json: that file's summary is chaos's, the
        # benchmark's own claims are in the section that names it
        own = _own_section(results, run.name)
        if own is None:
            note = f"writes into {results.name}, no summary of its own"
            return Section(run=run.model_copy(update={"detail": note}))
        try:
            return Section(run=run, claims=load(own))
        except (KeyError, ValueError, ValidationError) as exc:
            detail = str(exc).splitlines()[0]
            return Section(run=run.model_copy(update={"status": "no results", "detail": detail}))
    if not results.is_file():
        status: Status = "no results" if run.status == "ok" else "not run"
        return Section(run=run.model_copy(update={"status": status}))
    try:
        document: dict[str, Any] = json.loads(results.read_text())
        claims = load(document)
    except (KeyError, ValueError, ValidationError) as exc:
        detail = str(exc).splitlines()[0]
        return Section(run=run.model_copy(update={"status": "no results", "detail": detail}))
    quick = run.quick
    if "quick" in document:
        quick = bool(document["quick"])
    elif "mode" in document:
        quick = document["mode"] == "quick"
    return Section(run=run.model_copy(update={"quick": quick}), claims=claims)


def _own_section(results: Path, name: str) -> dict[str, Any] | None:
    """The section of another benchmark's results file that ``name`` wrote (it says so)."""
    if not results.is_file():
        return None
    document = json.loads(results.read_text())
    for value in document.values():
        if isinstance(value, dict) and value.get("benchmark") == name and "summary" in value:
            return value
    return None


def number(x: float | None, unit: str = "") -> str:
    """A number for the table: 3 significant digits, integers whole, yes/no for ``bool``."""
    if x is None or math.isnan(x):
        return "-"
    if unit == "bool":
        return "yes" if x == 1 else "no"
    if math.isinf(x):
        text = "inf" if x > 0 else "-inf"
    elif x == int(x) and abs(x) < 1e6:
        text = str(int(x))
    elif abs(x) >= 1000:
        text = f"{x:,.0f}"
    else:
        text = f"{x:.3g}"
    return f"{text} {unit}".strip() if unit else text


def run_label(run: Run) -> str:
    """``taiji (quick, 12 s)``: the benchmark, its mode and how long it took."""
    parts = []
    if run.quick is not None:
        parts.append("quick" if run.quick else "full")
    if run.seconds is not None:
        parts.append(f"{run.seconds:.0f} s")
    if run.load_average is not None:
        parts.append(f"load {run.load_average:.1f}")
    if run.status == "earlier":
        parts.append("earlier run")
    return f"{run.name} ({', '.join(parts)})" if parts else run.name


def rows(sections: list[Section]) -> list[tuple[str, ...]]:
    """One row per claim; a benchmark with no claims gets one row saying why."""
    out: list[tuple[str, ...]] = []
    for section in sections:
        label = run_label(section.run)
        if not section.claims:
            why = section.run.status + (f": {section.run.detail}" if section.run.detail else "")
            out.append((label, why, "", "", "", "", "no" if section.run.status in FAILED else ""))
            continue
        for c in section.claims:
            unit = "" if c.unit == "bool" else c.unit
            baseline = number(c.baseline, unit)
            if c.baseline_name and c.baseline is not None:
                baseline = f"{baseline} ({c.baseline_name})"
            ratio = "-" if c.ratio_to_baseline is None else f"{c.ratio_to_baseline:.3g}x"
            out.append(
                (
                    label,
                    c.claim,
                    number(c.value, c.unit),
                    baseline,
                    ratio,
                    c.target.text,
                    "yes" if c.met else "NO",
                )
            )
            label = ""
    return out


def rich_table(sections: list[Section]) -> Table:
    table = Table(title="Benchmarks: each against its baseline, measured in the same run")
    for header in HEADERS:
        table.add_column(header, overflow="fold")
    for row in rows(sections):
        style = "red" if row[-1] == "NO" or row[-1] == "no" else None
        table.add_row(*row, style=style)
    return table


def markdown(sections: list[Section]) -> str:
    """The table as GitHub Markdown, for docs/benchmarks.md."""

    def escape(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in rows(sections)]
    met = sum(c.met for s in sections for c in s.claims)
    total = sum(len(s.claims) for s in sections)
    failed = [s.run.name for s in sections if s.run.status in FAILED]
    lines.append("")
    loads = [s.run.load_average for s in sections if s.run.load_average is not None]
    if loads:
        lines.append(
            f"Load average while measuring: {min(loads):.1f} to {max(loads):.1f} "
            f"on {os.cpu_count()} cores (timings grow with it)."
        )
        lines.append("")
    lines.append(
        f"{met} of {total} claims met"
        + (f"; did not complete: {', '.join(failed)}" if failed else "")
        + "."
    )
    return "\n".join(lines) + "\n"


def summary_document(sections: list[Section], *, generated_at: str) -> dict[str, Any]:
    """benchmarks/results/summary.json: every run and its claims."""
    return {
        "generated_at": generated_at,
        "claims_met": sum(c.met for s in sections for c in s.claims),
        "claims": sum(len(s.claims) for s in sections),
        "failed": [s.run.name for s in sections if s.run.status in FAILED],
        "benchmarks": [
            {
                **s.run.model_dump(mode="json"),
                "summary": [c.model_dump(mode="json") for c in s.claims],
            }
            for s in sections
        ],
    }
