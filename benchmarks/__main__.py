"""Run every benchmark and print one summary table: ``make bench`` / ``python -m benchmarks``.

Each ``benchmarks/<name>.py`` runs as its own process (``--quick`` passed on to
those that take it), so one that crashes or hangs does not take the others with
it: it becomes a "crashed" or "timed out" row and the suite exits non-zero at
the end. A hung benchmark's whole process group gets SIGINT (so its ``finally``
blocks stop the labs and servers it started), then SIGKILL.

Then every ``benchmarks/results/<name>.json`` is read and its ``summary`` claims
shown in one table (benchmark, claim, value, baseline, ratio, target, met),
also written to ``benchmarks/results/summary.json`` and, as Markdown,
``benchmarks/results/summary.md``. A benchmark not run this time (``--only``)
shows its earlier results, marked so. ``--doc docs/benchmarks.md`` (what
``make bench`` passes) also pastes that Markdown between the file's
``<!-- bench:start -->`` and ``<!-- bench:end -->`` lines, so the docs show the
latest table.

    python -m benchmarks [--quick] [--only NAME ...] [--timeout S] [--table-only] [--doc FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from rich.console import Console

from benchmarks.table import FAILED, Run, Section, Status, markdown, read_section, rich_table
from benchmarks.table import summary_document as build_summary

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: modules in benchmarks/ that are the suite's machinery, not benchmarks
SUPPORT = frozenset({"__init__", "__main__", "summary", "table"})
DEFAULT_TIMEOUT_S = 900.0
#: after SIGINT, how long a timed-out benchmark gets to clean up before SIGKILL
GRACE_S = 20.0
TABLE_START = "<!-- bench:start -->"
TABLE_END = "<!-- bench:end -->"


def discover(folder: Path = HERE) -> dict[str, Path]:
    """name -> script, for every ``<folder>/<name>.py`` that is a benchmark."""
    return {
        p.stem: p
        for p in sorted(folder.glob("*.py"))
        if p.stem not in SUPPORT and not p.stem.startswith("_")
    }


def supports_quick(script: Path) -> bool:
    """Whether the benchmark declares a ``--quick`` flag (its argparse names it)."""
    return '"--quick"' in script.read_text()


_RESULTS_PATH = re.compile(r'"results"\s*/\s*"([\w.-]+)\.json"')


def results_name(script: Path) -> str:
    """The stem of the results file the benchmark writes: the one its source names
    (``... / "results" / "chaos.json"``), else its own name."""
    found = _RESULTS_PATH.search(script.read_text())
    return found.group(1) if found else script.stem


_SUITE_TIMEOUT = re.compile(r"^SUITE_TIMEOUT_S\s*=\s*([0-9][0-9_.]*)", re.MULTILINE)


def timeout_for(script: Path, default_s: float) -> float:
    """``default_s``, or more where the benchmark declares it needs more
    (``SUITE_TIMEOUT_S = 1800.0`` at the top level of its source)."""
    found = _SUITE_TIMEOUT.search(script.read_text())
    return max(default_s, float(found.group(1))) if found else default_s


def command(script: Path, quick: bool) -> list[str]:
    return [sys.executable, str(script), *(["--quick"] if quick and supports_quick(script) else [])]


def classify(*, exit_code: int | None, timed_out: bool, fresh_results: bool) -> Status:
    """How a run ended. Fresh results count even with a non-zero exit: several benchmarks
    exit 1 when a target is not met, which the table shows; that is not a crash."""
    if timed_out:
        return "timed out"
    if fresh_results:
        return "ok"
    if exit_code != 0:
        return "crashed"
    return "no results"


def _copy(stream: IO[bytes], log: IO[bytes], prefix: str, echo: bool) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        if echo:
            sys.stdout.write(prefix + line.decode(errors="replace"))
            sys.stdout.flush()


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT the benchmark's process group (cleanup runs), then SIGKILL what is left."""
    for sig, wait in ((signal.SIGINT, GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_one(
    name: str,
    script: Path,
    *,
    quick: bool,
    timeout_s: float,
    results_dir: Path,
    log_dir: Path,
    echo: bool = True,
) -> Run:
    """Run one benchmark in its own process group and say how it ended."""
    results = results_dir / f"{results_name(script)}.json"
    log_path = log_dir / f"{name}.log"
    started_wall = time.time()
    started = time.monotonic()
    timed_out = False
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command(script, quick),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # line by line through the pipe, so progress shows while it runs
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert process.stdout is not None
        reader = threading.Thread(
            target=_copy, args=(process.stdout, log, f"  {name}| ", echo), daemon=True
        )
        reader.start()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(process)
        reader.join(5)
    seconds = round(time.monotonic() - started, 1)
    # mtime has a coarse clock on some file systems: a second of slack
    fresh = results.is_file() and results.stat().st_mtime >= started_wall - 1.0
    status = classify(exit_code=process.returncode, timed_out=timed_out, fresh_results=fresh)
    detail = None
    if status in FAILED:
        detail = (
            f"after {timeout_s:g} s" if timed_out else why(log_path.read_text(errors="replace"))
        )
    elif process.returncode:
        detail = f"exit {process.returncode}"
    return Run(
        name=name,
        status=status,
        seconds=seconds,
        exit_code=process.returncode,
        quick=quick and supports_quick(script),
        detail=detail,
        load_average=round(os.getloadavg()[0], 2),
        results_sha256=digest(results) if fresh else None,
    )


def why(output: str) -> str | None:
    """The line saying why a run died: the exception after the last traceback, if any,
    else the last line it printed."""
    lines = [line for line in output.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if starts:
        after = [line for line in lines[starts[-1] + 1 :] if not line[0].isspace()]
        if after:
            return after[0][:300]
    return lines[-1][:300] if lines else None


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def earlier_runs(summary_json: Path) -> dict[str, Run]:
    """The runs the last summary.json recorded as completed whose results file is still the
    one they wrote, as "earlier" runs: a partial run (``--only``) keeps the others' time and
    load in the table, and results from elsewhere (a merge) get none of them."""
    try:
        document = json.loads(summary_json.read_text())
        recorded = [Run.model_validate(_run_fields(b)) for b in document["benchmarks"]]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {
        r.name: r.model_copy(update={"status": "earlier"})
        for r in recorded
        if r.status in ("ok", "earlier")
        and r.results_sha256 is not None
        and r.results_sha256 == digest(summary_json.parent / f"{r.name}.json")
    }


def _run_fields(entry: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in entry.items() if k in Run.model_fields}


def write_outputs(sections: list[Section], results_dir: Path) -> tuple[Path, Path]:
    summary_json = results_dir / "summary.json"
    summary_md = results_dir / "summary.md"
    generated_at = datetime.now(UTC).isoformat(timespec="seconds")
    document = build_summary(sections, generated_at=generated_at)
    summary_json.write_text(json.dumps(document, indent=1) + "\n")
    summary_md.write_text(markdown(sections))
    return summary_json, summary_md


def paste_into(doc: Path, table: str) -> None:
    """Replace what is between the document's bench markers by ``table``; the rest stays."""
    text = doc.read_text()
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise SystemExit(f"{doc}: no {TABLE_START} ... {TABLE_END} lines to paste between")
    head = text[: start + len(TABLE_START)]
    doc.write_text(f"{head}\n{table.rstrip()}\n{text[end:]}")


def _short(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None, *, folder: Path = HERE) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="pass --quick to those that take it")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"per benchmark (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--table-only", action="store_true", help="run nothing; the table from the results"
    )
    parser.add_argument("--quiet", action="store_true", help="do not echo benchmark output")
    parser.add_argument(
        "--doc", type=Path, metavar="FILE", help="paste the table between its bench markers"
    )
    args = parser.parse_args(argv)
    console = Console()
    scripts = discover(folder)
    results_dir = folder / "results"
    results_dir.mkdir(exist_ok=True)
    unknown = sorted(set(args.only or []) - set(scripts))
    if unknown:
        console.print(f"unknown benchmark(s): {', '.join(unknown)}; have: {', '.join(scripts)}")
        return 2
    chosen = [] if args.table_only else (args.only or list(scripts))
    log_dir = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    runs: dict[str, Run] = {}
    for name in chosen:
        console.print(
            f"[bold]{name}[/bold]: running {' '.join(command(scripts[name], args.quick)[1:])}"
        )
        run = run_one(
            name,
            scripts[name],
            quick=args.quick,
            timeout_s=timeout_for(scripts[name], args.timeout),
            results_dir=results_dir,
            log_dir=log_dir,
            echo=not args.quiet,
        )
        runs[name] = run
        note = f" ({run.detail})" if run.detail else ""
        console.print(f"[bold]{name}[/bold]: {run.status} in {run.seconds:.0f} s{note}")
    before = earlier_runs(results_dir / "summary.json")
    sections = [
        read_section(
            runs.get(name) or before.get(name) or Run(name=name, status="earlier"),
            results_dir / f"{results_name(scripts[name])}.json",
        )
        for name in scripts
    ]
    console.print(rich_table(sections))
    summary_json, summary_md = write_outputs(sections, results_dir)
    failed = [r.name for r in runs.values() if r.status in FAILED]
    if chosen:
        console.print(f"logs in {log_dir}")
    console.print(f"wrote {_short(summary_json)} and {_short(summary_md)}")
    if args.doc:
        paste_into(args.doc, summary_md.read_text())
        console.print(f"pasted the table into {_short(args.doc)}")
    if failed:
        console.print(f"[red]did not complete: {', '.join(failed)}[/red]")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
