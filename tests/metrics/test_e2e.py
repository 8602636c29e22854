"""One real Prometheus scrapes the three endpoints (the live lab, the worker's SDK endpoint
after a real runbook run on Temporal, the trigger server with its bearer token) with the
shipped rules loaded: every target is up, each one's metrics are queryable, every rule
evaluates without error."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.contracts.runbook import RunbookRunInput
from orchestrator.lab.config import DemandConfig
from orchestrator.lab.memory import URL, MemoryFleet
from orchestrator.temporal import data_converter, metrics_runtime
from orchestrator.waiting import wait_until_async
from testkit.lab import ROOMY_RPS, lab_config
from testkit.temporal import new_worker
from testkit.triggers import AUTH, MemoryStarter, make_app
from tests.fixtures.lab import LabFactory
from tests.fixtures.ports import free_port
from tests.metrics.test_exposition import drill
from tests.triggers.payloads import TOKEN, alert, notification, runbook
from tests.triggers.servers import PROMETHEUS, binary_server, serve_app
from workflows.runbook import RunbookWorkflow

pytestmark = pytest.mark.server

RULES = Path(__file__).parents[2] / "deploy" / "prometheus" / "orchestrator.rules.yml"
#: one series each endpoint must have, by job
EXPECTED = {
    "lab": "lab_pop_requests_total",
    "worker": 'orchestrator_runs_ended_total{outcome="completed"}',
    "triggers": 'orchestrator_alerts_total{outcome="ignored"}',
}


def config(tmp: Path, lab: str, worker: str, triggers: str) -> Path:
    (tmp / "token").write_text(TOKEN)
    path = tmp / "prometheus.yml"
    path.write_text(
        f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ["{RULES}"]
scrape_configs:
  - {{job_name: lab, static_configs: [{{targets: ["{lab}"]}}]}}
  - {{job_name: worker, static_configs: [{{targets: ["{worker}"]}}]}}
  - job_name: triggers
    authorization: {{type: Bearer, credentials_file: "{tmp / "token"}"}}
    static_configs: [{{targets: ["{triggers}"]}}]
"""
    )
    return path


async def query(http: httpx.AsyncClient, prom: str, promql: str) -> list[dict[str, Any]]:
    answer = (await http.get(f"{prom}/api/v1/query", params={"query": promql})).json()
    return list(answer["data"]["result"])


async def test_prometheus_scrapes_everything(
    start_lab: LabFactory, dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    lab = await start_lab(mode="live")
    worker_address = f"127.0.0.1:{free_port()}"
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        namespace=dev_env.client.namespace,
        data_converter=data_converter,
        runtime=metrics_runtime(worker_address),
    )
    queue = f"e2e-{uuid.uuid4().hex[:8]}"
    fleet = MemoryFleet(lab_config(demand=DemandConfig(total_rps=ROOMY_RPS)))
    settings = Settings(task_queue=queue, fleet_url=URL, state_dir=tmp_path)
    ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
    port = free_port()
    prom = f"http://127.0.0.1:{port}"
    try:
        async with (
            new_worker(client, registry.activities(ctx), task_queue=queue),
            serve_app(make_app([runbook("drain")], MemoryStarter())) as triggers,
            httpx.AsyncClient(timeout=5) as http,
        ):
            await client.execute_workflow(
                RunbookWorkflow.run,
                RunbookRunInput(runbook=drill(), requested_by="test"),
                id=f"e2e-{queue}",
                task_queue=queue,
            )
            posted = await http.post(
                f"{triggers}/v1/alerts/alertmanager",
                json=notification(alert(alertname="Unrouted", region="eu-west")),
                headers=AUTH,
            )
            assert posted.status_code < 300
            async with lab.http() as lab_http:
                for i in range(20):
                    await lab_http.get("/edge/nyc", params={"user": f"u-{i}"})
            cfg = config(
                tmp_path,
                lab.url.removeprefix("http://"),
                worker_address,
                triggers.removeprefix("http://"),
            )
            args = [
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ]
            async with binary_server(
                PROMETHEUS, args, f"{prom}/-/ready", tmp_path / "prometheus.log"
            ):

                async def all_scraped() -> bool:
                    for promql in EXPECTED.values():
                        if not await query(http, prom, promql):
                            return False
                    return True

                assert await wait_until_async(all_scraped, timeout_s=60), "never scraped all"
                up = {r["metric"]["job"]: r["value"][1] for r in await query(http, prom, "up")}
                rules = (await http.get(f"{prom}/api/v1/rules")).json()["data"]["groups"]
    finally:
        await fleet.aclose()
    assert up == {"lab": "1", "worker": "1", "triggers": "1"}
    evaluated = [r for g in rules for r in g["rules"]]
    shipped = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
               if "alert" in r}  # fmt: skip
    assert {r["name"] for r in evaluated if r["type"] == "alerting"} == shipped
    assert "BuildingPowerLost" in shipped
    assert [r["name"] for r in evaluated if r["health"] == "err"] == []
