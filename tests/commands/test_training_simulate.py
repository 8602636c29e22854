"""``orchestrator training simulate``: simulation and formulas side by side; bad numbers, one line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app

BASE = [
    "training",
    "simulate",
    "--gpus",
    "16384",
    "--days",
    "54",
    "--failures-per-1000-node-days",
    "6.5",
    "--checkpoint-interval",
    "60",
    "--restart-minutes",
    "5",
]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


class TestSimulate:
    """The command prints ETTR and best intervals by simulation and by each formula."""

    def test_json_has_simulation_and_formulas(self) -> None:
        code, out, _ = invoke(*BASE, "--checkpoint-cost-seconds", "1", "--runs", "8", "--json")
        assert code == 0
        data = json.loads(out)
        assert data["inputs"]["nodes"] == 2048
        assert data["mtbf_s"] / 3600 == pytest.approx(1.8, abs=0.01)
        # Paper: 60-minute checkpoints at 16k GPUs on RSC-1 give ETTR about 0.70.
        assert data["simulation"]["mean_ettr"] == pytest.approx(0.70, abs=0.03)
        assert data["formulas"]["meta_ettr"] == pytest.approx(0.676, abs=0.002)
        assert not data["meta_model_holds"]
        best = data["simulation_best_interval_s"]
        assert best == pytest.approx(data["formulas"]["daly_s"], rel=0.3)
        assert data["simulation_best_ettr"] > data["simulation"]["mean_ettr"]

    def test_table_lists_every_method(self) -> None:
        code, out, _ = invoke(*BASE, "--runs", "4", "--seed", "2")
        assert code == 0
        for label in ("simulation", "4 simulated runs", "Meta", "exponential", "Young", "Daly"):
            assert label in out
        assert "does not hold" in out


class TestBadNumbers:
    """A bad number is one line on stderr naming the option, and a non-zero exit."""

    @pytest.mark.parametrize(
        ("option", "value", "message"),
        [
            ("--gpus", "abc", "--gpus must be an integer"),
            ("--gpus", "0", "--gpus must be at least 1"),
            ("--days", "-3", "--days must be greater than 0"),
            ("--failures-per-1000-node-days", "nan", "must be finite"),
            ("--checkpoint-interval", "0", "--checkpoint-interval must be greater than 0"),
            ("--restart-minutes", "-1", "--restart-minutes must be at least 0"),
            ("--checkpoint-cost-seconds", "x", "--checkpoint-cost-seconds must be a number"),
            ("--runs", "100000", "--runs must be at most 1000"),
        ],
    )
    def test_one_line_naming_the_option(self, option: str, value: str, message: str) -> None:
        args = list(BASE)
        if option in args:
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
        code, out, err = invoke(*args)
        assert code == 2
        assert message in err
        assert len(err.strip().splitlines()) == 1
        assert "Traceback" not in out + err
