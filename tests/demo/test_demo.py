"""The demo's own promises: one clear line when it cannot start, nothing left running after."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.contracts.load_test import LoadTestResult, load_test_owner
from orchestrator.demo.run import DemoOptions, demo_lab_config, haproxy_lab_config
from orchestrator.demo.scenarios import ScenarioSummary, restore_verdict
from orchestrator.demo.stack import DemoError, DemoPorts, DemoStack
from orchestrator.lab.config import DEFAULT_CONFIG_PATH, LabConfig
from orchestrator.policy.rebalance.inputs import Override
from orchestrator.processes import group_alive
from tests.fixtures.ports import free_port
from tests.fixtures.processes import alive
from tests.reports import samples


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _ports(**taken: int) -> DemoPorts:
    ports = {"temporal": free_port(), "ui": free_port(), "lab": free_port()}
    return DemoPorts(**(ports | taken))


class TestPortTaken:
    """A port in use stops the demo before it starts anything, naming the port and the option."""

    def test_check_names_the_option(self, taken_port: int) -> None:
        with pytest.raises(DemoError, match=f"port {taken_port} is already in use.*--lab-port"):
            _ports(lab=taken_port).check_free()

    def test_cli_prints_one_line(self, taken_port: int, tmp_path: Path) -> None:
        ports = _ports(temporal=taken_port)
        result = CliRunner().invoke(
            app,
            [
                "demo",
                "--out",
                str(tmp_path),
                "--temporal-port",
                str(ports.temporal),
                "--ui-port",
                str(ports.ui),
                "--lab-port",
                str(ports.lab),
            ],
        )
        assert result.exit_code == 1
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "--temporal-port" in lines[0], result.output
        assert "Traceback" not in result.output
        assert not (tmp_path / "logs").exists()  # nothing was started

    def test_unknown_scenario(self, tmp_path: Path) -> None:
        result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), "--only", "nope"])
        assert result.exit_code == 1
        assert "--only nope: not a scenario" in result.output


class TestLabConfig:
    """The demo lab is the shipped lab, unbalanced at start, with a PyTorch job long enough
    for two hits and web queues deep enough that the lab's own scheduling stalls are not 503s."""

    def test_is_a_valid_lab(self) -> None:
        config = LabConfig.model_validate(yaml.safe_load(yaml.safe_dump(demo_lab_config())))
        assert config.initial_routing == "nearest"
        job = config.training.jobs[0]
        assert job.kind == "torch"
        # two faults, each hit once the run is two checkpoints past its resume point
        assert job.total_steps >= 3 * 2 * job.checkpoint_every

    def test_web_queues_absorb_a_stall_of_the_lab(self) -> None:
        config = LabConfig.model_validate(yaml.safe_load(yaml.safe_dump(demo_lab_config())))
        for region in config.regions:
            web = region.services["web"]
            assert web.queue_limit >= 4 * web.slots, region.name


class TestHAProxyDataPlane:
    """``--data-plane haproxy`` runs every scenario at 10x the traffic and pools: the lab
    behind HAProxy has the training cluster, its faults and the buildings' power."""

    def _options(self, tmp_path: Path, only: list[str] | None = None) -> DemoOptions:
        return DemoOptions(tmp_path, _ports(), False, Console(), None, only, "haproxy")

    def test_runs_every_scenario_at_ten_times_the_rate(self, tmp_path: Path) -> None:
        options = self._options(tmp_path)
        assert options.scenarios == ["rebalance", "loadtest", "drain", "training", "building"]
        assert options.rps == 1200.0
        python = DemoOptions(tmp_path, _ports(), False, Console())
        assert python.rps == 120.0 and python.scenarios == options.scenarios

    def test_only_keeps_the_scenarios_order(self, tmp_path: Path) -> None:
        assert self._options(tmp_path, ["building", "drain"]).scenarios == ["drain", "building"]

    def test_cli_names_an_unknown_data_plane(self, tmp_path: Path) -> None:
        result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), "--data-plane", "nginx"])
        assert result.exit_code == 1
        assert "--data-plane must be python or haproxy, not 'nginx'" in result.output

    def test_lab_has_ten_times_the_shipped_pools_and_the_demos_jobs(self) -> None:
        config = LabConfig.model_validate(yaml.safe_load(yaml.safe_dump(haproxy_lab_config())))
        shipped = LabConfig.model_validate(yaml.safe_load(DEFAULT_CONFIG_PATH.read_text()))
        demo = LabConfig.model_validate(yaml.safe_load(yaml.safe_dump(demo_lab_config())))
        assert config.initial_routing == "nearest"
        assert config.training.jobs == demo.training.jobs
        for region, original in zip(config.regions, shipped.regions, strict=True):
            for service in ("web", "sessions"):
                pool, before = region.services[service], original.services[service]
                assert (pool.slots, pool.queue_limit) == (
                    10 * before.slots,
                    10 * before.queue_limit,
                ), (region.name, service)


@pytest.mark.server  # starts the demo's children as processes
class TestShutdown:
    """Stopping the stack ends every process it started, children of children included."""

    def test_nothing_left(self, tmp_path: Path) -> None:
        stack = DemoStack(tmp_path, _ports())
        config = tmp_path / "lab.yaml"
        config.write_text(yaml.safe_dump(demo_lab_config()))
        try:
            stack.start_lab(config)
            stack.start_traffic(20, 600)  # `lab traffic` runs Locust as its own child
            stack.check_alive()
        finally:
            left = stack.stop()
        assert left == []
        assert [c.name for c in stack.children] == ["lab", "traffic"]
        assert not any(group_alive(c.process.pid) for c in stack.children)

    def test_nothing_left_of_the_haproxy_lab(self, tmp_path: Path) -> None:
        stack = DemoStack(tmp_path, _ports(), data_plane="haproxy")
        config = tmp_path / "lab.yaml"
        config.write_text(yaml.safe_dump(haproxy_lab_config()))
        try:
            stack.start_lab(config)
            served = httpx.get(f"{stack.lab_url}/healthz", timeout=10).json()
            assert served["data_plane"] == "haproxy"
            started = list(served["pids"].values())  # HAProxy's and each region backend's
            stack.start_traffic(20, 600)
            stack.check_alive()
        finally:
            left = stack.stop()
        assert left == []
        # HAProxy and the region backends are the lab's children: stopped with it
        assert not any(alive(pid) for pid in started)

    def test_dead_child_is_named(self, tmp_path: Path) -> None:
        stack = DemoStack(tmp_path, _ports())
        stack._spawn("broken", ["lab", "serve", "--mode", "nonsense"])
        stack.children[0].process.wait(30)
        with pytest.raises(DemoError, match=r"broken exited with status \d+; see .*broken.log"):
            stack.check_alive()
        assert stack.stop() == []


class TestSummary:
    """Every scenario's summary line carries what happened, its duration and users' errors."""

    def test_table_has_a_row_per_scenario(self) -> None:
        from rich.console import Console

        from orchestrator.demo.run import summary_table

        rows = [
            ScenarioSummary(
                name=n,
                workflow_ids=[n],
                ok=n != "b",
                what=f"{n} happened",
                duration_s=3,
                user_requests=100,
                user_5xx=2,
                ettr=0.9,
            )
            for n in ("a", "b")
        ]
        console = Console(width=200, record=True)
        console.print(summary_table(rows))
        text = console.export_text()
        assert "a happened" in text and "b happened" in text
        assert "FAILED" in text and "2 of 100" in text and "90.0%" in text


class TestRestoreVerdict:
    """After its load test the demo counts routing as put back by the workflow's judgement
    plus its own look at the rebalancer's holds, not by the exact table: the rebalancer
    runs on and may publish between the restore and the demo's read."""

    TABLE = {"web": {"eu-west": 0.3, "us-east": 0.7}}
    MOVED = {"web": {"eu-west": 0.28, "us-east": 0.72}}

    def _result(self, restored: bool = True, how: str = "") -> LoadTestResult:
        result = samples.load_test().result
        return result.model_copy(update={"routing_restored": restored, "routing_check": how})

    def test_exact_table(self) -> None:
        assert restore_verdict(self._result(), [], self.TABLE, self.TABLE) == (
            True,
            "routing restored exactly",
        )

    def test_rebalancer_published_since(self) -> None:
        ok, what = restore_verdict(self._result(), [], self.TABLE, self.MOVED)
        assert ok and "rebalancer has published since" in what

    def test_workflow_says_not_restored(self) -> None:
        result = self._result(restored=False, how="eu-west carries 40% of demand")
        ok, what = restore_verdict(result, [], self.TABLE, self.MOVED)
        assert not ok and what == "routing NOT restored: eu-west carries 40% of demand"

    def test_hold_left_behind(self) -> None:
        result = self._result()
        hold = Override(region="eu-west", owner=load_test_owner(result.workflow_id), pin_share=0.5)
        drain = Override(region="us-east", owner="runbook:us-east", max_share=0.0)
        ok, what = restore_verdict(result, [hold, drain], self.TABLE, self.TABLE)
        assert not ok and what == "routing NOT restored: the test still holds eu-west"

    def test_anothers_hold_is_not_the_tests(self) -> None:
        drain = Override(region="eu-west", owner="runbook:eu-west", max_share=0.0)
        assert restore_verdict(self._result(), [drain], self.TABLE, self.TABLE)[0]
