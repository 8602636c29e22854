"""``orchestrator triggers``: list what triggers what; serve refuses to start unsafe or broken."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app
from tests.triggers.payloads import TOKEN

RUNBOOK = """
name: drain-cli
kind: drain
parameters:
  region: {type: region}
tasks:
  - id: hold
    template: delay
    args: {duration: 1s}
triggers:
  - alertname: RegionErrorRate
    matchers: ['severity="critical"']
    parameters: {region: region}
    cooldown: 10m
"""

runner = CliRunner()


def _dir(tmp_path: Path, text: str = RUNBOOK) -> Path:
    (tmp_path / "drain-cli.yaml").write_text(text)
    return tmp_path


class TestList:
    """``triggers list --json`` shows each trigger with its runbook, matchers and cooldown."""

    def test_json(self, tmp_path: Path) -> None:
        result = runner.invoke(
            app, ["triggers", "list", "--runbooks", str(_dir(tmp_path)), "--json"]
        )
        assert result.exit_code == 0, result.output
        [row] = json.loads(result.stdout)
        assert row["runbook"] == "drain-cli" and row["alertname"] == "RegionErrorRate"
        assert row["matchers"] == 'severity="critical"'
        assert row["parameters"] == "region<-region" and row["dedup"] == "group"


class TestServeRefuses:
    """``serve`` exits 2 with one line, before binding, when it could not run safely."""

    def test_no_credentials(self, tmp_path: Path) -> None:
        result = runner.invoke(
            app,
            ["triggers", "serve", "--runbooks", str(_dir(tmp_path))],
            env={"ORCHESTRATOR_TRIGGERS_TOKEN": "", "ORCHESTRATOR_TRIGGERS_HMAC_SECRET": ""},
        )
        assert result.exit_code == 2
        assert "ORCHESTRATOR_TRIGGERS_TOKEN" in result.output
        assert "Traceback" not in result.output

    def test_invalid_runbook_names_file_and_line(self, tmp_path: Path) -> None:
        broken = RUNBOOK.replace("template: delay", "template: no_such_template")
        result = runner.invoke(
            app,
            ["triggers", "serve", "--runbooks", str(_dir(tmp_path, broken))],
            env={"ORCHESTRATOR_TRIGGERS_TOKEN": TOKEN},
        )
        assert result.exit_code == 2
        assert "drain-cli.yaml:" in result.output and "no_such_template" in result.output
