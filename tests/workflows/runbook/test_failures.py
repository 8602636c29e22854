"""How a runbook task fails: a failing gate holds the task at its step before it counts
(``gate_holds``), and a fleet call that fails for good goes to the task's on_failure."""

from __future__ import annotations

import pytest

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import SkipReason, TaskPhase
from tests.workflows.conftest import Stack
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
def stack(clock_stack: Stack) -> Stack:
    """On Temporal's clock, against the roomy lab with its fault routes (a test makes a
    gate fail and pass)."""
    return clock_stack


def held(holds: int) -> object:
    return runbook(HELD.replace("HOLDS", str(holds)), region="eu-west")


class TestGateHolds:
    """Holding rereads the gates after ``wait``; each hold is an event the operator sees."""

    async def test_a_transient_failure_holds_then_passes(self, stack: Stack) -> None:
        async with stack.lab_http() as lab:
            (
                await lab.post("/lab/faults", json={"error_rate": {"us-east": 0.3}})
            ).raise_for_status()
            handle = await start(stack, held(10))
            await wait_phase(handle, "web-down", TaskPhase.BLOCKED, sleep=stack.sleep)
            (await lab.delete("/lab/faults")).raise_for_status()
        report = await runbook_result(handle)
        assert report.outcome == "completed", report.events
        assert any("web-down: holding at step 1 (1/10)" in e for e in report.events)
        assert (await stack.fleet.topology()).service_weights["eu-west/web"] == 0.0
        # Every reading is kept in the task's state, for the report's gate chart.
        readings = next(t for t in report.tasks if t.id == "web-down").gates
        holding = [r for r in readings if r.held]
        assert holding and all(r.step == 1 and not r.passed for r in holding)
        (check,) = holding[0].checks
        assert (check.region, check.metric, check.op, check.threshold, check.passed) == (
            "us-east",
            "error_rate",
            "<",
            0.05,
            False,
        )
        assert check.observed is not None and check.observed >= 0.05
        assert holding[0].regions["us-east"].error_rate == check.observed
        assert holding[0].regions["us-east"].p99_ms is not None
        # After the fault: step 1 passes on a reread, and the run goes on to pass step 2.
        after = [(r.step, r.passed, r.held) for r in readings[len(holding) :]]
        assert after[0] == (1, True, False) and after[-1] == (2, True, False)
        assert [r.at for r in readings] == sorted(r.at for r in readings)

    async def test_a_lasting_failure_rolls_back_after_the_holds(self, stack: Stack) -> None:
        before = (await stack.fleet.topology()).service_weights.get("eu-west/web", 1.0)
        async with stack.lab_http() as lab:
            (
                await lab.post("/lab/faults", json={"error_rate": {"us-east": 0.3}})
            ).raise_for_status()
            try:
                report = await runbook_result(await start(stack, held(2)))
            finally:
                (await lab.delete("/lab/faults")).raise_for_status()
        assert report.outcome == "rolled_back"
        holds = [e for e in report.events if "web-down: holding at step 1" in e]
        assert [h.split("(")[1].split(")")[0] for h in holds] == ["1/2", "2/2"]
        readings = next(t for t in report.tasks if t.id == "web-down").gates
        # Two holds, then the third failing reading counts: it is not a hold.
        assert [(r.step, r.passed, r.held) for r in readings] == [
            (1, False, True),
            (1, False, True),
            (1, False, False),
        ]
        assert any("gate failed after step 1" in e and "(held 2 times)" in e for e in report.events)
        assert (await stack.fleet.topology()).service_weights.get("eu-west/web", 1.0) == before


FAILING_ACTIVITY = """
name: refused
kind: recovery
tasks:
  - id: web-down
    template: service_weight
    args: {region: eu-west, service: web, weight: 0}
    restore: auto
  - id: no-such-pool
    template: service_weight
    depends_on: [web-down]
    on_failure: ON_FAILURE
    args: {region: eu-west, service: no-such-service, weight: 0}
"""


class TestActivityFailure:
    """A fleet call that fails for good (a 4xx, retries used up) fails its task into
    on_failure, like a failed gate: rollback undoes the steps taken, continue goes on. A
    task whose first write the fleet refused changed nothing and has nothing to undo. (An
    undo the fleet refuses is reported, and the other undos still run: the ``undofail``
    tasks of test_outcome_invariant.py.)"""

    async def test_rollback(self, stack: Stack) -> None:
        rb = runbook(FAILING_ACTIVITY.replace("ON_FAILURE", "rollback"))
        report = await runbook_result(await start(stack, rb))
        tasks = {t.id: t for t in report.tasks}
        # Everything that changed was put back: rolled_back, not rollback_failed. Before,
        # the refused task's undo wrote the same refused request (weight 1 for the unknown
        # service) and the run ended rollback_failed, "left for an operator", with nothing
        # left (seen on the HAProxy lab, which has no server for the cache pool).
        assert report.outcome == "rolled_back", report.events
        assert tasks["web-down"].phase == TaskPhase.ROLLED_BACK
        assert tasks["no-such-pool"].phase == TaskPhase.FAILED
        assert "unknown service 'no-such-service'" in tasks["no-such-pool"].message
        assert tasks["no-such-pool"].undo is None
        assert not any("undo failed" in e for e in report.events), report.events
        assert (await stack.fleet.topology()).service_weights.get("eu-west/web", 1.0) == 1.0

    async def test_continue(self, stack: Stack) -> None:
        rb = runbook(FAILING_ACTIVITY.replace("ON_FAILURE", "continue"))
        report = await runbook_result(await start(stack, rb))
        phases = {t.id: t.phase for t in report.tasks}
        # The runbook let the run go on without the task: skipped, saying why, and the
        # run completed the rest.
        assert report.outcome == "completed", report.events
        assert phases == {"web-down": TaskPhase.DONE, "no-such-pool": TaskPhase.SKIPPED}
        failed = next(t for t in report.tasks if t.id == "no-such-pool")
        assert failed.skipped == SkipReason.CONTINUED
        assert "unknown service" in failed.message
