"""Sharded checkpoints (one file per rank): committed last, every shard verified, no torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.lab.training.checkpoints import (
    CheckpointError,
    CheckpointStatus,
    list_checkpoints,
)
from orchestrator.lab.training.sharded import (
    commit_sharded,
    corrupt_newest_sharded,
    list_sharded,
    prune_sharded,
    scan_sharded,
    shard_dir,
    staging_dir,
    verify_sharded,
)
from orchestrator.policy.training.checkpoints import choose_checkpoint


def _stage(directory: Path, step: int, ranks: int = 4) -> Path:
    """What the ranks of a torch.distributed.checkpoint save leave in the staging dir."""
    staging = staging_dir(directory, step)
    staging.mkdir(parents=True)
    for rank in range(ranks):
        (staging / f"__{rank}_0.distcp").write_bytes(bytes([rank + step]) * (1000 + rank))
    (staging / ".metadata").write_bytes(b"metadata %d" % step)
    return staging


def _save(directory: Path, *steps: int) -> None:
    for step in steps:
        _stage(directory, step)
        commit_sharded(directory, step, meta={"job": "j"})


class TestCommit:
    """A commit hashes every shard, renames the directory and writes the manifest last."""

    def test_committed_checkpoint_lists_verified(self, tmp_path: Path) -> None:
        _save(tmp_path, 4)
        [info] = list_sharded(tmp_path)
        assert info.id == "ckpt-4" and info.complete
        assert info.digest == info.manifest_digest
        assert not staging_dir(tmp_path, 4).exists()
        manifest = json.loads((tmp_path / "ckpt-4.dcp.json").read_text())
        assert len(manifest["shards"]) == 5  # four rank shards and the metadata

    def test_staging_without_a_commit_is_not_a_checkpoint(self, tmp_path: Path) -> None:
        _save(tmp_path, 4)
        _stage(tmp_path, 8)
        assert [i.step for i in list_sharded(tmp_path)] == [4]

    def test_shards_without_a_manifest_are_partial(self, tmp_path: Path) -> None:
        _save(tmp_path, 4, 8)
        (tmp_path / "ckpt-8.dcp.json").unlink()
        records = scan_sharded(tmp_path)
        assert [r.status for r in records] == [CheckpointStatus.OK, CheckpointStatus.PARTIAL]
        assert choose_checkpoint(list_sharded(tmp_path)).step == 4

    def test_nothing_staged_is_refused(self, tmp_path: Path) -> None:
        with pytest.raises(CheckpointError, match="does not exist"):
            commit_sharded(tmp_path, 4)

    def test_single_file_checkpoints_are_not_mistaken_for_sharded(self, tmp_path: Path) -> None:
        _save(tmp_path, 4)
        assert list_checkpoints(tmp_path) == []


class TestVerification:
    """One bad shard makes the checkpoint unusable; the policy falls back to the one before."""

    @pytest.mark.parametrize("truncate", [False, True], ids=["flipped", "truncated"])
    def test_corrupt_newest_falls_back(self, tmp_path: Path, truncate: bool) -> None:
        _save(tmp_path, 4, 8)
        info = corrupt_newest_sharded(tmp_path, truncate=truncate)
        assert info.step == 8 and info.digest != info.manifest_digest
        newest = scan_sharded(tmp_path)[-1]
        assert newest.status is CheckpointStatus.CORRUPT
        assert "__" in newest.detail and ".distcp" in newest.detail
        assert choose_checkpoint(list_sharded(tmp_path)).step == 4
        with pytest.raises(CheckpointError, match="corrupt"):
            verify_sharded(tmp_path, 8)
        assert verify_sharded(tmp_path, 4) == shard_dir(tmp_path, 4)

    def test_a_missing_shard_is_corrupt(self, tmp_path: Path) -> None:
        _save(tmp_path, 4)
        (shard_dir(tmp_path, 4) / "__2_0.distcp").unlink()
        assert scan_sharded(tmp_path)[0].status is CheckpointStatus.CORRUPT

    def test_an_extra_file_is_corrupt(self, tmp_path: Path) -> None:
        _save(tmp_path, 4)
        (shard_dir(tmp_path, 4) / "__9_0.distcp").write_bytes(b"x")
        assert scan_sharded(tmp_path)[0].status is CheckpointStatus.CORRUPT

    def test_missing_directory_and_bad_manifest(self, tmp_path: Path) -> None:
        _save(tmp_path, 4, 8)
        shutil.rmtree(shard_dir(tmp_path, 4))
        (tmp_path / "ckpt-8.dcp.json").write_text("{")
        assert [r.status for r in scan_sharded(tmp_path)] == [
            CheckpointStatus.MISSING_DATA,
            CheckpointStatus.BAD_MANIFEST,
        ]


class TestPrune:
    """Only verified checkpoints count towards keep; a corrupt newest one stays as evidence."""

    def test_keeps_newest_verified(self, tmp_path: Path) -> None:
        _save(tmp_path, 4, 8, 12)
        assert prune_sharded(tmp_path, keep=2) == [4]
        assert [i.step for i in list_sharded(tmp_path)] == [8, 12]

    def test_corrupt_newest_does_not_push_out_the_fallback(self, tmp_path: Path) -> None:
        _save(tmp_path, 4, 8, 12)
        corrupt_newest_sharded(tmp_path)
        assert prune_sharded(tmp_path, keep=1) == [4]
        assert [i.step for i in list_sharded(tmp_path)] == [8, 12]


class TestNoTorch:
    """The store, the arguments and the launcher import no torch: the lab stays light."""

    @pytest.mark.server
    def test_importing_the_launcher_loads_no_torch(self) -> None:
        code = (
            "import sys, orchestrator.lab.training.torchjob.launch, "
            "orchestrator.lab.training.sharded; print('torch' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.stdout.strip() == "False", out.stderr
