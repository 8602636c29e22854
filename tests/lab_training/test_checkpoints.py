"""The checkpoint store: atomic writes, verification on listing, loads that refuse bad data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from orchestrator.lab.training.checkpoints import (
    CheckpointError,
    CheckpointStatus,
    WriteHook,
    corrupt_newest,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    scan_checkpoints,
    write_checkpoint,
)
from orchestrator.policy.training.checkpoints import choose_checkpoint
from orchestrator.policy.training.models import RejectReason


def _arrays(step: int) -> dict[str, np.ndarray]:
    return {"w": np.arange(64, dtype=np.float64) * (step + 1), "seed": np.asarray(5)}


def _write(directory: Path, *steps: int) -> None:
    for step in steps:
        write_checkpoint(directory, step, _arrays(step), meta={"job": "j"})


class _Crash(Exception):
    pass


def _crash_at(phase: str) -> WriteHook:
    def hook(current: str, _step: int) -> None:
        if current == phase:
            raise _Crash(phase)

    return hook


class TestWriteAndList:
    """A written checkpoint lists as complete, with the manifest's digest equal to the data's."""

    def test_round_trip(self, tmp_path: Path) -> None:
        info = write_checkpoint(tmp_path, 30, _arrays(30), meta={"job": "j", "seed": 5})
        assert info.complete and info.digest == info.manifest_digest
        [record] = scan_checkpoints(tmp_path)
        assert record.verified and record.info == info
        assert record.manifest is not None and record.manifest.meta == {"job": "j", "seed": 5}
        loaded = load_checkpoint(tmp_path, 30)
        assert loaded.arrays["w"].tobytes() == _arrays(30)["w"].tobytes()
        assert set(loaded.arrays) == {"w", "seed"}

    def test_listing_is_oldest_first_and_ignores_temporaries(self, tmp_path: Path) -> None:
        _write(tmp_path, 40, 10, 20)
        (tmp_path / "ckpt-50.npz.tmp").write_bytes(b"half")
        assert [c.step for c in list_checkpoints(tmp_path)] == [10, 20, 40]

    def test_manifest_records_size_and_file(self, tmp_path: Path) -> None:
        _write(tmp_path, 7)
        manifest = json.loads((tmp_path / "ckpt-7.json").read_text())
        assert manifest["file"] == "ckpt-7.npz"
        assert manifest["bytes"] == (tmp_path / "ckpt-7.npz").stat().st_size

    def test_reserved_key_and_empty_arrays_are_refused(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="reserved"):
            write_checkpoint(tmp_path, 1, {"__step__": np.zeros(1)})
        with pytest.raises(ValueError, match="at least one array"):
            write_checkpoint(tmp_path, 1, {})


class TestInterruptedWrites:
    """A write that dies at any phase never leaves a checkpoint that verifies but is wrong."""

    @pytest.mark.parametrize("phase", ["data-tmp", "data"])
    def test_dying_before_the_manifest_leaves_nothing_usable(
        self, tmp_path: Path, phase: str
    ) -> None:
        _write(tmp_path, 10)
        with pytest.raises(_Crash):
            write_checkpoint(tmp_path, 20, _arrays(20), hook=_crash_at(phase))
        records = {r.step: r for r in scan_checkpoints(tmp_path)}
        assert records[10].verified
        if phase == "data":
            assert records[20].status is CheckpointStatus.PARTIAL
            assert not records[20].info.complete
        else:
            assert 20 not in records
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(tmp_path, 20)
        assert err.value.status in (CheckpointStatus.PARTIAL, CheckpointStatus.MISSING_DATA)
        assert choose_checkpoint(list_checkpoints(tmp_path)).step == 10

    def test_rewriting_a_step_drops_the_old_manifest_before_the_data(self, tmp_path: Path) -> None:
        _write(tmp_path, 20)
        with pytest.raises(_Crash):
            write_checkpoint(tmp_path, 20, {"w": np.ones(3)}, hook=_crash_at("data"))
        [record] = scan_checkpoints(tmp_path)
        # Not "ok" with the old manifest vouching for the new data, and not a corrupt
        # one either: the write simply never committed.
        assert record.status is CheckpointStatus.PARTIAL


class TestVerification:
    """Corrupt, missing or mislabelled data is listed as such and never loads."""

    def test_corrupt_newest_flips_the_newest_committed_one(self, tmp_path: Path) -> None:
        _write(tmp_path, 10, 20, 30)
        before = (tmp_path / "ckpt-30.npz").read_bytes()
        info = corrupt_newest(tmp_path)
        after = (tmp_path / "ckpt-30.npz").read_bytes()
        assert info.step == 30 and info.digest != info.manifest_digest
        assert len(after) == len(before) and after != before
        statuses = {r.step: r.status for r in scan_checkpoints(tmp_path)}
        assert statuses == {10: "ok", 20: "ok", 30: "corrupt"}
        with pytest.raises(CheckpointError, match="corrupt"):
            load_checkpoint(tmp_path, 30)

    def test_policy_falls_back_past_the_corrupt_one(self, tmp_path: Path) -> None:
        _write(tmp_path, 10, 20, 30)
        corrupt_newest(tmp_path)
        choice = choose_checkpoint(list_checkpoints(tmp_path))
        assert choice.step == 20
        assert choice.rejected[0].step == 30
        assert choice.rejected[0].reason is RejectReason.CORRUPT

    def test_missing_data_is_listed_and_refused(self, tmp_path: Path) -> None:
        _write(tmp_path, 10)
        (tmp_path / "ckpt-10.npz").unlink()
        [record] = scan_checkpoints(tmp_path)
        assert record.status is CheckpointStatus.MISSING_DATA
        with pytest.raises(CheckpointError, match="missing"):
            load_checkpoint(tmp_path, 10)

    def test_a_manifest_for_another_step_is_bad(self, tmp_path: Path) -> None:
        _write(tmp_path, 10, 20)
        (tmp_path / "ckpt-20.json").write_bytes((tmp_path / "ckpt-10.json").read_bytes())
        statuses = {r.step: r.status for r in scan_checkpoints(tmp_path)}
        assert statuses[20] is CheckpointStatus.BAD_MANIFEST
        with pytest.raises(CheckpointError, match="step 10"):
            load_checkpoint(tmp_path, 20)

    def test_data_renamed_to_another_step_is_refused(self, tmp_path: Path) -> None:
        _write(tmp_path, 10)
        manifest = json.loads((tmp_path / "ckpt-10.json").read_text())
        (tmp_path / "ckpt-10.npz").rename(tmp_path / "ckpt-11.npz")
        manifest.update(step=11, file="ckpt-11.npz")
        (tmp_path / "ckpt-11.json").write_text(json.dumps(manifest))
        with pytest.raises(CheckpointError, match="holds step 10"):
            load_checkpoint(tmp_path, 11)

    def test_corrupting_an_empty_directory_is_an_error(self, tmp_path: Path) -> None:
        with pytest.raises(CheckpointError, match="no committed checkpoint"):
            corrupt_newest(tmp_path)


class TestPrune:
    """Pruning keeps the newest ``keep`` verified checkpoints and deletes only older files."""

    def test_keeps_the_newest(self, tmp_path: Path) -> None:
        _write(tmp_path, 10, 20, 30, 40)
        assert prune_checkpoints(tmp_path, 3) == [10]
        assert [c.step for c in list_checkpoints(tmp_path)] == [20, 30, 40]
        assert not (tmp_path / "ckpt-10.npz").exists()

    def test_a_corrupt_newest_does_not_push_out_a_good_one(self, tmp_path: Path) -> None:
        _write(tmp_path, 10, 20, 30)
        corrupt_newest(tmp_path)
        assert prune_checkpoints(tmp_path, 2) == []
        _write(tmp_path, 40)
        assert prune_checkpoints(tmp_path, 2) == [10]
        statuses = {r.step: r.status.value for r in scan_checkpoints(tmp_path)}
        assert statuses == {20: "ok", 30: "corrupt", 40: "ok"}

    def test_old_partials_go_with_old_checkpoints(self, tmp_path: Path) -> None:
        _write(tmp_path, 20, 30)
        (tmp_path / "ckpt-5.npz").write_bytes(b"orphan")
        assert prune_checkpoints(tmp_path, 1) == [5, 20]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-30.json", "ckpt-30.npz"]

    def test_keep_must_be_positive(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="keep"):
            prune_checkpoints(tmp_path, 0)
