"""Straggler detection: one host's own compute per step against its peers' median."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.activities.training_detect import STRAGGLER_RATIO, classify
from orchestrator.contracts.training import JobState, TrainingCluster, TrainingJob
from orchestrator.contracts.training_supervisor import FailureKind
from orchestrator.policy.training.models import Host, HostState, JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HOSTS = ["a-h00", "a-h01", "a-h02", "a-h03"]


def cluster(timings: dict[str, float] | None) -> tuple[TrainingCluster, TrainingJob]:
    job = TrainingJob(
        spec=JobSpec(name="j", hosts=4, gpus_per_host=8, region="r"),
        state=JobState.RUNNING,
        step=10,
        total_steps=100,
        hosts=HOSTS,
        runs=1,
        heartbeat_s=1.0,
        step_s=0.1,
        last_heartbeat=NOW - timedelta(seconds=0.5),
        host_step_ms=timings,
    )
    hosts = [
        Host(name=h, region="r", building="a", gpus=8, state=HostState.ALLOCATED, job="j")
        for h in HOSTS
    ]
    return TrainingCluster(now=NOW, hosts=hosts, jobs=[job]), job


class TestStraggler:
    def test_one_slow_host_is_a_straggler_to_quarantine(self) -> None:
        found = classify(*cluster({"a-h00": 101, "a-h01": 99, "a-h02": 100, "a-h03": 420}), 3.0)
        assert found is not None
        kind, onset, bad, detail = found
        assert (kind, onset, bad) == (FailureKind.STRAGGLER, NOW, ["a-h03"])
        assert "a-h03" in detail and "420" in detail

    def test_hosts_a_little_apart_are_healthy(self) -> None:
        timings = {"a-h00": 100, "a-h01": 100, "a-h02": 100, "a-h03": 100 * STRAGGLER_RATIO - 1}
        assert classify(*cluster(timings), 3.0) is None

    def test_no_or_too_few_timings_say_nothing(self) -> None:
        assert classify(*cluster(None), 3.0) is None
        assert classify(*cluster({"a-h00": 100, "a-h03": 900}), 3.0) is None

    def test_a_hang_outranks_stale_timings(self) -> None:
        c, job = cluster({"a-h00": 100, "a-h01": 100, "a-h02": 100, "a-h03": 900})
        job = job.model_copy(update={"last_heartbeat": NOW - timedelta(seconds=10)})
        found = classify(c, job, 3.0)
        assert found is not None and found[0] is FailureKind.HANG
