"""python -m benchmarks: every benchmark in its own process, a crash or a hang is a row."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import benchmarks.__main__ as suite
from benchmarks.__main__ import (
    classify,
    command,
    discover,
    main,
    supports_quick,
    timeout_for,
)

ROOT = Path(suite.__file__).resolve().parents[1]

#: a benchmark that writes a summary claim, quick or not as told
GOOD = f"""
import argparse, json, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from benchmarks.summary import Target, claim, dump
parser = argparse.ArgumentParser()
parser.add_argument("--quick", action="store_true")
quick = parser.parse_args().quick
value = 3.0 if quick else 30.0
out = Path(__file__).parent / "results" / "good.json"
out.write_text(json.dumps({{"quick": quick, "summary": dump([
    claim("steps", value, "steps", Target.at_most(10, "<= 10"))])}}))
print("done")
"""
CRASH = "import sys\nprint('starting')\nraise SystemExit('lab did not start')\n"
HANG = "import time\ntime.sleep(60)\n"
#: finished and wrote its results, but exits 1 because a target was not met
UNMET = f"""
import json, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from benchmarks.summary import Target, claim, dump
out = Path(__file__).parent / "results" / "unmet.json"
out.write_text(json.dumps({{"summary": dump([claim("x", 2, "s", Target.below(1, "< 1 s"))])}}))
sys.exit(1)
"""


def _folder(tmp_path: Path, **scripts: str) -> Path:
    (tmp_path / "results").mkdir()
    for name, text in scripts.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    (tmp_path / "summary.py").write_text("# machinery, not a benchmark\n")
    return tmp_path


def _summary(folder: Path) -> dict[str, dict[str, object]]:
    document = json.loads((folder / "results" / "summary.json").read_text())
    return {b["name"]: b for b in document["benchmarks"]}


class TestDiscovery:
    """Every benchmarks/*.py but the suite's own modules; --quick only where declared."""

    def test_discover_skips_the_machinery(self, tmp_path: Path) -> None:
        folder = _folder(tmp_path, good=GOOD, crash=CRASH)
        assert list(discover(folder)) == ["crash", "good"]

    def test_the_real_suite(self) -> None:
        names = set(discover())
        assert {"taiji", "kraken", "drain", "chaos"} <= names
        assert not names & {"summary", "table", "__main__", "__init__"}

    def test_quick_is_passed_only_where_declared(self, tmp_path: Path) -> None:
        folder = _folder(tmp_path, good=GOOD, crash=CRASH)
        assert supports_quick(folder / "good.py")
        assert command(folder / "good.py", quick=True)[-1] == "--quick"
        assert "--quick" not in command(folder / "crash.py", quick=True)
        assert "--quick" not in command(folder / "good.py", quick=False)


class TestResultsFile:
    """A benchmark's results file is the one its source names, else its own name."""

    def test_named_in_the_source(self, tmp_path: Path) -> None:
        folder = _folder(
            tmp_path,
            fuzz='OUT = ROOT / "benchmarks" / "results" / "chaos.json"\n',
            good=GOOD,
            plain="print(1)\n",
        )
        assert suite.results_name(folder / "fuzz.py") == "chaos"
        assert suite.results_name(folder / "good.py") == "good"
        assert suite.results_name(folder / "plain.py") == "plain"


class TestClassify:
    """Fresh results mean it finished, whatever the exit code; otherwise it crashed."""

    def test_outcomes(self) -> None:
        assert classify(exit_code=-9, timed_out=True, fresh_results=False) == "timed out"
        assert classify(exit_code=1, timed_out=False, fresh_results=True) == "ok"
        assert classify(exit_code=1, timed_out=False, fresh_results=False) == "crashed"
        assert classify(exit_code=0, timed_out=False, fresh_results=False) == "no results"


@pytest.mark.server  # runs benchmarks as processes
class TestSuite:
    """One benchmark crashing or hanging does not stop the others; the suite exits non-zero."""

    def test_crash_and_hang_are_rows(self, tmp_path: Path) -> None:
        folder = _folder(tmp_path, good=GOOD, crash=CRASH, hang=HANG, unmet=UNMET)
        code = main(["--quick", "--quiet", "--timeout", "3"], folder=folder)
        assert code == 1
        runs = _summary(folder)
        assert {n: r["status"] for n, r in runs.items()} == {
            "crash": "crashed",
            "good": "ok",
            "hang": "timed out",
            "unmet": "ok",
        }
        assert runs["crash"]["detail"] == "lab did not start"
        assert runs["good"]["quick"] is True
        assert runs["good"]["summary"][0]["value"] == 3.0
        assert runs["unmet"]["summary"][0]["met"] is False
        text = (folder / "results" / "summary.md").read_text()
        assert "crashed: lab did not start" in text
        assert "1 of 2 claims met; did not complete: crash, hang." in text

    def test_only_runs_the_named_and_keeps_the_rest_from_before(self, tmp_path: Path) -> None:
        folder = _folder(tmp_path, good=GOOD, unmet=UNMET)
        assert main(["--quiet"], folder=folder) == 0
        assert main(["--quiet", "--quick", "--only", "good"], folder=folder) == 0
        runs = _summary(folder)
        assert (runs["good"]["status"], runs["good"]["quick"]) == ("ok", True)
        assert runs["unmet"]["status"] == "earlier"
        assert runs["unmet"]["summary"][0]["claim"] == "x"
        # the earlier run's time and load come from the last summary.json
        assert runs["unmet"]["seconds"] is not None
        assert runs["unmet"]["load_average"] is not None

    def test_results_replaced_since_lose_the_earlier_run(self, tmp_path: Path) -> None:
        folder = _folder(tmp_path, good=GOOD, unmet=UNMET)
        assert main(["--quiet"], folder=folder) == 0
        # e.g. a merge brought another run's file: its time and load are not this one's
        unmet = folder / "results" / "unmet.json"
        unmet.write_text(unmet.read_text().replace('"x"', '"y"'))
        assert main(["--quiet", "--table-only"], folder=folder) == 0
        runs = _summary(folder)
        assert runs["good"]["seconds"] is not None
        assert (runs["unmet"]["status"], runs["unmet"]["seconds"]) == ("earlier", None)
        assert runs["unmet"]["summary"][0]["claim"] == "y"

    def test_doc_gets_the_table_between_its_markers(self, tmp_path: Path) -> None:
        folder = _folder(tmp_path, good=GOOD)
        doc = tmp_path / "benchmarks.md"
        doc.write_text("# x\n\n<!-- bench:start -->\nold table\n<!-- bench:end -->\n\nafter\n")
        assert main(["--quiet", "--doc", str(doc)], folder=folder) == 0
        assert main(["--quiet", "--table-only", "--doc", str(doc)], folder=folder) == 0
        text = doc.read_text()
        table = (folder / "results" / "summary.md").read_text().rstrip()
        assert text == f"# x\n\n<!-- bench:start -->\n{table}\n<!-- bench:end -->\n\nafter\n"

    def test_doc_without_markers_is_refused(self, tmp_path: Path) -> None:
        folder = _folder(tmp_path, good=GOOD)
        doc = tmp_path / "benchmarks.md"
        doc.write_text("# no markers\n")
        with pytest.raises(SystemExit, match="bench:start"):
            main(["--quiet", "--table-only", "--doc", str(doc)], folder=folder)
        assert doc.read_text() == "# no markers\n"

    def test_unknown_name(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        folder = _folder(tmp_path, good=GOOD)
        assert main(["--only", "nope"], folder=folder) == 2
        assert "unknown benchmark(s): nope" in capsys.readouterr().out


class TestWhy:
    """A crash is explained by its exception line, not by whatever it printed last."""

    def test_the_exception_after_the_traceback(self) -> None:
        output = (
            'starting\nTraceback (most recent call last):\n  File "x.py", line 1\n'
            "    boom()\nRuntimeError: lab did not start\n    more detail\n"
        )
        assert suite.why(output) == "RuntimeError: lab did not start"

    def test_the_last_line_without_a_traceback(self) -> None:
        assert suite.why("starting\nlab did not start\n\n") == "lab did not start"
        assert suite.why("") is None


class TestTimeout:
    """A benchmark may declare it needs longer than the suite's timeout, never shorter."""

    def test_declared_timeout(self, tmp_path: Path) -> None:
        folder = _folder(
            tmp_path,
            long="SUITE_TIMEOUT_S = 2_400.0\n",
            short="SUITE_TIMEOUT_S = 10\n",
            plain="print('hi')\n",
        )
        assert timeout_for(folder / "long.py", 900.0) == 2400.0
        assert timeout_for(folder / "short.py", 900.0) == 900.0
        assert timeout_for(folder / "plain.py", 900.0) == 900.0
