"""With ``ORCHESTRATOR_HEALTH=prometheus`` a runbook's health checks are PromQL answered by a
real Prometheus scraping the live lab: the worker's fleet comes from the settings alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from pathlib import Path

import pytest
import yaml
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.config import load_settings
from orchestrator.contracts.runbook import RunbookRunInput
from orchestrator.promhealth import fleet_from_settings
from orchestrator.runbook.params import bind
from orchestrator.runbook.spec import Runbook
from testkit.temporal import new_worker
from tests.fixtures.lab import LabFactory
from tests.triggers.servers import prometheus
from workflows.runbook import RunbookWorkflow

pytestmark = pytest.mark.server  # the dev server, a live lab and a real Prometheus

CHECK = """
name: health-through-prometheus
kind: drill
parameters:
  region: {type: region}
tasks:
  - id: serving
    template: wait_for
    args:
      predicates:
        - rps in ${params.region} > 0
        - error_rate in ${params.region} < 0.5
        - p99_ms of web in ${params.region} < 5000
        - utilization in ${params.region} < 1
      poll_interval: 1s
      timeout: 90s
"""


def logged_queries(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [json.loads(line)["params"]["query"] for line in log.read_text().splitlines() if line]


async def test_a_runbooks_checks_are_promql(
    dev_env: WorkflowEnvironment, start_lab: LabFactory, tmp_path: Path
) -> None:
    lab = await start_lab(mode="live")
    log = tmp_path / "queries.log"
    queue = f"prom-{uuid.uuid4().hex[:8]}"
    async with (
        prometheus(tmp_path, lab.url.removeprefix("http://"), query_log=log) as prom,
        lab.http() as http,
    ):
        env = {
            "HOME": "/nonexistent",
            "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml",
            "ORCHESTRATOR_FLEET_URL": lab.url,
            "ORCHESTRATOR_HEALTH": "prometheus",
            "ORCHESTRATOR_PROMETHEUS_URL": prom,
            "ORCHESTRATOR_TASK_QUEUE": queue,
            "ORCHESTRATOR_STATE_DIR": str(tmp_path / "state"),
        }
        settings = load_settings(env)
        fleet = fleet_from_settings(settings)
        stop = asyncio.Event()

        async def traffic() -> None:
            i = 0
            while not stop.is_set():
                await asyncio.gather(
                    *(http.get("/edge/nyc", params={"user": f"u-{i + k}"}) for k in range(5))
                )
                i += 5

        ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=dev_env.client)
        sender = asyncio.create_task(traffic())
        try:
            async with new_worker(dev_env.client, registry.activities(ctx), task_queue=queue):
                rb = bind(Runbook.model_validate(yaml.safe_load(CHECK)), {"region": "us-east"})
                report = await dev_env.client.execute_workflow(
                    RunbookWorkflow.run,
                    RunbookRunInput(runbook=rb, requested_by="test"),
                    id=f"prom-{uuid.uuid4().hex[:6]}",
                    task_queue=queue,
                )
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await sender
            await fleet.aclose()
    assert report.outcome == "completed", [t.message for t in report.tasks]
    queries = logged_queries(log)
    # every number the check read came from the lab's series through PromQL
    assert any("lab_region_requests_total" in q for q in queries)
    assert any("lab_service_request_duration_seconds_bucket" in q for q in queries)
    assert any("lab_region_utilization" in q for q in queries)
