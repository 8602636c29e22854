"""Host lists as ranges on the wire: exact round trips, and supervisor payloads that stay
small at 2,048 and 8,192 hosts (issue 24: no payload over 256 KB)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from orchestrator.activities.training import RecoveryView, Stamped, StartInput, WatchResult
from orchestrator.contracts.host_list import decode_hosts, encode_hosts
from orchestrator.contracts.training import (
    JobState,
    StartJobRequest,
    TrainingCheckpoints,
    TrainingCluster,
    TrainingJob,
)
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    FailureRecord,
    RecoveryInput,
    SupervisorInput,
)
from orchestrator.models import MutationResult
from orchestrator.policy.training.models import Host, HostState, JobSpec
from orchestrator.temporal import data_converter

LIMIT = 256 * 1024
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def fleet(hosts: int, buildings: int = 8) -> list[str]:
    per = hosts // buildings
    return [f"b{b}-h{i:04d}" for b in range(buildings) for i in range(per)]


names = st.one_of(
    st.builds(
        lambda b, i, w: f"b{b}-h{i:0{w}d}",
        st.integers(0, 3),
        st.integers(0, 120),
        st.sampled_from([2, 4]),
    ),
    st.text(min_size=1, max_size=8),
)


@given(st.lists(names, max_size=40))
def test_round_trip_is_exact(hosts: list[str]) -> None:
    assert decode_hosts(encode_hosts(hosts)) == hosts


def test_runs_are_ranges() -> None:
    assert encode_hosts(["b0-h00", "b0-h01", "b0-h02", "b1-h07", "x"]) == "b0-h00..02,b1-h07,x"
    assert encode_hosts(["h9", "h10"]) == "h9,h10"  # widths differ: two names
    assert encode_hosts(["a,b"]) == ["a,b"]  # not encodable: a plain list


def test_plain_lists_from_old_histories_still_read() -> None:
    record = FailureRecord.model_validate(
        {
            "number": 1,
            "kind": "gpu",
            "onset_at": NOW.isoformat(),
            "detected_at": NOW.isoformat(),
            "failed_at_step": 3,
            "hosts_before": ["b0-h00", "b0-h01"],
        }
    )
    assert record.hosts_before == ["b0-h00", "b0-h01"]


def _record(number: int, hosts: list[str]) -> FailureRecord:
    # A GPU failure: one host quarantined, a spare from the last building takes its place.
    after = [*hosts[:number], *hosts[number + 1 :], f"b7-h{9000 + number:04d}"]
    return FailureRecord(
        number=number,
        kind=FailureKind.GPU,
        onset_at=NOW,
        detected_at=NOW,
        failed_at_step=10 * number,
        hosts_before=hosts,
        hosts_after=after,
        quarantined=[hosts[number]],
    )


def test_supervisor_payloads_stay_small_at_2048_and_8192_hosts() -> None:
    for size in (2048, 8192):
        hosts = fleet(size)
        failures = [_record(n, hosts) for n in range(1, 26)]  # a full run: failures_per_run
        carried = SupervisorInput(job="llama", failures=failures)
        wire = carried.model_dump_json()
        assert len(wire) < LIMIT, (size, len(wire))
        assert SupervisorInput.model_validate_json(wire) == carried  # nothing lost
        recovery = RecoveryInput(
            job="llama",
            failure=failures[-1],
            bad_hosts=hosts[:8],
            key_prefix="training-llama-25",
            confirm_timeout_s=60,
            hang_after_s=2,
            poll_s=1,
        )
        assert len(recovery.model_dump_json()) < LIMIT
        assert json.loads(wire)["failures"][0]["hosts_before"].count(",") < 20


def _view(size: int) -> RecoveryView:
    """A fleet of ``size`` job hosts plus 10 % spares over 8 buildings, some hosts sick or down."""
    spares = size // 10 // 8
    per = size // 8 + spares
    hosts = []
    for b in range(8):
        for i in range(per):
            name = f"b{b}-h{i:04d}"
            state = HostState.SPARE if i < spares else HostState.ALLOCATED
            if i % 211 == 7:
                state = HostState.DOWN
            health = [True] * 8
            if i % 97 == 5:
                health[3] = False
            hosts.append(
                Host(
                    name=name,
                    region="us-east",
                    building=f"b{b}",
                    gpus=8,
                    gpu_health=health,
                    state=state,
                    job="llama" if state is HostState.ALLOCATED else None,
                )
            )
    job = TrainingJob(
        spec=JobSpec(name="llama", hosts=size, region="us-east"),
        state=JobState.RUNNING,
        step=12,
        total_steps=100,
        hosts=[h.name for h in hosts if h.job == "llama"],
        heartbeat_s=1.0,
        step_s=1.0,
    )
    return RecoveryView(
        cluster=TrainingCluster(now=NOW, hosts=hosts, jobs=[job]),
        checkpoints=TrainingCheckpoints(job="llama", checkpoints=[]),
    )


def test_fleet_read_is_small_and_exact_through_the_data_converter() -> None:
    for size in (2048, 8192):
        view = _view(size)
        [payload] = data_converter.payload_converter.to_payloads([view])
        assert len(payload.data) < LIMIT, (size, len(payload.data))
        [back] = data_converter.payload_converter.from_payloads([payload], [RecoveryView])
        assert back == view  # every host, state, GPU flag and job host, in order


def test_fleet_read_written_as_plain_json_still_reads() -> None:
    view = _view(16 * 8)
    plain = {
        "cluster": view.cluster.model_dump(mode="json"),
        "checkpoints": {"job": "llama", "checkpoints": []},
    }
    assert RecoveryView.model_validate(plain) == view


def _wire_and_back(value: BaseModel) -> tuple[int, BaseModel]:
    [payload] = data_converter.payload_converter.to_payloads([value])
    [back] = data_converter.payload_converter.from_payloads([payload], [type(value)])
    return len(payload.data), back


class TestJobHostsOnTheWire:
    """The watch's result, a start's input and its stamped answer carry the job's hosts as
    runs: a few KB at 32,768 hosts (as plain lists 361 KB, past the 256 KB
    budget), exact, and payloads written with plain lists still read."""

    def _job(self, size: int) -> TrainingJob:
        return _view(size).cluster.jobs[0]

    def test_watch_result(self) -> None:
        for size in (2048, 32768):
            job = self._job(size)
            watch = WatchResult(kind=None, onset_at=NOW, detected_at=NOW, job=job)
            size_b, back = _wire_and_back(watch)
            assert size_b < 8192 and back == watch  # its hosts are fragmented
            plain = {**watch.model_dump(mode="json"), "job": job.model_dump(mode="json")}
            assert WatchResult.model_validate(plain) == watch

    def test_start_input_and_its_answer(self) -> None:
        hosts = fleet(32768)
        start = StartInput(
            request=StartJobRequest(job="llama", hosts=hosts, checkpoint_step=1800),
            idempotency_key="k",
        )
        size_b, back = _wire_and_back(start)
        assert size_b < 2048 and back == start
        stamped = Stamped(
            result=MutationResult(
                idempotency_key="k",
                audit_seq=1,
                kind="training-start",
                detail={"job": "llama", "hosts": hosts, "resumed_from": 1800},
            ),
            at=NOW,
        )
        size_b, back = _wire_and_back(stamped)
        assert size_b < 2048 and back == stamped
        assert Stamped.model_validate(stamped.model_dump(mode="python")) == stamped

    def test_free_form_detail_is_left_alone(self) -> None:
        stamped = Stamped(
            result=MutationResult(
                idempotency_key="k", audit_seq=1, kind="x", detail={"hosts": [1, 2], "n": 3}
            ),
            at=NOW,
        )
        assert _wire_and_back(stamped)[1] == stamped
