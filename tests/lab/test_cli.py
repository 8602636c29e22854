"""The CLI: `lab serve` as a real process, `status`, and `lab traffic` driving Locust."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.fixtures.lab import LabFactory, RunningLab, launch_lab
from tests.fixtures.ports import free_port
from tests.fixtures.processes import kill_group, wait_for_child, wait_gone

runner = CliRunner()


class TestServe:
    """`orchestrator lab serve` serves the contract; /lab exists only with --faults."""

    async def test_subprocess_without_faults(self, start_lab: LabFactory) -> None:
        lab = await start_lab(mode="model", subprocess=True, token="proc-token-1")
        headers = {"Authorization": "Bearer proc-token-1"}
        async with httpx.AsyncClient(base_url=lab.url, headers=headers) as client:
            truth = await client.get("/lab/truth")
            topology = await client.get("/v1/topology")
        assert truth.status_code == 404
        assert topology.status_code == 200
        assert lab._process is not None
        lab.stop()
        assert lab._process.stderr is not None
        assert b"proc-token-1" not in lab._process.stderr.read()

    def test_bad_config_is_one_line(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        bad = tmp_path / "lab.yaml"
        bad.write_text("regions: []\n")
        result = runner.invoke(app, ["lab", "serve", "--config", str(bad), "--port", "0"])
        assert result.exit_code == 1
        assert "error:" in result.output and "Traceback" not in result.output


class TestStatus:
    """`orchestrator status` shows regions and a routing summary, or one error line."""

    def test_json(self, lab_server: RunningLab) -> None:
        result = runner.invoke(app, ["status", "--json", "--fleet", lab_server.url])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert [r["region"] for r in report["regions"]] == ["us-east", "us-west", "eu-west"]
        assert sum(report["routing"]["demand_share"].values()) == pytest.approx(1.0)

    def test_table(self, lab_server: RunningLab) -> None:
        result = runner.invoke(app, ["status", "--fleet", lab_server.url])
        assert result.exit_code == 0, result.output
        assert "us-east" in result.output and "routing v" in result.output

    def test_unreachable(self) -> None:
        result = runner.invoke(app, ["status", "--fleet", f"http://127.0.0.1:{free_port()}"])
        assert result.exit_code == 1
        assert "error:" in result.output and "Traceback" not in result.output


@pytest.mark.server  # a lab thread and Locust processes
class TestTraffic:
    """`orchestrator lab traffic` runs Locust in its own process, spread over the PoPs."""

    def test_short_run_reaches_every_pop(self) -> None:
        lab = launch_lab(mode="live")
        try:
            result = runner.invoke(
                app, ["lab", "traffic", "--rps", "40", "--duration", "4", "--lab", lab.url]
            )
            health = httpx.get(f"{lab.url}/v1/health").json()
        finally:
            lab.stop()
        assert result.exit_code == 0, result.output
        by_pop = {p["pop"]: p["samples"] for p in health["pops"]}
        assert all(n > 0 for n in by_pop.values()), by_pop
        # nyc has 3x sea's demand weight
        assert by_pop["nyc"] > by_pop["sea"]
        total = sum(by_pop.values())
        assert 80 <= total <= 200  # ~40 rps for ~4 s

    def test_the_mix_follows_pop_weights_then_shifts(self) -> None:
        lab = launch_lab(mode="live", faults=True)
        try:
            result = runner.invoke(
                app,
                [
                    *("lab", "traffic", "--rps", "40", "--duration", "5", "--lab", lab.url),
                    *("--pop-weights", "nyc=1", "--shift-after", "2", "--shift-weights", "lon=1"),
                ],
            )
            served = httpx.get(f"{lab.url}/lab/truth").json()["edge_requests"]
        finally:
            lab.stop()
        assert result.exit_code == 0, result.output
        # Only nyc before the shift, only lon after it; no other PoP sees a request.
        assert set(served) == {"nyc", "lon"}
        assert sum(served["nyc"].values()) > 20 and sum(served["lon"].values()) > 20

    def test_unknown_pop_in_weights_is_one_line(self) -> None:
        lab = launch_lab(mode="live")
        try:
            result = runner.invoke(
                app, ["lab", "traffic", "--rps", "5", "--lab", lab.url, "--pop-weights", "mars=1"]
            )
        finally:
            lab.stop()
        assert result.exit_code != 0
        assert "--pop-weights" in result.output and "Traceback" not in result.output


@pytest.mark.server  # the CLI and Locust as processes
class TestTrafficStopsWithItsParent:
    """`orchestrator lab traffic` stopped by SIGTERM or SIGINT stops its Locust first:
    Locust kept sending traffic after its parent was gone (seen twice)."""

    @pytest.mark.slow
    @pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
    def test_no_locust_left(self, how: signal.Signals) -> None:
        lab = launch_lab(mode="live", faults=True)
        try:
            cli = subprocess.Popen(
                [
                    *(sys.executable, "-c", "from orchestrator.cli import app; app()"),
                    *("lab", "traffic", "--rps", "20", "--duration", "300", "--lab", lab.url),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            locust = wait_for_child(cli)
            try:
                _wait_for_requests(lab.url)
                cli.send_signal(how)
                cli.wait(timeout=60)
                assert wait_gone(locust), "Locust outlived `lab traffic`"
                before = _served(lab.url)
                time.sleep(1.0)
                assert _served(lab.url) == before  # nothing is sending any more
            finally:
                kill_group(locust)
                if cli.poll() is None:
                    cli.kill()
        finally:
            lab.stop()
        assert cli.returncode == 130
        assert "Traceback" not in (cli.stderr.read() if cli.stderr else "")


@pytest.mark.server  # a lab thread, the CLI and Locust as processes
class TestTrafficByHand:
    """`orchestrator lab traffic --rps N` as the README types it: aimed at the fleet that
    ORCHESTRATOR_FLEET_URL names, and running until stopped (it stopped after 60 s, and
    a drain typed a minute later drained a region nobody was using)."""

    @pytest.mark.slow
    def test_until_stopped_at_the_configured_fleet(self) -> None:
        lab = launch_lab(mode="live", faults=True)
        try:
            cli = subprocess.Popen(
                [
                    *(sys.executable, "-c", "from orchestrator.cli import app; app()"),
                    *("lab", "traffic", "--rps", "20"),
                ],
                env={**os.environ, "ORCHESTRATOR_FLEET_URL": lab.url},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            locust = wait_for_child(cli)
            try:
                _wait_for_requests(lab.url)
                command = Path(f"/proc/{locust}/cmdline").read_text().split("\0")
                assert "--run-time" not in command, command
                cli.send_signal(signal.SIGTERM)
                out, _ = cli.communicate(timeout=60)
                assert wait_gone(locust)
            finally:
                kill_group(locust)
                if cli.poll() is None:
                    cli.kill()
        finally:
            lab.stop()
        assert "until stopped" in out and lab.url in out


def _served(url: str) -> int:
    edge = httpx.get(f"{url}/lab/truth").json()["edge_requests"]
    return sum(sum(by_region.values()) for by_region in edge.values())


def _wait_for_requests(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _served(url) == 0:
        assert time.monotonic() < deadline, "Locust sent nothing"
        time.sleep(0.2)
