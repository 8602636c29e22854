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

        # The seed's trace has a failure during a restart and one while the job was down,
        # so the paths where a recovery is cut short are exercised too.
        assert run["trace_failures"] == 18
        assert run["fleet_deferred"] >= 1 and run["workflow_confirmed"] < run["trace_failures"]

        assert run["workflow_state"] == "finished", run["workflow_alert"]
        assert run["workflow_failures"] == run["trace_failures"] == run["sim_failures"]
        assert run["fleet_hits"] + run["fleet_deferred"] == run["trace_failures"]
        assert run["fleet_starts"] == run["trace_failures"]
        assert run["workflow_quarantined_hosts"] == run["trace_gpu_failures"]
        assert abs(run["rel_diff"]) <= 0.01, run
        assert run["wall_s"] < 60.0
