"""The suite's table: one row per claim, a failed benchmark is a row, not a stale result."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.summary import Target, claim, dump, flag
from benchmarks.table import (
    Run,
    Section,
    markdown,
    number,
    read_section,
    rich_table,
    rows,
    summary_document,
)


def _document(quick: bool = True) -> dict[str, object]:
    claims = [
        claim(
            "solve time",
            0.4,
            "s",
            Target.below(1.0, "< 1 s"),
            baseline=2.0,
            baseline_name="LP",
        ),
        flag("bit-identical", False),
    ]
    return {"benchmark": "x", "quick": quick, "summary": dump(claims)}


def _write(path: Path, document: dict[str, object]) -> Path:
    path.write_text(json.dumps(document))
    return path


class TestNumbers:
    """Numbers are short: whole numbers whole, three significant digits, yes/no for flags."""

    def test_formats(self) -> None:
        assert number(20.0, "runs") == "20 runs"
        assert number(0.123456, "s") == "0.123 s"
        assert number(363461.5) == "363,462"
        assert number(1.0, "bool") == "yes"
        assert number(0.0, "bool") == "no"
        assert number(None) == "-"
        assert number(float("nan"), "ms") == "-"


class TestRows:
    """Each claim is a row; the benchmark's name, mode and time label its first row only."""

    def test_claims_become_rows(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "x.json", _document())
        section = read_section(Run(name="x", status="ok", seconds=12.3), path)
        first, second = rows([section])
        assert first == (
            "x (quick, 12 s)",
            "solve time",
            "0.4 s",
            "2 s (LP)",
            "0.2x",
            "< 1 s",
            "yes",
        )
        assert second[0] == ""
        assert (second[2], second[-1]) == ("no", "NO")

    def test_a_crashed_run_shows_no_stale_claims(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "x.json", _document())
        run = Run(name="x", status="crashed", seconds=3.0, exit_code=1, detail="Boom: lab died")
        (row,) = rows([read_section(run, path)])
        assert row[1] == "crashed: Boom: lab died"
        assert row[-1] == "no"

    def test_results_without_a_summary(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "x.json", {"benchmark": "x"})
        section = read_section(Run(name="x", status="ok"), path)
        assert section.run.status == "no results"
        assert section.claims == []

    def test_an_inconsistent_summary_is_not_shown(self, tmp_path: Path) -> None:
        document = _document()
        document["summary"][0]["met"] = False  # type: ignore[index]
        section = read_section(Run(name="x", status="ok"), _write(tmp_path / "x.json", document))
        assert section.run.status == "no results"

    def test_earlier_results_are_marked(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "x.json", _document(quick=False))
        section = read_section(Run(name="x", status="earlier"), path)
        assert rows([section])[0][0] == "x (full, earlier run)"

    def test_another_benchmarks_file_lends_no_claims(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "chaos.json", _document())
        section = read_section(Run(name="fuzz", status="ok"), path)
        assert (section.run.status, section.claims) == ("ok", [])
        assert rows([section])[0][1] == "ok: writes into chaos.json, no summary of its own"

    def test_missing_file(self, tmp_path: Path) -> None:
        assert read_section(Run(name="x", status="earlier"), tmp_path / "x.json").run.status == (
            "not run"
        )
        assert read_section(Run(name="x", status="ok"), tmp_path / "x.json").run.status == (
            "no results"
        )


class TestOutputs:
    """The Markdown and JSON summaries carry every row and the count of claims met."""

    def _sections(self, tmp_path: Path) -> list[Section]:
        ok = read_section(Run(name="a", status="ok"), _write(tmp_path / "a.json", _document()))
        crashed = Section(run=Run(name="b", status="timed out", detail="after 5 s"))
        return [ok, crashed]

    def test_markdown(self, tmp_path: Path) -> None:
        text = markdown(self._sections(tmp_path))
        lines = text.splitlines()
        assert lines[0] == "| benchmark | claim | value | baseline | ratio | target | met |"
        assert len([line for line in lines if line.startswith("| ")]) == 4
        assert "timed out: after 5 s" in text
        assert text.rstrip().endswith("1 of 2 claims met; did not complete: b.")

    def test_the_load_it_was_measured_under_is_shown(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "a.json", _document())
        section = read_section(Run(name="a", status="ok", seconds=9, load_average=6.25), path)
        assert rows([section])[0][0] == "a (quick, 9 s, load 6.2)"
        assert "Load average while measuring: 6.2 to 6.2" in markdown([section])

    def test_pipes_in_cells_are_escaped(self) -> None:
        section = Section(run=Run(name="a", status="ok"), claims=[flag("a | b", True)])
        assert "a \\| b" in markdown([section])

    def test_summary_document(self, tmp_path: Path) -> None:
        document = summary_document(self._sections(tmp_path), generated_at="now")
        assert (document["claims_met"], document["claims"], document["failed"]) == (1, 2, ["b"])
        assert [b["status"] for b in document["benchmarks"]] == ["ok", "timed out"]
        assert document["benchmarks"][0]["summary"][0]["claim"] == "solve time"

    def test_rich_table_has_a_row_per_claim(self, tmp_path: Path) -> None:
        assert rich_table(self._sections(tmp_path)).row_count == 3


class TestSectionOfAnotherFile:
    """A benchmark writing a section of another's results file brings its own claims there."""

    def test_claims_come_from_the_section_that_names_it(self, tmp_path: Path) -> None:
        document = _document()
        document["bad_input"] = {"benchmark": "fuzz", "summary": _document()["summary"]}
        path = _write(tmp_path / "chaos.json", document)
        section = read_section(Run(name="fuzz", status="ok"), path)
        assert section.run.status == "ok"
        assert [c.claim for c in section.claims] == [
            c["claim"]
            for c in _document()["summary"]  # type: ignore[union-attr]
        ]
