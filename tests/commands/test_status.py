"""``orchestrator status``: a region's status says what our drains did to it, not only the
fleet's static configuration."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.commands.status import region_states
from orchestrator.policy.rebalance.inputs import Override
from tests.fixtures.lab import RunningLab
from tests.fixtures.ports import free_port

CONFIGURED = {"us-east": "active", "us-west": "active", "eu-west": "active"}


def drain_hold(region: str, share: float) -> Override:
    return Override(region=region, owner=f"runbook:{region}", reason="drain", max_share=share)


class TestRegionStates:
    """A region shows draining while a drain of it is open (restoring for a restore), drained
    while a drain's hold keeps it at 0 with no run open, and the fleet's status otherwise;
    a load test's pin or another owner's cap is not a drain."""

    def test_nothing_open_nothing_held(self) -> None:
        assert region_states(CONFIGURED, {}, []) == CONFIGURED

    def test_drained_by_a_hold_at_zero(self) -> None:
        shown = region_states(CONFIGURED, {}, [drain_hold("eu-west", 0.0)])
        assert shown == {**CONFIGURED, "eu-west": "drained"}

    def test_open_drain_is_draining_even_when_held_at_zero(self) -> None:
        shown = region_states(CONFIGURED, {"eu-west": "drain"}, [drain_hold("eu-west", 0.0)])
        assert shown["eu-west"] == "draining"

    def test_open_restore_is_restoring(self) -> None:
        shown = region_states(CONFIGURED, {"eu-west": "restore"}, [drain_hold("eu-west", 0.0)])
        assert shown["eu-west"] == "restoring"

    def test_a_hold_above_zero_with_no_run_says_how_much(self) -> None:
        shown = region_states(CONFIGURED, {}, [drain_hold("eu-west", 0.25)])
        assert shown["eu-west"] == "held at 25%"

    def test_other_owners_are_not_drains(self) -> None:
        pin = Override(region="eu-west", owner="loadtest:lt-1", pin_share=0.5)
        cap = Override(region="us-east", owner="runbook:eu-west", max_share=0.0)
        assert region_states(CONFIGURED, {}, [pin, cap]) == CONFIGURED

    def test_fleet_status_kept_when_no_run_says_more(self) -> None:
        configured = {**CONFIGURED, "us-west": "abnormal"}
        assert region_states(configured, {}, [])["us-west"] == "abnormal"


class TestWithoutTemporal:
    """With Temporal unreachable status still shows the fleet, and says in one line that
    drains are unknown."""

    def test_table_and_json(self, lab_server: RunningLab, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
        runner = CliRunner()
        result = runner.invoke(app, ["status", "--fleet", lab_server.url])
        assert result.exit_code == 0, result.output
        notes = [line for line in result.output.splitlines() if "drains unknown" in line]
        assert len(notes) == 1 and "cannot reach Temporal" in result.output
        result = runner.invoke(app, ["status", "--json", "--fleet", lab_server.url])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["runs"]["known"] is False
        assert {r["status"] for r in report["regions"]} == {"active"}
