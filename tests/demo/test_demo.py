"""The demo's own promises: one clear line when it cannot start, nothing left running after."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.demo.run import demo_lab_config
from orchestrator.demo.scenarios import ScenarioSummary
from orchestrator.demo.stack import DemoError, DemoPorts, DemoStack
from orchestrator.lab.config import LabConfig
from orchestrator.processes import group_alive
from tests.fixtures.ports import free_port


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
