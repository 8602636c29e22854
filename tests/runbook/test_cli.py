"""`orchestrator runbook lint|plan`: exit codes, one line per finding, JSON."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.commands.runbook import app

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
runner = CliRunner()

BAD = """\
name: bad
kind: drain
tasks:
  - id: a
    template: nope
  - id: b
    template: delay
    args: {duration: 1s}
    depends_on: [c]
"""


class TestLintCommand:
    """Clean files exit 0; findings print as file:line: task: message and exit 1."""

    def test_clean(self) -> None:
        result = runner.invoke(app, ["lint", *map(str, sorted(RUNBOOKS.glob("*.yaml")))])
        assert result.exit_code == 0, result.output
        assert "no findings" in result.output

    def test_findings(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.yaml"
        path.write_text(BAD)
        result = runner.invoke(app, ["lint", str(path)])
        assert result.exit_code == 1
        lines = result.output.strip().splitlines()
        assert f"{path}:5: a: unknown template 'nope'" in lines[0]
        assert lines[1] == f"{path}:9: b: depends_on: no task 'c'"

    def test_json(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.yaml"
        path.write_text(BAD)
        result = runner.invoke(app, ["lint", "--json", str(path)])
        assert result.exit_code == 1
        body = json.loads(result.output)
        assert [f["code"] for f in body["findings"]] == ["unknown-template", "unknown-dependency"]
        assert body["findings"][0]["line"] == 5


class TestPlanCommand:
    """plan shows layers and the critical path, and refuses a missing parameter in one line."""

    def test_plan_json(self) -> None:
        result = runner.invoke(
            app, ["plan", str(RUNBOOKS / "region-drain.yaml"), "-p", "region=r1", "--json"]
        )
        assert result.exit_code == 0, result.output
        plan = json.loads(result.output)
        assert plan["layers"][0] == ["page-oncall", "steady-state"]
        assert plan["skipped"] == ["steady-state"]
        assert plan["critical_path"]["tasks"][-1] == "verify-drained"
        assert plan["makespan_s"] <= plan["sequential_s"]

    def test_missing_parameter(self) -> None:
        result = runner.invoke(app, ["plan", str(RUNBOOKS / "region-drain.yaml")])
        assert result.exit_code == 1
        assert "parameter region is required" in result.output
        assert "Traceback" not in result.output
