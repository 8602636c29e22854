"""RunbookWorkflow on the lab: a drain runs its DAG, rolls back, and obeys operators."""

from __future__ import annotations

from collections import Counter

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import ApproveInput, OperatorInput, TaskControlInput, TaskPhase
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import DRAIN, close, runbook, start, wait_phase
from workflows.runbook import RunbookWorkflow


class TestDrainAndRollback:
    """A drain runs its DAG to the approval; abort undoes every step, routing back to the original."""

    async def test_abort_rolls_back_everything(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        before = await stack.fleet.topology()
        handle = await start(stack, runbook(DRAIN, region="eu-west"))
        await wait_phase(handle, "sign-off", TaskPhase.RUNNING)

        drained = await stack.fleet.topology()
        table = await stack.fleet.routing()
        assert all(shares.get("eu-west", 0.0) == 0.0 for shares in table.fractions.values())
        assert drained.service_weights.get("eu-west/sessions") == 0.0
        assert not [s for s in drained.shards if s.service == "kv" and s.primary == "eu-west"]
        assert not [j for j in drained.batch_jobs if j.region == "eu-west" and j.running]

        await handle.execute_update(
            RunbookWorkflow.abort_run, OperatorInput(by="bob", reason="test")
        )
        report = await runbook_result(handle)
        assert report.outcome == "aborted"
        after = await stack.fleet.topology()
        assert after.service_weights.get("eu-west/sessions", 1.0) == before.service_weights.get(
            "eu-west/sessions", 1.0
        )
        assert sorted((s.id, s.primary) for s in after.shards) == sorted(
            (s.id, s.primary) for s in before.shards
        )
        assert [(j.name, j.running) for j in after.batch_jobs] == [
            (j.name, j.running) for j in before.batch_jobs
        ]
        assert close((await stack.fleet.routing()).fractions, balanced)
        keys = Counter(e.idempotency_key for e in await stack.fleet.audit())
        assert max(keys.values()) == 1

    async def test_approval_completes_with_report(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        handle = await start(stack, runbook(DRAIN, region="eu-west"))
        await wait_phase(handle, "sign-off", TaskPhase.RUNNING)
        await handle.execute_update(
            RunbookWorkflow.approve, ApproveInput(task="sign-off", by="alice", comment="ok")
        )
        report = await runbook_result(handle)
        assert report.outcome == "completed"
        assert report.critical_path[0] == "shift-traffic" and report.critical_path[-1] == "sign-off"
        assert report.sequential_s >= report.critical_path_s > 0
        assert any("approved by alice" in e for e in report.events)


class TestOperatorControls:
    """Skip and pause act on a live run."""

    async def test_skip_and_pause(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        handle = await start(stack, runbook(DRAIN, region="eu-west"))
        await handle.execute_update(
            RunbookWorkflow.skip,
            TaskControlInput(task="stop-batch", by="carol", reason="batch is fine"),
        )
        await wait_phase(handle, "sign-off", TaskPhase.RUNNING)
        await handle.execute_update(RunbookWorkflow.pause, OperatorInput(by="carol"))
        status = await handle.query(RunbookWorkflow.status)
        assert status.state == "paused"
        assert next(t for t in status.tasks if t.id == "stop-batch").phase == TaskPhase.SKIPPED
        await handle.execute_update(RunbookWorkflow.resume, OperatorInput(by="carol"))
        await handle.execute_update(
            RunbookWorkflow.approve, ApproveInput(task="sign-off", by="alice")
        )
        assert (await runbook_result(handle)).outcome == "completed"
