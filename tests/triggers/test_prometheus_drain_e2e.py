"""End to end with real parts: a region fault in the lab starts a region drain.

The lab (model mode, faults on) exports its health on /metrics; a real
Prometheus scrapes it every second and evaluates an alert rule on a region's
error rate; the real Alertmanager delivers the alert to the trigger server,
which starts the drain runbook on Temporal. The worker's health source for that
drain is the same Prometheus (orchestrator.promhealth), so its conditions and
gates read what Prometheus scraped.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio
import yaml
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.contracts.runbook import RunbookReport, RunbookStatus, TaskPhase
from orchestrator.lab.config import DemandConfig
from orchestrator.models import HealthReport
from orchestrator.promhealth import PrometheusHealth, PromHealthConfig, with_health_source
from orchestrator.runbook.lint import lint_text
from orchestrator.runbook.spec import Runbook
from orchestrator.triggers.starter import TemporalRunStarter
from testkit.triggers import make_app
from tests.fixtures.lab import LabFactory, RunningLab
from tests.fixtures.temporal import new_worker
from tests.triggers.payloads import TOKEN
from tests.triggers.servers import alertmanager, alertmanager_config, prometheus, serve_app
from tests.workflows.conftest import ROOMY_RPS, lab_config

REGION = "eu-west"
RULES = """
groups:
  - name: regions
    interval: 1s
    rules:
      - alert: RegionErrorRateHigh
        expr: lab_region_error_rate > 0.05
        labels: {severity: critical}
        annotations: {summary: "error rate {{ $value }} in {{ $labels.region }}"}
"""
DRAIN = """
name: {name}
kind: drain
parameters:
  region: {{type: region}}
triggers:
  - alertname: RegionErrorRateHigh
    matchers: ['severity="critical"']
    parameters: {{region: region}}
    cooldown: 10m
tasks:
  # Read through Prometheus: the fault the alert reported is still there.
  - id: confirm-fault
    template: wait_for
    args:
      predicates: ["error_rate in ${{params.region}} > 0.05"]
      poll_interval: 1s
      timeout: 30s
  - id: drain-web
    template: service_weight
    depends_on: [confirm-fault]
    args: {{region: "${{params.region}}", service: web, weight: 0}}
    steps: 2 x 50%
    wait: 1s
    pre_conditions: ["error_rate in others-of(${{params.region}}) < 0.05"]
    gates: ["error_rate in others-of(${{params.region}}) < 0.05"]
    restore: auto
"""


class CountingHealth(PrometheusHealth):
    """The Prometheus health source, counting the reports it answered."""

    calls = 0

    async def health(self, window_s: float | None = None) -> HealthReport:
        report = await super().health(window_s)
        CountingHealth.calls += 1
        return report


def drain_runbook(name: str) -> Runbook:
    text = DRAIN.format(name=name)
    assert not lint_text(text, f"{name}.yaml")
    return Runbook.model_validate(yaml.safe_load(text))


async def notifications(am: str) -> float:
    """Webhook notifications Alertmanager has sent, from its own metrics."""
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"{am}/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("alertmanager_notifications_total{") and 'integration="webhook"' in line
    )


async def poll(what: str, timeout_s: float, check: object) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await check()  # type: ignore[operator]
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest_asyncio.fixture(loop_scope="session")
async def faulty_lab(start_lab: LabFactory) -> AsyncIterator[RunningLab]:
    # room for the drain: the capacity check refuses one at the default demand
    config = lab_config(demand=DemandConfig(total_rps=ROOMY_RPS))
    yield await start_lab(config, mode="model", faults=True)


class TestFaultToDrain:
    """A region fault makes Prometheus fire, Alertmanager deliver, the trigger server start
    exactly one drain run, and that run drain the region, reading health from Prometheus."""

    async def test_region_fault_starts_one_drain(
        self, dev_env: WorkflowEnvironment, faulty_lab: RunningLab, tmp_path: Path
    ) -> None:
        client: Client = dev_env.client
        name = f"prom-drain-{uuid.uuid4().hex[:6]}"
        queue = f"prom-{uuid.uuid4().hex[:8]}"
        (tmp_path / "am").mkdir()
        (tmp_path / "prom").mkdir()
        async with (
            serve_app(make_app([drain_runbook(name)], TemporalRunStarter(client, queue))) as base,
            alertmanager(
                tmp_path / "am", alertmanager_config(f"{base}/v1/alerts/alertmanager", TOKEN)
            ) as am,
            prometheus(
                tmp_path / "prom",
                faulty_lab.url.removeprefix("http://"),
                rules=RULES,
                alertmanager_url=am,
            ) as prom,
        ):
            source = CountingHealth(PromHealthConfig.for_lab(prom))
            fleet = with_health_source(faulty_lab.fleet(), source)
            settings = Settings(task_queue=queue, fleet_url=faulty_lab.url, state_dir=tmp_path)
            ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
            async with new_worker(client, registry.activities(ctx), task_queue=queue):

                async def scraped() -> bool:
                    report = await source.health(None)
                    return len([r for r in report.regions if not r.missing]) == 3

                await poll("a scrape of every region", 20, scraped)
                assert (await notifications(am)) == 0

                injected = time.monotonic()
                async with faulty_lab.http() as lab:
                    answer = await lab.post("/lab/faults", json={"error_rate": {REGION: 0.5}})
                    assert answer.status_code == 200

                query = f'Runbook = "{name}"'

                async def started() -> int:
                    return (await client.count_workflows(query)).count

                await poll("the drain to start", 40, started)
                started_after = time.monotonic() - injected
                [execution] = [e async for e in client.list_workflows(query)]
                handle = client.get_workflow_handle(execution.id)

                async def drained() -> bool:
                    status = await handle.query("status", result_type=RunbookStatus)
                    phases = {t.id: t.phase for t in status.tasks}
                    return phases["drain-web"] == TaskPhase.DONE

                await poll("the drain of web", 40, drained)
                drained_after = time.monotonic() - injected
                topology = await faulty_lab.fleet().topology()
                assert topology.service_weights[f"{REGION}/web"] == 0.0
                # Alertmanager keeps repeating the firing alert (repeat_interval 2s) ...
                before = await notifications(am)
                await poll(
                    "repeated notifications",
                    20,
                    lambda: _more(am, before + 2),
                )
            # ... and none of the repeats started another run.
            assert (await client.count_workflows(query)).count == 1
            assert execution.typed_search_attributes  # Runbook/RunKind/Region are set
            assert CountingHealth.calls >= 3  # conditions, pre-condition and gates asked it
            report = await client.get_workflow_handle(
                execution.id, result_type=RunbookReport
            ).result()
            assert report.outcome == "completed"
            assert [t.phase for t in report.tasks] == [TaskPhase.DONE, TaskPhase.DONE]
        print(  # noqa: T201 - the measured numbers, for the report (-s shows them)
            f"\nfault -> run started: {started_after:.1f}s; fault -> web drained: "
            f"{drained_after:.1f}s"
        )


async def _more(am: str, at_least: float) -> bool:
    return (await notifications(am)) >= at_least
