"""A task's ``gate_holds``: a failing gate holds the task at its step and is reread,
so a transient passes and a lasting failure still rolls back, after the holds."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from orchestrator.contracts.runbook import TaskPhase
from orchestrator.lab.config import DemandConfig
from orchestrator.lab.server import LabThread, build_app
from tests.workflows.conftest import ROOMY_RPS, Stack, lab_config
from tests.workflows.runbook.conftest import runbook, start, wait_phase

HELD = """
name: held
kind: recovery
parameters:
  region: {type: region}
tasks:
  - id: web-down
    template: service_weight
    args: {region: "${params.region}", service: web, weight: 0}
    steps: "2 x 50%"
    wait: 0.5
    gate_holds: HOLDS
    gates: ["error_rate in us-east < 0.05"]
    restore: auto
"""


@pytest.fixture
def model_lab() -> Iterator[LabThread]:
    """The model lab with room to take eu-west's web load, and its fault routes, so a
    test can make a gate fail and pass."""
    config = lab_config(initial_routing="nearest", demand=DemandConfig(total_rps=ROOMY_RPS))
    with LabThread(build_app(config, mode="model", faults=True)) as lab:
        yield lab


def held(holds: int) -> object:
    return runbook(HELD.replace("HOLDS", str(holds)), region="eu-west")


class TestGateHolds:
    """Holding rereads the gates after ``wait``; each hold is an event the operator sees."""

    async def test_a_transient_failure_holds_then_passes(self, stack: Stack) -> None:
        async with httpx.AsyncClient(base_url=stack.lab_url) as lab:
            (
                await lab.post("/lab/faults", json={"error_rate": {"us-east": 0.3}})
            ).raise_for_status()
            handle = await start(stack, held(10))
            await wait_phase(handle, "web-down", TaskPhase.BLOCKED)
            (await lab.delete("/lab/faults")).raise_for_status()
        report = await handle.result()
        assert report.outcome == "completed", report.events
        assert any("web-down: holding at step 1 (1/10)" in e for e in report.events)
        assert (await stack.fleet.topology()).service_weights["eu-west/web"] == 0.0

    async def test_a_lasting_failure_rolls_back_after_the_holds(self, stack: Stack) -> None:
        before = (await stack.fleet.topology()).service_weights.get("eu-west/web", 1.0)
        async with httpx.AsyncClient(base_url=stack.lab_url) as lab:
            (
                await lab.post("/lab/faults", json={"error_rate": {"us-east": 0.3}})
            ).raise_for_status()
            try:
                report = await (await start(stack, held(2))).result()
            finally:
                (await lab.delete("/lab/faults")).raise_for_status()
        assert report.outcome == "rolled_back"
        holds = [e for e in report.events if "web-down: holding at step 1" in e]
        assert [h.split("(")[1].split(")")[0] for h in holds] == ["1/2", "2/2"]
        assert any("gate failed after step 1" in e and "(held 2 times)" in e for e in report.events)
        assert (await stack.fleet.topology()).service_weights.get("eu-west/web", 1.0) == before
