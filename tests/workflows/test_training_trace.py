"""The supervisor workflow on the time-skipping server, driven through a failure trace."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from benchmarks.training_trace import drive


class TestSupervisorThroughAFailureTrace:
    """Two days of the Llama 3 failure rate (u0 = 5 min, Δt = 30 min) on the trace fleet:
    the supervisor recovers every failure of the trace, quarantines one host per GPU
    failure, restarts once per failure, and reports an ETTR within 1% of the simulation
    of the same trace and parameters."""

    async def test_two_days(self, time_env: WorkflowEnvironment) -> None:
        run = await drive(time_env, days=2.0, seed=2024)

        # Whether one of them lands while the job is still restarting depends on how fast
        # the activities run in real time (the test server's clock moves then too), so the
        # cut-short paths are pinned in tests/policy/test_ettr_observed.py, not here.
        assert run["trace_failures"] == 18

        assert run["workflow_state"] == "finished", run["workflow_alert"]
        assert run["workflow_failures"] == run["trace_failures"] == run["sim_failures"]
        assert run["fleet_hits"] + run["fleet_deferred"] == run["trace_failures"]
        assert run["fleet_starts"] == run["trace_failures"]
        assert run["workflow_quarantined_hosts"] == run["trace_gpu_failures"]
        assert abs(run["rel_diff"]) <= 0.01, run
        assert run["failures_stamped_in_order"] == run["workflow_failures"]

    async def test_totals_stay_exact_when_old_records_are_folded(
        self, time_env: WorkflowEnvironment
    ) -> None:
        """The same trace with continue-as-new every 4 recoveries and only 3 records carried
        in full: most records are folded into the totals, and every total still matches the
        trace (issue 24: a 2,048-host job's carried input stays bounded)."""
        run = await drive(time_env, days=2.0, seed=2024, failures_per_run=4, keep_failures=3)

        assert run["workflow_state"] == "finished", run["workflow_alert"]
        assert run["workflow_records_dropped"] >= run["trace_failures"] - 3 - 4
        assert run["workflow_failures_listed"] <= 3 + 4
        assert run["workflow_failures"] == run["trace_failures"] == run["sim_failures"] == 18
        assert run["workflow_quarantined_hosts"] == run["trace_gpu_failures"]
        assert abs(run["rel_diff"]) <= 0.01, run
