"""Lint findings: each kind, on the right line, naming the right task."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runbook import RunbookInvalid, lint_file, load_runbook
from orchestrator.runbook.findings import Finding
from tests.runbook.helpers import codes, line_of, lint, runbook_text

CLEAN = """
- id: shift
  template: traffic_shift
  args: {region: "${params.region}", ratio: 0.0}
  steps: 5 x 20%
  restore: auto
- id: done
  template: wait_for
  depends_on: [shift]
  args:
    predicates: ["rps in ${params.region} <= 1"]
"""


def only(findings: list[Finding], code: str) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, findings
    return matching[0]


class TestCleanRunbook:
    """A well-formed runbook yields no finding and loads."""

    def test_no_findings(self, tmp_path: Path) -> None:
        assert lint(runbook_text(CLEAN)) == []
        path = tmp_path / "rb.yaml"
        path.write_text(runbook_text(CLEAN))
        assert load_runbook(path).task_ids == ["shift", "done"]


class TestYamlAndSchema:
    """Syntax and type errors are reported at their line, never raised."""

    def test_yaml_syntax_error_has_its_line(self) -> None:
        text = "name: x\nkind: drain\ntasks:\n  - id: a\n    args: {b: [1, 2}\n"
        finding = only(lint(text), "yaml")
        assert finding.line == 5

    def test_duplicate_yaml_key(self) -> None:
        text = runbook_text(CLEAN.replace("  steps: 5 x 20%\n", "  steps: 5 x 20%\n  steps: 2\n"))
        finding = only(lint(text), "yaml")
        assert finding.task == "shift"
        assert finding.line == line_of(text, "steps: 2")
        assert "duplicate key 'steps'" in finding.message

    def test_type_error_maps_to_field_line_and_task(self) -> None:
        text = runbook_text(CLEAN.replace("  steps: 5 x 20%", "  steps: 3 x 20%"))
        finding = only(lint(text), "schema")
        assert finding.line == line_of(text, "steps: 3 x 20%")
        assert finding.task == "shift"
        assert "60%" in finding.message

    def test_unknown_field_is_named(self) -> None:
        text = runbook_text(CLEAN.replace("  restore: auto", "  restore: auto\n  retries: 3"))
        finding = only(lint(text), "schema")
        assert finding.line == line_of(text, "retries: 3")
        assert "retries" in finding.message

    def test_bad_kind_and_not_a_mapping(self) -> None:
        text = runbook_text(CLEAN).replace("kind: drain", "kind: evacuate")
        assert only(lint(text), "schema").line == 2
        assert codes(lint("- just\n- a list\n")) == ["schema"]

    def test_task_without_id(self) -> None:
        text = runbook_text(CLEAN.replace("- id: done\n  template", "- template"))
        finding = only(lint(text), "schema")
        assert finding.task == "tasks[1]"
        assert "id" in finding.message


class TestGraph:
    """Duplicate ids, unknown and self dependencies and cycles are found."""

    def test_duplicate_id_on_second_occurrence(self) -> None:
        text = runbook_text(CLEAN + "- id: shift\n  template: delay\n  args: {duration: 1s}\n")
        finding = only(lint(text), "duplicate-id")
        assert finding.line == line_of(text, "- id: shift", 2)

    def test_unknown_dependency_line(self) -> None:
        text = runbook_text(CLEAN.replace("depends_on: [shift]", "depends_on:\n    - shfit"))
        finding = only(lint(text), "unknown-dependency")
        assert finding.line == line_of(text, "- shfit")
        assert finding.task == "done"

    def test_self_dependency(self) -> None:
        text = runbook_text(CLEAN.replace("depends_on: [shift]", "depends_on: [done]"))
        assert only(lint(text), "self-dependency").task == "done"

    def test_cycle_is_reported_with_its_path(self) -> None:
        tasks = CLEAN.replace("  steps: 5 x 20%", "  steps: 5 x 20%\n  weak_depends_on: [done]")
        text = runbook_text(tasks)
        finding = only(lint(text), "cycle")
        assert "done -> shift -> done" in finding.message or "shift -> done -> shift" in (
            finding.message
        )
        assert finding.line in (line_of(text, "- id: shift"), line_of(text, "- id: done"))

    def test_graph_checks_survive_a_schema_error_elsewhere(self) -> None:
        text = runbook_text(
            CLEAN.replace("depends_on: [shift]", "depends_on: [ghost]").replace(
                "ratio: 0.0", "ratio: 0.0}\n  timeout: soon\n  x: {a: 1"
            )
        )
        assert {"unknown-dependency", "schema"} <= set(codes(lint(text)))


class TestTemplatesAndParameters:
    """Unknown templates, bad arguments and parameter references are found."""

    def test_unknown_template(self) -> None:
        text = runbook_text(CLEAN.replace("template: wait_for", "template: wait_fro"))
        finding = only(lint(text), "unknown-template")
        assert finding.line == line_of(text, "template: wait_fro")
        assert "wait_for" in finding.message  # the known names help fix a typo

    def test_bad_template_args_point_at_the_argument(self) -> None:
        text = runbook_text(CLEAN.replace("ratio: 0.0}", "ratio: 1.5}"))
        finding = only(lint(text), "bad-args")
        assert finding.line == line_of(text, "ratio: 1.5")
        assert "ratio" in finding.message

    def test_missing_required_argument(self) -> None:
        text = runbook_text(CLEAN.replace(", ratio: 0.0}", "}"))
        assert "ratio" in only(lint(text), "bad-args").message

    def test_parameter_of_wrong_type_for_argument(self) -> None:
        header = (
            "name: s\nkind: drain\nparameters:\n  region: {type: region}\n  share: {type: bool}\n"
        )
        text = runbook_text(CLEAN.replace("ratio: 0.0", 'ratio: "${params.region}"'), header)
        assert only(lint(text), "bad-args").task == "shift"

    def test_undeclared_parameter_reference(self) -> None:
        text = runbook_text(CLEAN.replace("rps in ${params.region}", "rps in ${params.regoin}"))
        finding = only(lint(text), "unknown-parameter")
        assert finding.line == line_of(text, "params.regoin")
        assert "'regoin'" in finding.message

    def test_steps_on_template_that_is_not_stepped(self) -> None:
        text = runbook_text(
            CLEAN + "- id: stop\n  template: job_update\n  args: {operation: stop, region: a}\n"
            "  steps: 2 x 50%\n  restore: auto\n"
        )
        finding = only(lint(text), "not-stepped")
        assert finding.line == line_of(text, "steps: 2 x 50%")

    def test_bad_parameter_default(self) -> None:
        text = runbook_text(CLEAN).replace("{type: float, default: 250}", "{type: int, default: x}")
        finding = only(lint(text), "schema")
        assert finding.line == line_of(text, "type: int")


class TestRestores:
    """A mutating drain task needs a restore, and the restore must exist."""

    def test_mutating_drain_task_without_restore(self) -> None:
        text = runbook_text(CLEAN.replace("  restore: auto\n", ""))
        finding = only(lint(text), "no-restore")
        assert finding.task == "shift"
        assert finding.line == line_of(text, "template: traffic_shift")

    def test_restore_kind_needs_none(self) -> None:
        text = runbook_text(CLEAN.replace("  restore: auto\n", "")).replace(
            "kind: drain", "kind: restore"
        )
        assert lint(text) == []

    def test_auto_restore_on_template_that_cannot_derive(self) -> None:
        text = runbook_text(
            CLEAN + "- id: cfg\n  template: config_change\n  args: {path: /a, content: b}\n"
            "  restore: auto\n"
        )
        assert only(lint(text), "no-restore").task == "cfg"

    def test_restore_names_missing_task_in_paired_runbook(self, tmp_path: Path) -> None:
        (tmp_path / "undo.yaml").write_text(
            "name: undo\nkind: restore\nparameters: {region: {type: region}}\ntasks:\n"
            "  - id: back\n    template: traffic_shift\n"
            "    args: {region: '${params.region}', ratio: 1.0}\n"
        )
        header = (
            "name: s\nkind: drain\nrestore_runbook: undo\nparameters:\n  region: {type: region}\n"
        )
        good = runbook_text(CLEAN.replace("restore: auto", "restore: back"), header)
        assert lint(good, tmp_path) == []
        bad = runbook_text(CLEAN.replace("restore: auto", "restore: bakc"), header)
        finding = only(lint(bad, tmp_path), "restore-missing")
        assert finding.line == line_of(bad, "restore: bakc")
        assert "'bakc'" in finding.message

    def test_restore_id_without_paired_runbook(self) -> None:
        text = runbook_text(CLEAN.replace("restore: auto", "restore: back"))
        assert only(lint(text), "restore-missing").task == "shift"

    def test_paired_runbook_file_missing(self, tmp_path: Path) -> None:
        header = "name: s\nkind: drain\nrestore_runbook: nowhere\nparameters:\n  region: {type: region}\n"
        text = runbook_text(CLEAN, header)
        assert only(lint(text, tmp_path), "restore-missing").line == 3

    def test_inline_restore_is_validated(self) -> None:
        text = runbook_text(
            CLEAN.replace(
                "restore: auto", "restore:\n    template: service_weight\n    args: {region: a}"
            )
        )
        findings = [f for f in lint(text) if f.code == "bad-args"]
        assert {f.line for f in findings} == {line_of(text, "args: {region: a}")}
        assert sorted(f.message for f in findings) == [
            "restore.args.service: Field required",
            "restore.args.weight: Field required",
        ]


class TestTriggersAndNesting:
    """Triggers and nested runbooks must fill required parameters."""

    def test_trigger_leaves_required_parameter_unset(self) -> None:
        text = runbook_text(CLEAN) + "triggers:\n  - alertname: RegionDown\n"
        finding = only(lint(text), "missing-parameter")
        assert finding.line == line_of(text, "- alertname")
        assert "region" in finding.message

    def test_nested_runbook_missing_parameter(self, tmp_path: Path) -> None:
        (tmp_path / "inner.yaml").write_text(
            runbook_text(CLEAN).replace("name: sample", "name: inner")
        )
        text = runbook_text(
            "- id: nest\n  template: runbook\n  args: {runbook: inner}\n"
            "  restore: {template: delay, args: {duration: 1}}\n"
        )
        finding = only(lint(text, tmp_path), "missing-parameter")
        assert finding.task == "nest"
        assert "region" in finding.message


class TestLoadRunbook:
    """load_runbook refuses any runbook with findings, carrying them."""

    def test_invalid_never_loads(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.yaml"
        path.write_text(runbook_text(CLEAN.replace("template: wait_for", "template: nope")))
        with pytest.raises(RunbookInvalid) as caught:
            load_runbook(path)
        assert caught.value.findings[0].code == "unknown-template"
        assert caught.value.type_name() == "RunbookError"
        assert str(path) in str(caught.value)

    def test_unreadable_file_is_a_finding(self, tmp_path: Path) -> None:
        findings = lint_file(tmp_path / "missing.yaml")
        assert codes(findings) == ["io"]
        (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
        assert codes(lint_file(tmp_path / "bin.yaml")) == ["io"]

    def test_format_is_one_line(self) -> None:
        finding = Finding(file="a.yaml", line=3, task="t", code="cycle", message="m")
        assert finding.format() == "a.yaml:3: t: m"
        assert Finding(file="a.yaml", line=1, code="yaml", message="m").format() == "a.yaml:1: -: m"
