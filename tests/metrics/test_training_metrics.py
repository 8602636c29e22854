"""A training job's failure, MTTD, MTTR and ETTR on the worker's endpoint, after a real
GPU fault in the live lab is detected and recovered by the supervisor on Temporal."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from orchestrator import registry
from orchestrator.clients.training import start_supervisor, wait_for_supervisor
from orchestrator.config import Settings
from orchestrator.contracts.training import JobState
from orchestrator.temporal import data_converter, metrics_runtime
from testkit.temporal import new_worker
from tests.fixtures.lab import LabFactory
from tests.fixtures.ports import free_port
from tests.metrics.promtool import check_metrics
from tests.workflows.test_training_supervisor import OPTIONS, recovered
from tests.workflows.training_support import (
    JOB,
    end_earlier_supervisor,
    inject,
    training_config,
    wait_job,
)


def series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


async def test_failure_and_recovery_metrics(
    dev_env: WorkflowEnvironment, start_lab: LabFactory, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{free_port()}"
    client = await Client.connect(
        dev_env.client.service_client.config.target_host,
        namespace=dev_env.client.namespace,
        data_converter=data_converter,
        runtime=metrics_runtime(address),
    )
    lab = await start_lab(training_config(), faults=True)
    fleet = lab.fleet(timeout=10.0)
    ctx = registry.ActivityContext(settings=Settings(fleet_url=lab.url), fleet=fleet, client=client)
    queue = f"t-{uuid.uuid4().hex[:8]}"
    async with (
        new_worker(client, registry.activities(ctx), task_queue=queue),
        httpx.AsyncClient(timeout=5) as http,
    ):
        await end_earlier_supervisor(client)
        handle = await start_supervisor(client, JOB, task_queue=queue, options=OPTIONS)
        job = await wait_job(
            fleet,
            lambda j: j.state is JobState.RUNNING and j.checkpoint_step is not None,
        )
        await inject(lab, "gpu-error", host=job.hosts[0])
        await wait_for_supervisor(client, JOB, recovered(1), timeout_s=60)
        text = (await http.get(f"http://{address}/metrics")).text
        await handle.terminate("test over")
    [failures] = series(text, "orchestrator_training_failures_total")
    assert f'job="{JOB}"' in failures and failures.endswith(" 1")
    for histogram in ("orchestrator_training_mttd_seconds", "orchestrator_training_mttr_seconds"):
        [count] = series(text, f"{histogram}_count")
        assert count.endswith(" 1")
    [ettr] = series(text, "orchestrator_training_ettr_ratio")
    assert 0 < float(ettr.rsplit(" ", 1)[1]) <= 1
    assert check_metrics(text) == ""
