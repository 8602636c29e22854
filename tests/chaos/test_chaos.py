"""Worker SIGKILLs, a dev-server restart and a 30%-flaky fleet API: every run still ends right.

The trials run at the same time (each on its own dev server, lab and
worker process), so the module costs one trial's wall time. Each test awaits its own
trial, so each trial has its own test's time budget: under load, four trials sharing two
cores take longer together than one test may, while each alone stays well inside it. The
benchmark (``benchmarks/chaos.py``) runs the same trials with many more kills.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from testkit.chaos.harness import ChaosPlan, TrialResult, run_trial
from testkit.chaos.scenarios import FAULT_CLASSES, SCENARIOS

TRIALS = {name: SCENARIOS[name] for name in ("drain", "rebalance", "loadtest", "training")}
TRIALS["lab-restart"] = FAULT_CLASSES["lab-restart"]
#: a test outlasts its trial's own deadline (plus the stack's start and the checks), so a
#: stuck trial fails with its findings and the worker's log, not with pytest-timeout's stacks
TEST_BUDGET_S = max(scenario.limit_s for scenario in TRIALS.values()) + 120

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_BUDGET_S)]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def trials() -> AsyncIterator[dict[str, asyncio.Task[TrialResult]]]:
    """All five trials, started together; a test awaits the one it checks."""
    plans = {
        "drain": ChaosPlan(seed=11, kills=2, server_restart_after=1),
        "rebalance": ChaosPlan(seed=12, kills=2),
        "loadtest": ChaosPlan(seed=13, kills=1, server_restart_after=1),
        "training": ChaosPlan(seed=14, kills=3),
    }
    plans["lab-restart"] = ChaosPlan(seed=15, kills=1)
    tasks = {
        name: asyncio.create_task(run_trial(TRIALS[name](), plan)) for name, plan in plans.items()
    }
    try:
        yield tasks
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


class TestDrainSurvivesCrashes:
    """#5: region-drain then region-restore, with the worker SIGKILLed twice, the dev server
    restarted from its db file and 30% of fleet calls failing: the region is fully drained in
    between, and afterwards the routing table, the pool weights, the kv primaries and the
    batch jobs are the ones found before the drain, with no mutation applied twice."""

    async def test_drained_then_restored_to_the_original(
        self, trials: dict[str, asyncio.Task[TrialResult]]
    ) -> None:
        result = await trials["drain"]
        assert result.problems == [] and result.ok, "\n".join(result.problems)
        assert result.kills == 2 and result.server_restarts == 1
        assert result.mutations > 0


class TestRebalancerSurvivesCrashes:
    """#4: kill the worker mid-epoch; the next worker continues without publishing twice."""

    async def test_converges_without_double_publish(
        self, trials: dict[str, asyncio.Task[TrialResult]]
    ) -> None:
        result = await trials["rebalance"]
        assert result.problems == [] and result.ok, "\n".join(result.problems)
        assert result.kills == 2 and result.mutations > 0


class TestLoadTestSurvivesCrashes:
    """A load test killed mid-ramp still finishes and puts the routing back."""

    async def test_restores_routing(self, trials: dict[str, asyncio.Task[TrialResult]]) -> None:
        result = await trials["loadtest"]
        assert result.problems == [] and result.ok, "\n".join(result.problems)
        assert result.kills == 1 and result.server_restarts == 1
        assert result.mutations > 0


class TestTrainingRecoverySurvivesCrashes:
    """#9: a supervised training job (model mode) takes a GPU error, a host down, a hung
    trainer, a building power loss and another GPU error while the worker is SIGKILLed three
    times (each within 2.5 s of a fault, so in its detection or recovery) and 30% of fleet
    calls fail: the supervisor records every failure with the kind injected and recovers it,
    the job finishes all its steps, and each recovery's stop, quarantine and start apply
    once: one start per failure, as many runs of the job as starts."""

    async def test_every_failure_recovered_once(
        self, trials: dict[str, asyncio.Task[TrialResult]]
    ) -> None:
        result = await trials["training"]
        assert result.problems == [] and result.ok, "\n".join(result.problems)
        assert result.kills == 3
        assert result.details["faults_injected"] == result.details["failures_recovered"] == 5
        # launch + 5 recoveries: a stop and a start each, and a quarantine per GPU error
        assert result.mutations == 6 * 2 + 2


class TestRoutingWriterSurvivesALabThatLostItsState:
    """Issue 18.3: with a drain's hold on eu-west, the lab is killed and started empty (its
    routing back at v1, eu-west carrying traffic) while the worker is SIGKILLed once and 30%
    of fleet calls fail: the rebalancer reports the regression, fixes the broken hold in an
    emergency step and keeps running, with no mutation applied twice before or after."""

    async def test_back_to_the_intended_state(
        self, trials: dict[str, asyncio.Task[TrialResult]]
    ) -> None:
        result = await trials["lab-restart"]
        assert result.problems == [] and result.ok, "\n".join(result.problems)
        assert result.details["routing_regressions"] >= 1
        assert result.details["emergency_steps"] >= 1
        assert result.details["time_to_intended_s"] is not None
