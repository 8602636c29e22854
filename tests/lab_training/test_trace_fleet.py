"""The trace-driven training fleet: the simulation's job, observable through the fleet contract."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from orchestrator.activities.training import TrainingActivities
from orchestrator.contracts.training import JobState, QuarantineRequest, StartJobRequest
from orchestrator.exceptions import FleetNotFound, FleetRejected
from orchestrator.fleet.protocol import Fleet
from orchestrator.lab.training.failure_trace import FailureTrace, TraceJob, trace_from_simulation
from orchestrator.lab.training.trace import TraceFleet, activity_clock
from orchestrator.policy.training.ettr import FailureModel
from orchestrator.policy.training.ettr_sim import SimulationParams, failure_traces, simulate_trace

EPOCH = 1_800_000_000.0
JOB = TraceJob(name="j", hosts=4, step_s=1.0, checkpoint_every=100, restart_s=50.0)


class Clock:
    def __init__(self) -> None:
        self.t = EPOCH

    def __call__(self) -> float:
        return self.t

    def at(self, s: float) -> None:
        self.t = EPOCH + s


def fleet(failures: list[float], kinds: list[str] | None = None) -> tuple[TraceFleet, Clock]:
    clock = Clock()
    trace = FailureTrace(
        horizon_s=10_000.0,
        failures_s=failures,
        kinds=kinds or ["crash"] * len(failures),  # type: ignore[arg-type]
        host_picks=[1] * len(failures),
    )
    return TraceFleet(JOB, trace, clock=clock, epoch=EPOCH), clock


async def job(f: TraceFleet):  # type: ignore[no-untyped-def]
    return (await f.training_cluster()).jobs[0]


class TestTheJob:
    """It runs from time 0 without a restart, checkpoints every ``checkpoint_every`` steps,
    and a failure kills it at the failure's time, however late the fleet is read."""

    async def test_runs_and_checkpoints(self) -> None:
        f, clock = fleet([])
        clock.at(250.5)
        j = await job(f)
        assert (j.state, j.step, j.checkpoint_step) == (JobState.RUNNING, 250, 200)
        ckpts = await f.training_checkpoints("j")
        assert [c.step for c in ckpts.checkpoints] == [100, 200]

    async def test_failure_freezes_the_run_at_its_time(self) -> None:
        f, clock = fleet([330.0])
        clock.at(400.0)
        j = await job(f)
        assert j.state is JobState.CRASHED and j.step == 330 and j.checkpoint_step == 300
        assert j.ended_at is not None and j.ended_at.timestamp() == EPOCH + 330.0
        assert f.counts.hits == 1

    async def test_gpu_failure_breaks_a_host_until_repaired(self) -> None:
        f, clock = fleet([10.0], ["gpu"])
        clock.at(20.0)
        cluster = await f.training_cluster()
        broken = [h.name for h in cluster.hosts if h.healthy_gpus < h.gpus]
        assert broken == [cluster.jobs[0].hosts[1]]
        clock.at(10.0 + f.repair_s)
        assert all(h.healthy_gpus == h.gpus for h in (await f.training_cluster()).hosts)

    async def test_restart_loads_for_restart_s_then_steps(self) -> None:
        f, clock = fleet([150.0])
        clock.at(200.0)
        hosts = [h.name for h in (await f.training_cluster()).hosts if h.job is None][:4]
        req = StartJobRequest(job="j", hosts=hosts, checkpoint_step=100)
        await f.start_training_job(req, idempotency_key="k")
        await f.start_training_job(req, idempotency_key="k")  # applies once
        assert f.counts.starts == 1
        clock.at(249.0)
        assert (await job(f)).step == 100
        clock.at(260.5)
        j = await job(f)
        assert j.state is JobState.RUNNING and j.step == 110 and j.hosts == sorted(hosts)

    async def test_failure_while_down_kills_the_next_run_as_it_starts(self) -> None:
        f, clock = fleet([150.0, 170.0])
        clock.at(200.0)
        hosts = [h.name for h in (await f.training_cluster()).hosts if h.job is None][:4]
        await f.start_training_job(
            StartJobRequest(job="j", hosts=hosts, checkpoint_step=100), idempotency_key="k"
        )
        j = await job(f)
        assert j.state is JobState.CRASHED and j.ended_at is not None
        assert j.ended_at.timestamp() == EPOCH + 200.0
        assert (f.counts.hits, f.counts.deferred) == (1, 1)

    async def test_finished_at_the_horizon(self) -> None:
        f, clock = fleet([])
        clock.at(10_000.0)
        assert (await job(f)).state is JobState.FINISHED


class TestCheckpointWrites:
    """With a blocking write w, each interval's checkpoint commits w after its last step,
    no steps are made meanwhile, and a failure during the write loses it."""

    def writing(self, failures: list[float]) -> tuple[TraceFleet, Clock]:
        clock = Clock()
        trace = FailureTrace(
            horizon_s=10_000.0,
            failures_s=failures,
            kinds=["crash"] * len(failures),  # type: ignore[list-item]
            host_picks=[1] * len(failures),
        )
        w_job = JOB.model_copy(update={"checkpoint_write_s": 20.0})
        return TraceFleet(w_job, trace, clock=clock, epoch=EPOCH), clock

    async def test_write_holds_steps_and_commits_at_its_end(self) -> None:
        f, clock = self.writing([])
        clock.at(110.0)  # interval done at 100, writing until 120
        j = await job(f)
        assert (j.step, j.checkpoint_step) == (100, None)
        clock.at(120.0)
        j = await job(f)
        assert (j.step, j.checkpoint_step) == (100, 100)
        clock.at(250.0)  # 2 cycles of 120 s, then 10 s of compute
        j = await job(f)
        assert (j.step, j.checkpoint_step) == (210, 200)

    async def test_failure_during_a_write_loses_it(self) -> None:
        f, clock = self.writing([230.0])  # second write runs 220..240
        clock.at(300.0)
        j = await job(f)
        assert j.state is JobState.CRASHED and (j.step, j.checkpoint_step) == (200, 100)
        assert [c.step for c in (await f.training_checkpoints("j")).checkpoints] == [100]

    async def test_matches_the_simulation_on_one_trace(self) -> None:
        """The steps that survive a trace (one failure during a write, one during a
        restart) are the simulation's productive seconds (w = 20 s; the restart here waits
        2 s for the start request, so the simulation's u0 is 52 s)."""
        failures = [230.0, 1000.0, 1010.0, 4321.0]
        f, clock = self.writing(failures)
        for t in failures:
            clock.at(t + 2.0)
            j = await job(f)
            await f.start_training_job(
                StartJobRequest(job="j", hosts=j.hosts, checkpoint_step=j.checkpoint_step),
                idempotency_key=f"start-{t}",
            )
        clock.at(10_000.0)
        final = (await job(f)).step
        sim = simulate_trace(
            failures, horizon_s=10_000.0, interval_s=100.0, cost_s=20.0, restart_s=52.0
        )
        assert final == sim.productive_s


class TestContract:
    """It is a Fleet; it refuses what the lab refuses; the non-training calls raise."""

    async def test_is_a_fleet(self) -> None:
        f, _ = fleet([])
        assert isinstance(f, Fleet)
        with pytest.raises(FleetNotFound):
            await f.topology()

    async def test_start_on_a_quarantined_host_is_refused(self) -> None:
        f, clock = fleet([10.0])
        clock.at(20.0)
        cluster = await f.training_cluster()
        free = [h.name for h in cluster.hosts if h.job is None][:4]
        until = cluster.now + timedelta(hours=1)
        await f.quarantine_host(
            QuarantineRequest(host=free[0], reason="gpu", until=until), idempotency_key="q"
        )
        with pytest.raises(FleetRejected):
            await f.start_training_job(StartJobRequest(job="j", hosts=free), idempotency_key="s")

    def test_activity_clock_outside_an_activity(self) -> None:
        assert activity_clock(lambda: 42.0)() == 42.0


class TestTraceFromSimulation:
    """The trace is the simulation's first trace for the seed, with a kind and host each."""

    def test_same_times_as_the_simulation(self) -> None:
        params = SimulationParams(
            failures=FailureModel(gpus=16_384, failures_per_1000_node_days=3.79),
            days=3.0,
            interval_s=1800.0,
        )
        trace = trace_from_simulation(params, seed=7)
        expected = failure_traces(params, 1, 7)[0]
        assert np.array_equal(np.asarray(trace.failures_s), expected)
        assert len(trace.kinds) == len(trace.host_picks) == expected.size


class TestRecoveryRead:
    """The recovery's fleet read carries the quarantines active now, not the fleet's whole
    history of them (which grows by one record per quarantined host: issue 24)."""

    async def test_only_active_quarantines_travel(self) -> None:
        f, clock = fleet([])
        now = f.now()
        for host, hours in (("b0-h05", 1), ("b0-h06", 3)):
            await f.quarantine_host(
                QuarantineRequest(host=host, reason="gpu", until=now + timedelta(hours=hours)),
                idempotency_key=host,
            )
        clock.at(2 * 3600.0)
        view = await TrainingActivities(f, clock=f.now).read("j")
        assert [r.host for r in view.cluster.quarantine] == ["b0-h06"]
        assert len(f.quarantine) == 2
