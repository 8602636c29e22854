"""The shipped building runbooks move both halves of a building under one run each: its
share of user traffic and the training job that runs there (issue 25), on a model lab with
the rebalancer running and the job under its supervisor. Planned maintenance loses 0
steps; a power loss is recovered by the supervisor and accounted for; each restore brings
the traffic back and releases the hosts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.clients.training import start_supervisor, wait_for_supervisor
from orchestrator.contracts.runbook import RunbookReport, RunbookRunInput
from orchestrator.contracts.training import JobState
from orchestrator.contracts.training_supervisor import SupervisorInput, SupervisorStatus
from orchestrator.lab.server import LabThread, build_app
from orchestrator.reports import write_report
from orchestrator.runbook.lint import load_runbook
from testkit.lab import LabClock
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import roomy_config
from tests.workflows.runbook.test_restore import visible
from tests.workflows.training_support import (
    JOB,
    end_earlier_supervisor,
    training_config,
    wait_job,
)
from workflows.runbook import RunbookWorkflow

RUNBOOKS = Path(__file__).resolve().parents[3] / "runbooks"
#: 800 s of lab time: the runbooks run in real time, and in CI (ci47) four of them outlasted an
#: 80 s job, which finished before the power loss; the test skips the lab clock to the end
STEPS = 80_000
STEP_MS = 10.0
FAST = {"step_wait": "0.5s"}
OPTIONS = SupervisorInput(job=JOB, hang_after_s=1.5, poll_s=0.1, confirm_timeout_s=60)


@pytest.fixture
def lab_clock() -> LabClock:
    """The job is long enough (STEPS of 10 ms) to outlast four runbooks on a loaded machine;
    once the last has run, the test skips the lab to the job's end (it used to wait ~50 s)."""
    return LabClock()


@pytest.fixture
def model_lab(lab_clock: LabClock) -> Iterator[LabThread]:
    """The roomy model lab with a training job (analytic steps on ``lab_clock``)."""
    config = roomy_config().model_copy(
        update={"training": training_config(total_steps=STEPS, step_ms=STEP_MS).training}
    )
    with LabThread(build_app(config, mode="model", faults=True, clock=lab_clock)) as lab:
        yield lab


async def run(stack: Stack, name: str, **params: Any) -> RunbookReport:
    rb = load_runbook(RUNBOOKS / f"{name}.yaml", {**FAST, **params})
    handle = await stack.client.start_workflow(
        RunbookWorkflow.run,
        RunbookRunInput(runbook=rb, requested_by="test"),
        id=f"{name}-{uuid.uuid4().hex[:6]}",
        task_queue=stack.task_queue,
    )
    report: RunbookReport = await runbook_result(handle)
    await visible(stack, handle.id)  # the restore finds the drain it undoes
    return report


async def share(stack: Stack, region: str) -> float:
    """The region's share of all user traffic, from its buckets (each PoP by its demand)."""
    weights = {p.name: p.demand_weight for p in (await stack.fleet.topology()).pops}
    table = await stack.fleet.routing(include_buckets=True)
    assert table.buckets is not None
    held = sum(weights[pop] * row.count(region) / len(row) for pop, row in table.buckets.items())
    return held / sum(weights.values())


def message(report: RunbookReport, task_id: str) -> str:
    return next(t.message for t in report.tasks if t.id == task_id)


async def where(stack: Stack) -> tuple[list[str], dict[str, str]]:
    cluster = await stack.fleet.training_cluster()
    job = next(j for j in cluster.jobs if j.spec.name == JOB)
    return list(job.hosts), {h.name: h.building for h in cluster.hosts}


class TestBuildingRunbooks:
    """building-maintenance: the job leaves the building from the step it reached and the
    building's half of us-east's traffic moves out; building-restore puts both back (the job
    stays where it went). building-loss after a power loss: the supervisor has recovered the
    job, the run says what was lost, and the traffic moves; the job finishes."""

    async def test_maintenance_then_loss(
        self,
        stack: Stack,
        balanced: dict[str, dict[str, float]],
        lab_clock: LabClock,
        tmp_path: Path,
    ) -> None:
        await end_earlier_supervisor(stack.client)
        supervisor = await start_supervisor(
            stack.client, JOB, task_queue=stack.task_queue, options=OPTIONS
        )
        await wait_job(stack.fleet, lambda j: j.state is JobState.RUNNING and j.step >= 50)
        hosts, building_of = await where(stack)
        building = building_of[hosts[0]]
        full = await share(stack, "us-east")

        planned = await run(stack, "building-maintenance", building=building)
        assert planned.outcome == "completed", planned.events
        assert "0 lost" in message(planned, "move-training-jobs")
        hosts, _ = await where(stack)
        assert all(building_of[h] != building for h in hosts)
        cluster = await stack.fleet.training_cluster()
        fenced = sorted(q.host for q in cluster.quarantine if q.active(cluster.now))
        assert fenced == sorted(h for h, b in building_of.items() if b == building)
        # the building held half of us-east: half of its buckets moved out
        half = await share(stack, "us-east")
        assert half == pytest.approx(full / 2, abs=0.01)

        restored = await run(stack, "building-restore", building=building)
        assert restored.outcome == "completed", restored.events
        cluster = await stack.fleet.training_cluster()
        assert not [q for q in cluster.quarantine if q.active(cluster.now)]
        assert await share(stack, "us-east") == pytest.approx(full, abs=0.01)

        # unplanned: the building the job moved to loses power
        hosts, _ = await where(stack)
        dark = building_of[hosts[0]]
        async with stack.lab_http() as lab:
            lost = await lab.post(f"/lab/buildings/{dark}/power-loss")
            assert lost.status_code == 200, lost.text
        loss = await run(stack, "building-loss", building=dark)
        assert loss.outcome == "completed", loss.events
        status: SupervisorStatus = await wait_for_supervisor(
            stack.client, JOB, lambda s: len(s.failures) == 1 and s.failures[0].confirmed
        )
        failure = status.failures[0]
        assert failure.lost_steps is not None and failure.mttr_s is not None
        # the run accounts for what the loss cost the job, and its report draws the traffic
        # and the job's timeline on one time axis
        moved = message(loss, "move-training-jobs")
        assert f"{JOB} not_needed" in moved and "steps lost" in moved, moved
        html = (
            await write_report(stack.client, loss.workflow_id, tmp_path / "loss.html")
        ).read_text()
        assert "Traffic and training, side by side" in html
        assert f"<td>{JOB}</td>" in html and "failure: building" in html
        hosts, _ = await where(stack)
        assert all(building_of[h] != dark for h in hosts)
        # at most the dark building's half stays (the rebalancer, seeing us-east's capacity
        # halved, may move more of the rest)
        assert await share(stack, "us-east") <= full / 2 + 0.01
        async with stack.lab_http() as lab:
            assert (await lab.post(f"/lab/buildings/{dark}/power-restore")).status_code == 200
        back = await run(stack, "building-restore", building=dark)
        assert back.outcome == "completed", back.events

        # whatever step the job is at, STEPS steps' time later it has finished
        lab_clock.skip(STEPS * STEP_MS / 1000.0)
        final = await supervisor.result()
        assert final.state == "finished" and final.step == STEPS
        # the planned move lost nothing; after the loss the supervisor had already moved the
        # job (its recovery), so the loss runbook's move found nothing left to do
        assert [m.result.outcome for m in final.moves] == ["moved", "not_needed"]
        assert final.moves[0].result.lost_steps == 0
        cluster = await stack.fleet.training_cluster()
        assert next(j for j in cluster.jobs if j.spec.name == JOB).state is JobState.FINISHED
