"""What keeps a runbook that passes lint from hanging, spinning or escaping: bounded
durations, nested runbooks that neither cycle, nest too deep nor leave the runbooks
directory, and a size cap checked before the YAML is parsed."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.commands.runbook import app
from orchestrator.exceptions import RunbookError
from orchestrator.runbook import RunbookInvalid, bind, lint_file, load_runbook, nested_runbooks
from orchestrator.runbook.loader import MAX_RUNBOOK_BYTES, parse_text
from orchestrator.runbook.spec import MAX_NESTING_DEPTH
from orchestrator.runbook.types import MAX_DURATION_S, parse_duration
from orchestrator.triggers.catalog import load_runbooks
from tests.runbook.helpers import codes, line_of, lint

runner = CliRunner()


def recovery(name: str, tasks: str, header: str = "") -> str:
    """A ``recovery`` runbook (no restore needed) with the given task lines."""
    return f"name: {name}\nkind: recovery\n{header}tasks:\n{tasks}"


def nest(name: str, ref: str) -> str:
    return recovery(name, f"  - id: inner\n    template: runbook\n    args: {{runbook: {ref}}}\n")


HOLD = "  - id: hold\n    template: delay\n    args: {duration: 1}\n"


class TestDurationBounds:
    """A duration is finite, not negative and at most 30 days, wherever it is parsed:
    task fields, template arguments, duration parameters from the CLI."""

    @pytest.mark.parametrize(
        "bad",
        [
            "inf",
            "-inf",
            "nan",
            "1e308",
            "1e400",
            "99999999999999999999d",
            "31d",
            10**400,
            -(10**400),
        ],
    )
    def test_refused(self, bad: object) -> None:
        with pytest.raises(ValueError, match="finite|maximum duration 30d|negative"):
            parse_duration(bad)

    def test_the_maximum_itself_is_accepted(self) -> None:
        assert parse_duration("30d") == MAX_DURATION_S == parse_duration(2592000)

    def test_huge_task_timeout_is_a_finding_on_its_line(self) -> None:
        text = recovery("t", HOLD + "    timeout: 99999999999999999999d\n")
        findings = lint(text)
        assert codes(findings) == ["schema"]
        assert findings[0].line == line_of(text, "timeout:")
        assert findings[0].message.startswith("timeout: ")
        assert "longer than the maximum duration 30d" in findings[0].message

    @pytest.mark.parametrize(
        ("args", "field"),
        [
            ("{duration: inf}", "args.duration"),
            ("{duration: .inf}", "args.duration"),
            ("{predicates: ['rps in all > 1'], timeout: 1e400}", "args.timeout"),
            ("{predicates: ['rps in all > 1'], poll_interval: 40d}", "args.poll_interval"),
        ],
    )
    def test_template_durations_are_bounded(self, args: str, field: str) -> None:
        template = "delay" if "duration" in args else "wait_for"
        text = recovery("t", f"  - id: x\n    template: {template}\n    args: {args}\n")
        findings = lint(text)
        assert codes(findings) == ["bad-args"], findings
        assert findings[0].message.startswith(f"{field}: ")

    def test_duration_parameter_from_the_cli(self, tmp_path: Path) -> None:
        header = "parameters:\n  hold: {type: duration, default: 5s}\n"
        tasks = "  - id: x\n    template: delay\n    args: {duration: '${params.hold}'}\n"
        path = tmp_path / "t.yaml"
        path.write_text(recovery("t", tasks, header))
        with pytest.raises(RunbookError, match="parameter hold: 'inf' is not a finite"):
            bind(load_runbook(path), {"hold": "inf"})
        result = runner.invoke(app, ["plan", str(path), "-p", "hold=99999999d"])
        assert result.exit_code != 0 and "Traceback" not in result.output
        assert "longer than the maximum duration 30d" in result.output


class TestNestingCycles:
    """Lint follows nested runbooks by file and by name and refuses any cycle, and a chain
    deeper than MAX_NESTING_DEPTH; the starter of a run refuses them too."""

    def test_runbook_naming_its_own_file(self, tmp_path: Path) -> None:
        path = tmp_path / "selfref.yaml"
        path.write_text(nest("selfref", "selfref.yaml"))
        findings = lint_file(path)
        assert codes(findings) == ["nested-runbook"]
        assert "runs itself: selfref -> selfref" in findings[0].message

    def test_runbook_naming_itself(self, tmp_path: Path) -> None:
        findings = lint(nest("selfref", "selfref"), tmp_path)
        assert codes(findings) == ["nested-runbook"]
        assert "selfref -> selfref" in findings[0].message

    def test_two_runbooks_running_each_other(self, tmp_path: Path) -> None:
        (tmp_path / "a.yaml").write_text(nest("a", "b"))
        (tmp_path / "b.yaml").write_text(nest("b", "a.yaml"))
        for name, cycle in (("a", "a -> b -> a"), ("b", "b -> a -> b")):
            findings = lint_file(tmp_path / f"{name}.yaml")
            assert codes(findings) == ["nested-runbook"], findings
            assert f"nested runbooks form a cycle: {cycle}" in findings[0].message

    def test_cycle_through_a_restore_runbook(self, tmp_path: Path) -> None:
        """A parent rolling back runs the nested runbook's restore_runbook as a child too."""
        child = recovery("child", HOLD, "restore_runbook: undo\n")
        (tmp_path / "child.yaml").write_text(child)
        (tmp_path / "undo.yaml").write_text(nest("undo", "parent"))
        findings = lint(nest("parent", "child"), tmp_path)
        assert "nested runbooks form a cycle: parent -> undo -> parent" in findings[0].message

    def test_chain_deeper_than_the_limit(self, tmp_path: Path) -> None:
        names = [f"r{i}" for i in range(MAX_NESTING_DEPTH + 2)]
        for name, below in zip(names, names[1:], strict=False):
            (tmp_path / f"{name}.yaml").write_text(nest(name, below))
        (tmp_path / f"{names[-1]}.yaml").write_text(recovery(names[-1], HOLD))
        assert lint_file(tmp_path / f"{names[1]}.yaml") == []  # exactly the limit
        findings = lint_file(tmp_path / f"{names[0]}.yaml")
        assert codes(findings) == ["nested-runbook"]
        assert f"{MAX_NESTING_DEPTH + 1} levels deep" in findings[0].message
        assert " -> ".join(names) in findings[0].message

    def test_starter_refuses_a_cycle_lint_cannot_see(self, tmp_path: Path) -> None:
        """A parameter names the nested runbook, so only the bound runbook shows the cycle."""
        header = "parameters:\n  next: {type: string}\n"
        tasks = "  - id: inner\n    template: runbook\n    args: {runbook: '${params.next}'}\n"
        path = tmp_path / "loop.yaml"
        path.write_text(recovery("loop", tasks, header))
        hop = "  - id: inner\n    template: runbook\n    args: {runbook: loop, parameters: {next: hop}}\n"
        (tmp_path / "hop.yaml").write_text(recovery("hop", hop))
        assert lint_file(path) == []
        runbook = load_runbook(path, {"next": "hop"})
        with pytest.raises(RunbookError, match="cycle: loop -> hop -> loop"):
            nested_runbooks(runbook, tmp_path)


class TestNestedRunbooksStayInTheirDirectory:
    """A nested or restore runbook resolves only inside the runbooks directory."""

    @pytest.mark.parametrize("ref", ["../outside.yaml", "sub/../../outside", "/etc/passwd"])
    def test_paths_that_climb_out_are_refused(self, tmp_path: Path, ref: str) -> None:
        runbooks = tmp_path / "runbooks"
        runbooks.mkdir()
        (tmp_path / "outside.yaml").write_text(recovery("outside", HOLD))
        findings = lint(nest("parent", f"'{ref}'"), runbooks)
        assert codes(findings) == ["bad-args"]
        assert "no absolute path, no '..'" in findings[0].message
        text = recovery("parent", HOLD, f"restore_runbook: '{ref}'\n")
        assert codes(lint(text, runbooks)) == ["schema"]

    def test_symlink_leading_out_is_refused(self, tmp_path: Path) -> None:
        runbooks = tmp_path / "runbooks"
        runbooks.mkdir()
        (tmp_path / "payload.yaml").write_text(recovery("payload", HOLD))
        (runbooks / "link.yaml").symlink_to(tmp_path / "payload.yaml")
        (runbooks / "parent.yaml").write_text(nest("parent", "link"))
        findings = lint_file(runbooks / "parent.yaml")
        assert codes(findings) == ["nested-runbook"]
        assert "leads out of" in findings[0].message
        parent = parse_text(nest("parent", "link")).runbook
        assert parent is not None
        with pytest.raises(RunbookError, match="leads out of"):
            nested_runbooks(parent, runbooks)

    def test_subdirectory_and_symlink_inside_are_fine(self, tmp_path: Path) -> None:
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "leaf.yaml").write_text(recovery("leaf", HOLD))
        (tmp_path / "alias.yaml").symlink_to(tmp_path / "sub" / "leaf.yaml")
        assert lint(nest("parent", "sub/leaf.yaml"), tmp_path) == []
        assert lint(nest("parent", "alias"), tmp_path) == []


class TestSizeCap:
    """A runbook over MAX_RUNBOOK_BYTES is refused before its YAML is parsed, on every
    path that reads one: lint, load, a nested runbook, the trigger server's catalog."""

    @staticmethod
    def big(name: str = "big") -> str:
        task = "  - id: t{i}\n    template: delay\n    args: {{duration: 1}}\n"
        text, i = recovery(name, ""), 0
        while len(text) <= MAX_RUNBOOK_BYTES:
            text += task.format(i=i)
            i += 1
        return text

    def test_lint_and_load_refuse_it(self, tmp_path: Path) -> None:
        path = tmp_path / "big.yaml"
        path.write_text(self.big())
        findings = lint_file(path)
        assert codes(findings) == ["size"]
        assert "a runbook may be at most 256 KiB" in findings[0].message
        assert codes(lint(self.big())) == ["size"]
        with pytest.raises(RunbookInvalid, match="at most 256 KiB"):
            load_runbook(path)

    def test_nested_and_catalog(self, tmp_path: Path) -> None:
        (tmp_path / "big.yaml").write_text(self.big())
        findings = lint(nest("parent", "big"), tmp_path)
        assert codes(findings) == ["nested-runbook"]
        assert "at most 256 KiB" in findings[0].message
        with pytest.raises(RunbookInvalid, match="at most 256 KiB"):
            load_runbooks(tmp_path)
