"""The harness's audit checks catch the double applies they exist to catch."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from orchestrator.contracts.training import JobState, TrainingJob
from orchestrator.contracts.training_supervisor import (
    FailureRecord,
    SupervisorState,
    SupervisorStatus,
)
from orchestrator.models import AuditEntry
from orchestrator.policy.training.models import JobSpec
from testkit.chaos.harness import audit_problems, redundant_publishes, repeated_changes
from testkit.chaos.training_scenario import training_problems

RUN_A = "11111111-1111-1111-1111-111111111111"
RUN_B = "22222222-2222-2222-2222-222222222222"


def entry(seq: int, key: str, kind: str = "service_weight", **request: Any) -> AuditEntry:
    return AuditEntry(
        seq=seq, at=datetime.now(UTC), idempotency_key=key, kind=kind, request=request, response={}
    )


class TestAuditChecks:
    """A clean log passes; a repeated key or a step under two runs fails; a repeated table
    is counted as a redundant publish."""

    def test_clean_log(self) -> None:
        log = [
            entry(1, f"drain/{RUN_A}/sessions/1"),
            entry(2, "rebalancer/epoch-1", "routing", fractions={"p": {"a": 1.0}}),
            entry(3, "rebalancer/epoch-2", "routing", fractions={"p": {"a": 0.5, "b": 0.5}}),
        ]
        assert audit_problems(log) == []

    def test_each_double_apply_is_named(self) -> None:
        log = [
            entry(1, f"drain/{RUN_A}/sessions/1"),
            entry(2, f"drain/{RUN_B}/sessions/1"),
            entry(3, "k"),
            entry(4, "k"),
            entry(5, "rebalancer/epoch-1", "routing", fractions={"p": {"a": 1.0}}),
            entry(6, "rebalancer/epoch-2", "routing", fractions={"p": {"a": 1.0}}),
        ]
        problems = audit_problems(log)
        assert any("key k applied 2 times" in p for p in problems)
        assert any("drain/sessions/1 applied under 2 runs" in p for p in problems)
        assert not any("epoch-2" in p for p in problems)
        assert redundant_publishes(log) == ["rebalancer/epoch-2"]


def training_run(
    extra: tuple[AuditEntry, ...] = (),
) -> tuple[SupervisorStatus, TrainingJob, list[AuditEntry], list[dict[str, Any]]]:
    """A clean training trial as the checks see it: launch + one recovery per fault."""
    from testkit.chaos.training_scenario import FAULTS, JOB

    t0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    faults = [
        {"kind": kind, "target": f"h{i}/gpu0" if kind == "gpu-error" else f"h{i}", "at": t0 + i}
        for i, (kind, _) in enumerate(FAULTS, start=1)
    ]
    failures = [
        FailureRecord(
            number=i + 1,
            kind=kind,
            onset_at=datetime.fromtimestamp(t0 + i, UTC),
            detected_at=datetime.fromtimestamp(t0 + i + 0.1, UTC),
            recovered_at=datetime.fromtimestamp(t0 + i + 0.5, UTC),
            failed_at_step=10 * i,
            confirmed=True,
        )
        for i, (_, kind) in enumerate(FAULTS, start=1)
    ]
    entries: list[AuditEntry] = []
    for n in range(1, len(FAULTS) + 2):  # failure-1 is the launch, at t0 + 0.2
        key = f"training-{JOB}/failure-{n}"
        at = datetime.fromtimestamp(t0 + n - 1 + 0.2, UTC)
        entries.append(entry(len(entries) + 1, f"{key}/stop", "training-stop", job=JOB))
        if n > 1 and FAULTS[n - 2][0] == "gpu-error":
            host = f"h{n - 1}"
            entries.append(
                entry(len(entries) + 1, f"{key}/quarantine/{host}", "host-quarantine", host=host)
            )
        start = entry(len(entries) + 1, f"{key}/start", "training-start", job=JOB)
        entries.append(start.model_copy(update={"at": at}))
    entries += extra
    status = SupervisorStatus(job=JOB, state=SupervisorState.FINISHED, failures=failures)
    job = TrainingJob(
        spec=JobSpec(name=JOB, hosts=2, gpus_per_host=8, region="us-east"),
        state=JobState.FINISHED,
        step=1000,
        total_steps=1000,
        runs=len(FAULTS) + 1,
        heartbeat_s=0.5,
        step_s=0.02,
    )
    return status, job, entries, faults


class TestTrainingChecks:
    """A clean training trial passes; a second start for one failure, a start between two
    faults too many, a host quarantined twice or a failure left unrecovered are named."""

    def test_clean_run(self) -> None:
        status, job, entries, faults = training_run()
        assert training_problems(status, job, entries, faults) == []
        assert repeated_changes(entries) == []

    def test_double_start_and_quarantine(self) -> None:
        late = datetime.fromtimestamp(datetime(2026, 1, 1, tzinfo=UTC).timestamp() + 2.7, UTC)
        again = entry(99, "training-llm-chaos/failure-3/start-again", "training-start")
        status, job, entries, faults = training_run(
            (
                again.model_copy(update={"at": late}),
                entry(100, "other/quarantine", "host-quarantine", host="h1"),
            )
        )
        problems = training_problems(status, job, entries, faults)
        assert "failure 3: training-start applied 2 times" in problems
        assert "2 starts after fault 2 before the next" in problems
        assert any(p.startswith("7 starts and 6 runs") for p in problems)
        assert repeated_changes(entries) == ["quarantine h1 applied 2 times"]

    def test_unrecovered_failure(self) -> None:
        status, job, entries, faults = training_run()
        failures = [
            status.failures[0].model_copy(update={"confirmed": False}),
            *status.failures[1:],
        ]
        status = status.model_copy(update={"failures": failures})
        problems = training_problems(status, job, entries[:-1], faults)
        assert any("failure 2 (gpu) not recovered" in p for p in problems)
        assert "failure 6: no training-start" in problems


class TestStoppedAt:
    """The scenario learns the step a fault stopped the job at from the first read that shows
    it stopped; when every read missed the stop and the recovery has restarted the job, it
    takes the most the job can have reached, instead of waiting to see a stop that is over."""

    @staticmethod
    async def stopped_at(reads: list[TrainingJob | None], fault: str = "gpu-error") -> int:
        import time

        from testkit.chaos.training_scenario import TrainingRecovery

        scenario = TrainingRecovery()
        seen = iter(reads)

        async def read(_stack: Any) -> TrainingJob | None:
            return next(seen)

        scenario._job = read  # type: ignore[method-assign]
        _, before, _, _ = training_run()
        before = before.model_copy(update={"state": JobState.RUNNING, "runs": 2, "step": 100})
        deadline = time.monotonic() + 5
        return await scenario._stopped_at(None, fault, before, 140, deadline)  # type: ignore[arg-type]

    @staticmethod
    def job(state: JobState, step: int, runs: int) -> TrainingJob:
        _, job, _, _ = training_run()
        return job.model_copy(update={"state": state, "step": step, "runs": runs})

    async def test_the_step_of_the_run_seen_stopped(self) -> None:
        reads = [None, self.job(JobState.RUNNING, 104, 2), self.job(JobState.CRASHED, 107, 2)]
        assert await self.stopped_at(reads) == 107

    async def test_a_restart_no_read_saw_stopped_gives_the_bound(self) -> None:
        reads = [None, None, self.job(JobState.RUNNING, 80, 3)]
        assert await self.stopped_at(reads) == 140

    async def test_a_hung_run_stays_running(self) -> None:
        assert await self.stopped_at([self.job(JobState.RUNNING, 103, 2)], "hang") == 103
