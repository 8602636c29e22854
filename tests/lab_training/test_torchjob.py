"""The PyTorch job for real: 4 hosts, one torchrun agent each, DDP over gloo, DCP checkpoints.

Each run here starts 4 torchrun agents and 4 ranks (real processes importing torch),
so the module keeps to three runs: an uninterrupted one, one whose rank is SIGKILLed
and is resumed, and a resume past a truncated shard.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.lab.training.checkpoints import CheckpointStatus
from orchestrator.lab.training.sharded import corrupt_newest_sharded, list_sharded, scan_sharded
from orchestrator.lab.training.status import Progress
from orchestrator.lab.training.torchjob.args import parse_args
from orchestrator.lab.training.torchjob.launch import TorchJob
from orchestrator.policy.training.checkpoints import choose_checkpoint
from orchestrator.waiting import wait_until

pytestmark = pytest.mark.server

HOSTS = "h0,h1,h2,h3"
#: generous: four ranks and four agents import torch on a shared 2-core machine
_RUN_S = 240.0


def _args(workdir: Path, **extra: str) -> list[str]:
    base = {
        "job": "tj",
        "workdir": str(workdir),
        "hosts": HOSTS,
        "total-steps": "12",
        "checkpoint-every": "4",
        "keep": "3",
    }
    base.update(extra)
    return [f"--{key}={value}" for key, value in base.items()]


def _run(workdir: Path, **extra: str) -> Progress:
    job = TorchJob.start(parse_args(_args(workdir, **extra)))
    try:
        codes = job.wait(_RUN_S)
    finally:
        job.kill()
    assert codes == [0, 0, 0, 0], job.log_tail("h0")
    progress = job.progress()
    assert progress is not None
    return progress


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Progress]]:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    yield workdir, _run(workdir)


class TestDistributedJob:
    """Four ranks train under DDP, every rank writes a shard, and a resume is bit-identical."""

    def test_every_rank_writes_its_shard_and_checkpoints_verify(
        self, uninterrupted: tuple[Path, Progress]
    ) -> None:
        workdir, progress = uninterrupted
        assert progress.step == 12 and progress.resumed_from == 0
        assert [i.step for i in list_sharded(workdir)] == [4, 8, 12]
        assert all(r.status is CheckpointStatus.OK for r in scan_sharded(workdir))
        shards = sorted(p.name for p in (workdir / "ckpt-12.dcp").iterdir())
        assert shards == [".metadata", *(f"__{rank}_0.distcp" for rank in range(4))]

    def test_sigkilled_rank_then_resume_is_bit_identical(
        self, uninterrupted: tuple[Path, Progress], tmp_path: Path
    ) -> None:
        _, reference = uninterrupted
        # Paced so the kill lands mid-run, after the first checkpoint committed.
        job = TorchJob.start(parse_args(_args(tmp_path, **{"step-ms": "500"})))
        try:
            assert wait_until(
                lambda: job.exited or (tmp_path / "ckpt-4.dcp.json").exists(), timeout_s=_RUN_S
            )
            assert not job.exited, job.log_tail("h0")
            job.kill_rank(2, signal.SIGKILL)
            codes = job.wait(_RUN_S)
        finally:
            job.kill()
        # The peers' collectives fail on the dead rank's closed sockets: every agent exits.
        assert all(code != 0 for code in codes), codes
        assert job.progress() is None
        resumed = _run(tmp_path)
        assert resumed.resumed_from >= 4
        assert resumed.params_digest == reference.params_digest

    def test_truncated_shard_is_skipped_and_resume_uses_the_one_before(
        self, uninterrupted: tuple[Path, Progress]
    ) -> None:
        workdir, reference = uninterrupted
        corrupt_newest_sharded(workdir, truncate=True)
        assert choose_checkpoint(list_sharded(workdir)).step == 8
        resumed = _run(workdir)
        assert resumed.resumed_from == 8
        assert resumed.params_digest == reference.params_digest
