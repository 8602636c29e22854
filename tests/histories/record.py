"""Record one history per workflow type for the replay test: ``python -m tests.histories.record``.

Runs every workflow against the model-mode lab on a fresh dev server with an
in-process worker (the production activities and sandbox), then exports each
history with ``fetch_history().to_json()`` into ``tests/histories/<name>.json``.
Re-record after an intended, versioned workflow change (see docs/guarantees.md,
"Versioning a workflow change").
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from orchestrator import registry
from orchestrator.clients.training import (
    start_supervisor,
    wait_for_supervisor,
)
from orchestrator.config import Settings
from orchestrator.contracts.load_test import LoadTestInput
from orchestrator.contracts.rebalancer import RebalancerInput
from orchestrator.contracts.runbook import RunbookRunInput
from orchestrator.contracts.training_supervisor import SupervisorInput
from orchestrator.devserver import DevServer
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.config import DemandConfig
from orchestrator.runbook.lint import load_runbook
from testkit.chaos.traffic_scenarios import wait_converged_handle
from tests.fixtures.lab import launch_lab
from tests.fixtures.ports import free_port
from tests.fixtures.temporal import new_worker
from tests.workflows.training_support import JOB, inject, training_config, wait_job
from workflows.fleet_snapshot import FleetSnapshotInput, FleetSnapshotWorkflow
from workflows.load_test import LiveLoadTestWorkflow
from workflows.rebalancer import TrafficRebalanceWorkflow
from workflows.runbook import RunbookWorkflow

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


async def record() -> list[Path]:
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(port=free_port(), ui=False, db_file=Path(tmp) / "t.db")
        await asyncio.to_thread(server.start, timeout_s=60.0)
        # Room for a drain (the capacity check refuses one at the default demand), and a
        # model-mode training job for the supervisor and its recovery child.
        config = training_config(step_ms=10.0, total_steps=300).model_copy(
            update={"initial_routing": "nearest", "demand": DemandConfig(total_rps=120.0)}
        )
        lab = launch_lab(config, mode="model", faults=True)
        fleet = HttpFleet(lab.url)
        try:
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            queue = f"record-{uuid.uuid4().hex[:8]}"
            settings = Settings(task_queue=queue, fleet_url=lab.url, state_dir=Path(tmp))
            ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=client)
            async with new_worker(client, registry.activities(ctx), task_queue=queue):

                async def save(name: str, workflow_id: str, run_id: str | None = None) -> None:
                    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
                    history = await handle.fetch_history()
                    path = HERE / f"{name}.json"
                    path.write_text(history.to_json())
                    written.append(path)

                await client.execute_workflow(
                    FleetSnapshotWorkflow.run,
                    FleetSnapshotInput(window_s=5),
                    id="fleet-snapshot",
                    task_queue=queue,
                )
                await save("fleet_snapshot", "fleet-snapshot")

                # Few epochs per run: the recorded first run ends in continue-as-new.
                reb = await client.start_workflow(
                    TrafficRebalanceWorkflow.run,
                    RebalancerInput(epoch_s=0.5, window_s=5, epochs_per_run=6),
                    id="rebalancer",
                    task_queue=queue,
                )
                await wait_converged_handle(client.get_workflow_handle("rebalancer"), 90)
                await save("rebalancer", "rebalancer", reb.first_execution_run_id)

                params: dict[str, Any] = {
                    "region": "eu-west",
                    "step_wait": "0.3s",
                    "slo_p99_ms": 2000,
                }
                for name in ("region-drain", "region-restore"):
                    rb = load_runbook(ROOT / "runbooks" / f"{name}.yaml", params)
                    await client.execute_workflow(
                        RunbookWorkflow.run,
                        RunbookRunInput(runbook=rb, mode="drill", requested_by="record"),
                        id=name,
                        task_queue=queue,
                    )
                    await save(name.replace("-", "_"), name)

                await client.execute_workflow(
                    LiveLoadTestWorkflow.run,
                    LoadTestInput(
                        region="eu-west",
                        p99_slo_ms=400.0,
                        max_utilization=0.9,
                        window_s=0.5,
                        settle_s=0.0,
                    ),
                    id="loadtest",
                    task_queue=queue,
                )
                await save("load_test", "loadtest")

                supervisor = await start_supervisor(
                    client,
                    JOB,
                    task_queue=queue,
                    options=SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1),
                )
                job = await wait_job(fleet, lambda j: (j.checkpoint_step or 0) >= 60)
                await inject(lab, "gpu-error", host=job.hosts[0])
                await wait_for_supervisor(
                    client, JOB, lambda s: len(s.failures) == 1 and s.failures[0].confirmed
                )
                await supervisor.result()
                await save("training_supervisor", supervisor.id)
                await save("training_recovery", f"{supervisor.id}-recovery-1")
                # The GPU error's recovery: stop, quarantine, read, start, confirm.
                await save("training_recovery_gpu", f"{supervisor.id}-recovery-2")
                await client.get_workflow_handle("rebalancer").terminate("recorded")
        finally:
            await fleet.aclose()
            lab.stop()
            await asyncio.to_thread(server.stop)
    return written


if __name__ == "__main__":
    for path in asyncio.run(record()):
        print(f"wrote {path.relative_to(ROOT)}")
