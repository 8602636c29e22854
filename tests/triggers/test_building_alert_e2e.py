"""End to end with real parts and shipped files: a building's power loss in the lab fires the
shipped ``BuildingPowerLost`` rule in a real Prometheus, the real Alertmanager delivers it to
the trigger server serving the shipped ``runbooks/`` directory, and exactly one
``building-loss`` run starts with the alert's ``building`` label as its parameter and moves
that building's share of traffic."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.config import Settings
from orchestrator.contracts.rebalancer import REBALANCER_ID, RebalancerInput
from orchestrator.contracts.runbook import RunbookReport, TaskPhase
from orchestrator.contracts.runbook_undo import TrafficRelease
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DemandConfig
from orchestrator.policy.snapshot import traffic_shares
from orchestrator.triggers.catalog import load_runbooks
from orchestrator.triggers.starter import TemporalRunStarter
from testkit.triggers import make_app
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import new_worker
from tests.triggers.payloads import TOKEN
from tests.triggers.servers import alertmanager, alertmanager_config, prometheus, serve_app
from tests.triggers.test_prometheus_drain_e2e import poll
from tests.workflows.conftest import ROOMY_RPS, lab_config
from workflows.rebalancer import TrafficRebalanceWorkflow

ROOT = Path(__file__).resolve().parents[2]
RULES = (ROOT / "deploy" / "prometheus" / "orchestrator.rules.yml").read_text()
BUILDING, REGION = "euw-a", "eu-west"


async def share(fleet: HttpFleet, region: str) -> float:
    """The region's share of all user traffic (each PoP weighted by its demand)."""
    return traffic_shares(await fleet.topology(), await fleet.routing())[region]


class TestPowerLossToBuildingLoss:
    """The shipped rule, the shipped runbook, one run, the building's traffic moved."""

    async def test_power_loss_starts_one_building_loss_run(
        self, dev_env: WorkflowEnvironment, start_lab: LabFactory, tmp_path: Path
    ) -> None:
        client: Client = dev_env.client
        lab = await start_lab(
            lab_config(demand=DemandConfig(total_rps=ROOMY_RPS)), mode="model", faults=True
        )
        fleet = lab.fleet()
        queue = f"building-{uuid.uuid4().hex[:8]}"
        (tmp_path / "am").mkdir()
        (tmp_path / "prom").mkdir()
        runbooks = load_runbooks(ROOT / "runbooks")
        async with (
            serve_app(make_app(runbooks, TemporalRunStarter(client, queue))) as base,
            alertmanager(
                tmp_path / "am", alertmanager_config(f"{base}/v1/alerts/alertmanager", TOKEN)
            ) as am,
            prometheus(
                tmp_path / "prom", lab.url.removeprefix("http://"), rules=RULES, alertmanager_url=am
            ),
        ):
            settings = Settings(task_queue=queue, fleet_url=lab.url, state_dir=tmp_path)
            ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
            async with new_worker(client, registry.activities(ctx), task_queue=queue):
                rebalancer = await client.start_workflow(
                    TrafficRebalanceWorkflow.run,
                    RebalancerInput(epoch_s=0.5, window_s=5),
                    id=REBALANCER_ID,
                    task_queue=queue,
                )
                try:
                    full = await share(fleet, REGION)
                    injected = time.monotonic()
                    async with lab.http() as http:
                        lost = await http.post(f"/lab/buildings/{BUILDING}/power-loss")
                        assert lost.status_code == 200, lost.text
                    # The shipped runbook's name is not unique to this test: another file on
                    # this worker's dev server may have run building-loss (for another
                    # building) before; only runs started on this test's queue are its own.
                    query = f'Runbook = "building-loss" AND TaskQueue = "{queue}"'

                    async def started() -> int:
                        return (await client.count_workflows(query)).count

                    await poll("the building-loss run to start", 90, started)
                    started_after = time.monotonic() - injected
                    [execution] = [e async for e in client.list_workflows(query)]
                    report: RunbookReport = await client.get_workflow_handle(
                        execution.id, result_type=RunbookReport
                    ).result()
                    moved = await share(fleet, REGION)
                finally:
                    await rebalancer.terminate("test over")
            assert (await client.count_workflows(query)).count == 1
        assert report.outcome == "completed", report.events
        phases = {t.id: t.phase for t in report.tasks}
        assert phases["shift-building-traffic"] == TaskPhase.DONE
        assert phases["page-oncall"] == TaskPhase.SKIPPED  # no notify_url configured
        record = report.restore_records["restore-building-traffic"]
        assert isinstance(record, TrafficRelease), record
        assert (record.args.building, record.args.region) == (BUILDING, REGION)
        # euw-a's half of eu-west's traffic moved out (the rebalancer may move more)
        assert moved <= full / 2 + 0.01
        print(f"\npower loss -> building-loss run started: {started_after:.1f}s")  # noqa: T201
