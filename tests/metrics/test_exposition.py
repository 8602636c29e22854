"""``promtool check metrics`` passes on every /metrics the project serves: the lab (live
mode, with traffic), the worker's SDK endpoint, and the trigger server."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import PauseInput, RebalancerInput
from orchestrator.contracts.runbook import RunbookRunInput, RunOutcome
from orchestrator.lab.config import DemandConfig
from orchestrator.lab.memory import URL, MemoryFleet
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import Runbook
from orchestrator.temporal import data_converter, metrics_runtime
from orchestrator.waiting import wait_until_async
from testkit.lab import ROOMY_RPS, lab_config
from testkit.temporal import new_worker
from testkit.triggers import AUTH, MemoryStarter, make_app
from tests.fixtures.lab import LabFactory
from tests.fixtures.ports import free_port
from tests.metrics.promtool import check_metrics
from tests.triggers.payloads import alert, notification, runbook
from tests.triggers.servers import serve_app
from workflows.rebalancer import TrafficRebalanceWorkflow
from workflows.runbook import RunbookWorkflow

pytestmark = pytest.mark.server  # promtool is a subprocess; every test here starts a server


async def test_lab_live(start_lab: LabFactory) -> None:
    lab = await start_lab(mode="live")
    async with lab.http() as http:
        for i in range(40):
            await http.get("/edge/nyc", params={"user": f"u-{i}"})
        text = (await http.get("/metrics")).text
    assert "lab_region_requests_total{" in text
    assert "lab_pop_request_duration_seconds_bucket{" in text
    assert check_metrics(text) == ""


async def test_lab_model(start_lab: LabFactory) -> None:
    lab = await start_lab(mode="model")
    async with lab.http() as http:
        text = (await http.get("/metrics")).text
    assert "lab_region_latency_p99_seconds{" in text
    assert check_metrics(text) == ""


RUNBOOK = """
name: metrics-drill
kind: drill
parameters:
  region: {type: region, default: eu-west}
tasks:
  - id: web-down
    template: service_weight
    args: {region: "${params.region}", service: web, weight: 0.5}
    restore: auto
"""


HELD = """
name: metrics-held
kind: drill
tasks:
  - id: web-down
    template: service_weight
    args: {region: eu-west, service: web, weight: 0}
    steps: "2 x 50%"
    wait: 0.2
    gate_holds: 2
    gates: ["error_rate in us-east < 0.05"]
    restore: auto
"""


def drill(text: str = RUNBOOK) -> Runbook:
    return bind(Runbook.model_validate(yaml.safe_load(text)), {})


async def test_worker_sdk_and_orchestrator(dev_env: WorkflowEnvironment, tmp_path: Path) -> None:
    """The worker's endpoint: the SDK's metrics and the orchestrator's own, after a real run."""
    address = f"127.0.0.1:{free_port()}"
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        namespace=dev_env.client.namespace,
        data_converter=data_converter,
        runtime=metrics_runtime(address),
    )
    queue = f"m-{uuid.uuid4().hex[:8]}"
    fleet = MemoryFleet(lab_config(demand=DemandConfig(total_rps=ROOMY_RPS)), faults=True)
    settings = Settings(task_queue=queue, fleet_url=URL, state_dir=tmp_path)
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
    try:
        async with (
            new_worker(client, registry.activities(ctx), task_queue=queue),
            httpx.AsyncClient(timeout=5) as http,
        ):
            report = await client.execute_workflow(
                RunbookWorkflow.run,
                RunbookRunInput(runbook=drill(), requested_by="test"),
                id=f"metrics-{queue}",
                task_queue=queue,
            )
            # a gate that keeps failing: held twice, then rolled back
            async with fleet.http() as lab:
                faults = {"error_rate": {"us-east": 0.3}}
                (await lab.post("/lab/faults", json=faults)).raise_for_status()
            held = await runbook_result(
                await client.start_workflow(
                    RunbookWorkflow.run,
                    RunbookRunInput(runbook=drill(HELD), requested_by="test"),
                    id=f"held-{queue}",
                    task_queue=queue,
                )
            )
            text = (await http.get(f"http://{address}/metrics")).text
    finally:
        await fleet.aclose()
    assert report.outcome == RunOutcome.COMPLETED
    assert "temporal_request_total{" in text
    # durations in seconds: a 50 ms bucket is le="0.05" (in ms it would be le="50")
    latency = [x for x in text.splitlines() if x.startswith("temporal_request_latency_bucket")]
    assert any('le="0.05"' in x for x in latency)
    assert "orchestrator_runs_started_total{" in text
    ended = [
        line for line in text.splitlines() if line.startswith("orchestrator_runs_ended_total{")
    ]
    assert ended and 'outcome="completed"' in ended[0] and 'runbook="metrics-drill"' in ended[0]
    assert "orchestrator_task_duration_seconds_bucket{" in text
    assert "orchestrator_task_running{" in text
    assert held.outcome == RunOutcome.ROLLED_BACK
    [holds] = [
        line for line in text.splitlines() if line.startswith("orchestrator_gate_holds_total")
    ]
    assert 'runbook="metrics-held"' in holds and 'task="web-down"' in holds
    assert holds.endswith(" 2")
    assert 'outcome="rolled_back",runbook="metrics-held"' in text
    assert check_metrics(text) == ""


async def test_trigger_server() -> None:
    async with (
        serve_app(make_app([runbook("drain")], MemoryStarter())) as base,
        httpx.AsyncClient(timeout=5, headers=AUTH) as http,
    ):
        # an alert no runbook is triggered by: counted as ignored (no_rule)
        posted = await http.post(
            f"{base}/v1/alerts/alertmanager",
            json=notification(alert(alertname="Unrouted", region="eu-west")),
        )
        assert posted.status_code < 300
        answer = await http.get(f"{base}/metrics")
    assert 'orchestrator_alerts_total{outcome="ignored",reason="no_rule"' in answer.text
    assert check_metrics(answer.text) == ""


async def test_worker_rebalancer(dev_env: WorkflowEnvironment, tmp_path: Path) -> None:
    """The rebalancer's epoch, last good epoch, published version, spread and pause, as the
    shipped rules read them, after real epochs and a pause."""
    address = f"127.0.0.1:{free_port()}"
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        namespace=dev_env.client.namespace,
        data_converter=data_converter,
        runtime=metrics_runtime(address),
    )
    queue = f"r-{uuid.uuid4().hex[:8]}"
    fleet = MemoryFleet(lab_config(demand=DemandConfig(total_rps=ROOMY_RPS)))
    settings = Settings(task_queue=queue, fleet_url=URL, state_dir=tmp_path)
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
    try:
        async with (
            new_worker(client, registry.activities(ctx), task_queue=queue),
            httpx.AsyncClient(timeout=5) as http,
        ):
            handle = await client.start_workflow(
                TrafficRebalanceWorkflow.run,
                RebalancerInput(epoch_s=0.5, window_s=5),
                id=f"rebalancer-{queue}",
                task_queue=queue,
            )

            async def two_epochs() -> bool:
                status = await handle.query(TrafficRebalanceWorkflow.status)
                return len(status.epochs) >= 2

            assert await wait_until_async(two_epochs, timeout_s=60)
            await handle.execute_update(TrafficRebalanceWorkflow.pause, PauseInput(by="test"))
            text = (await http.get(f"http://{address}/metrics")).text
            await handle.terminate("test over")
    finally:
        await fleet.aclose()
    values = {
        line.split("{", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("orchestrator_rebalancer_")
    }
    assert values["orchestrator_rebalancer_paused"] == 1
    assert values["orchestrator_rebalancer_epoch"] >= 2
    assert values["orchestrator_rebalancer_last_good_epoch"] >= 1
    assert values["orchestrator_rebalancer_published_version"] >= 1
    assert "orchestrator_rebalancer_utilization_spread" in values
    assert values["orchestrator_rebalancer_epochs_total"] >= 1
    assert check_metrics(text) == ""
