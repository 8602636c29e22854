"""Inputs the fuzz campaign found handled badly, kept as fixed examples (one class per fix)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.commands.output import error_reason
from orchestrator.contracts.runbook import RunbookRunInput
from orchestrator.policy.rebalance.taiji import SolverInstance
from orchestrator.policy.snapshot import FleetSnapshot
from orchestrator.runbook import lint_text
from orchestrator.temporal import data_converter
from testkit.fuzz.probes import SOLVER_EXAMPLE


def _fails_in_one_line(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    err = result.stderr.strip()
    assert err.startswith("error:") and "\n" not in err, err
    return err


class TestValidationErrorsAreOneLine:
    """A pydantic error reaches the operator as one ``field: reason`` line, never pydantic's
    multi-line dump, and a document that is not an object says so in the user's words."""

    def test_empty_load_test_region_names_the_field(self) -> None:
        err = _fails_in_one_line(["loadtest", "run", ""])
        assert "region: String should have at least 1 character" in err

    def test_instance_that_is_not_an_object(self, tmp_path: Path) -> None:
        path = tmp_path / "null.json"
        path.write_text("null")
        err = _fails_in_one_line(["rebalance", "solve", "--input", str(path)])
        assert "the whole document: Input should be a valid dictionary" in err
        assert "SolverInstance" not in err


class TestFindingsAreOneLine:
    """A finding quoting a key or task id with a newline in it is still one line."""

    def test_key_with_a_newline(self) -> None:
        text = '"\\x97": []\n? "k\\n\\x99G"\n: []\n'
        findings = lint_text(text, "rb.yaml")
        assert findings
        for finding in findings:
            line = finding.format()
            assert "\n" not in line and "\x99" not in line, line
        assert any("k\\n\\x99G" in f.format() for f in findings)

    def test_task_id_with_a_newline(self) -> None:
        text = 'name: x\nkind: drain\ntasks:\n  - id: "a\\nb"\n    template: nope\n'
        findings = lint_text(text, "rb.yaml")
        assert findings
        assert all("\n" not in f.format() for f in findings)


class TestSolverNumbersAreFinite:
    """A solver instance with an infinite or absurdly large number is refused by name:
    an RTT of 1e200 ms used to crash the solver with OverflowError (RTT squared), and an
    infinite demand came back as a misleading 'no capacity left' infeasibility."""

    def _instance(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        data = json.loads(SOLVER_EXAMPLE.read_text())
        change(data)
        return data

    def test_huge_rtt_is_a_named_validation_error(self) -> None:
        data = self._instance(lambda d: d["pops"][0]["rtt_ms"].update({"us-east": 1e200}))
        with pytest.raises(ValidationError) as caught:
            SolverInstance.model_validate(data)
        assert error_reason(caught.value).startswith("pops.0.rtt_ms.us-east: ")

    def test_infinite_demand_and_capacity_are_refused(self) -> None:
        for change in (
            lambda d: d["pops"][0].update({"demand": math.inf}),
            lambda d: d["regions"][0].update({"capacity": math.inf}),
            lambda d: d["regions"][0].update({"utilization": math.inf}),
            lambda d: d["constraints"].update({"target_utilization": math.inf}),
        ):
            with pytest.raises(ValidationError, match="finite"):
                SolverInstance.model_validate(self._instance(change))

    def test_cli_says_which_field(self, tmp_path: Path) -> None:
        path = tmp_path / "rtt.json"
        data = self._instance(lambda d: d["pops"][0]["rtt_ms"].update({"us-east": 1e200}))
        path.write_text(json.dumps(data))
        err = _fails_in_one_line(["rebalance", "solve", "--input", str(path)])
        assert "pops.0.rtt_ms.us-east: Input should be less than or equal to" in err


class TestBadWorkflowInputFailsTheRun:
    """A start input that does not fit its ``*Input`` model (the counterexamples were
    ``{"bogus": 1}`` and ``None``) decodes to a non-retryable ``InvalidRequest`` naming
    the field: before, the SDK retried the first workflow task forever and the run hung.
    Other payloads keep the SDK's behaviour."""

    def _decode(self, value: Any, hint: type) -> Any:
        converter = data_converter.payload_converter
        [payload] = converter.to_payloads([value])
        return converter.from_payloads([payload], [hint])[0]

    def test_bad_and_missing_inputs_are_invalid_requests(self) -> None:
        for value, needle in (({"bogus": 1}, "runbook: Field required"), (None, "missing")):
            with pytest.raises(ApplicationError) as caught:
                self._decode(value, RunbookRunInput)
            assert caught.value.type == "InvalidRequest" and caught.value.non_retryable
            assert needle in str(caught.value) and "\n" not in str(caught.value)

    def test_other_models_still_raise_validation_errors(self) -> None:
        with pytest.raises(ValidationError):
            self._decode({"bogus": 1}, FleetSnapshot)


class TestCliFuzzNeverStartsServers:
    """The CLI fuzz draws no command that starts servers: a valid draw of one would run it
    in-process (the demo: a Temporal server, a lab and a worker for minutes, on fixed ports)."""

    def test_no_drawable_command_takes_a_port(self) -> None:
        from testkit.fuzz.probes import SERVING
        from testkit.fuzz.strategies import command_table

        drawable = command_table(app, SERVING)
        with_ports = sorted(
            " ".join(path)
            for path, options in drawable.items()
            if any(o.endswith("port") for o in options)
        )
        assert with_ports == []
        assert ("demo",) not in drawable

    def test_every_excluded_command_exists(self) -> None:
        from testkit.fuzz.probes import SERVING
        from testkit.fuzz.strategies import command_table

        assert SERVING - set(command_table(app, set())) == set()
