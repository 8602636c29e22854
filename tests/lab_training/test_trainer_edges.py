"""Trainer edge cases: lost checkpoint manifests are refused, not trained over from step 0;
a full disk is one line and its own exit code, not a traceback on every restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.lab.training.checkpoints import CheckpointStatus, scan_checkpoints
from orchestrator.lab.training.process import TrainerProcess
from orchestrator.lab.training.status import (
    Control,
    TrainerState,
    read_heartbeat,
    read_progress,
)
from orchestrator.lab.training.trainer import EXIT_DISK_FULL, EXIT_MANIFESTS_LOST
from tests.lab_training.support import SEED, make_args, reference_digests

pytestmark = pytest.mark.slow


def _run(workdir: Path, **overrides: object) -> int:
    proc = TrainerProcess.start(make_args(workdir, **overrides))
    code = proc.wait(30)
    assert code is not None, proc.log_tail()
    return code


def _failed_because(workdir: Path) -> str:
    beat = read_heartbeat(workdir)
    assert beat is not None and beat.state is TrainerState.FAILED
    return beat.error or ""


@pytest.mark.server  # trainer processes
class TestLostManifestsAreRefused:
    """Checkpoint data whose manifests were all deleted makes ``--resume latest`` exit 6 with
    a clear message and touch nothing; it used to restart from step 0 and exit 0."""

    def test_five_data_files_without_manifests(self, tmp_path: Path) -> None:
        assert _run(tmp_path, total_steps=100, keep=5) == 0
        for manifest in tmp_path.glob("ckpt-*.json"):
            manifest.unlink()
        data = sorted(p.name for p in tmp_path.glob("ckpt-*.npz"))
        assert len(data) == 5

        assert _run(tmp_path, total_steps=200) == EXIT_MANIFESTS_LOST
        error = _failed_because(tmp_path)
        assert "manifests are missing" in error and "20, 40, 60, 80, 100" in error
        assert "restore the manifests, or start over with --resume none" in error
        log = (tmp_path / "trainer.log").read_text()
        assert "checkpoint manifests are missing" in log and "Traceback" not in log
        assert sorted(p.name for p in tmp_path.glob("ckpt-*.npz")) == data
        assert read_progress(tmp_path) is None

    def test_one_data_file_the_last_run_had_committed(self, tmp_path: Path) -> None:
        assert _run(tmp_path, total_steps=20) == 0
        (tmp_path / "ckpt-20.json").unlink()
        assert _run(tmp_path, total_steps=60) == EXIT_MANIFESTS_LOST
        assert "the last run had committed step 20" in _failed_because(tmp_path)

    def test_an_unfinished_first_write_still_starts_from_scratch(self, tmp_path: Path) -> None:
        assert _run(tmp_path, total_steps=60, crash_at=("data", 20)) == -9
        assert [r.status for r in scan_checkpoints(tmp_path)] == [CheckpointStatus.PARTIAL]
        assert _run(tmp_path, total_steps=60) == 0
        progress = read_progress(tmp_path)
        assert progress is not None and progress.resumed_from == 0
        assert progress.params_digest == reference_digests(SEED, 60)[60]

    def test_resume_none_starts_over_when_asked(self, tmp_path: Path) -> None:
        assert _run(tmp_path, total_steps=60) == 0
        for manifest in tmp_path.glob("ckpt-*.json"):
            manifest.unlink()
        assert _run(tmp_path, total_steps=60, resume="none") == 0


@pytest.mark.server  # trainer processes
class TestDiskFull:
    """A write refused with ENOSPC (here by the kernel: the checkpoint's temporary is
    /dev/full) ends the trainer with exit 5, one line, a ``failed`` heartbeat naming the
    cause, no temporary left and the earlier checkpoints intact; it used to raise an
    uncaught OSError, exit 1 and do the same again on every restart."""

    def test_enospc_from_the_kernel(self, tmp_path: Path) -> None:
        args = make_args(tmp_path, total_steps=400, checkpoint_every=20, step_ms=20.0)
        proc = TrainerProcess.start(args)
        try:
            beat = proc.wait_for(lambda b: b.checkpoint_step == 20, timeout=30)
            for step in range(40, 401, 20):
                if step > beat.step + 1:
                    os.symlink("/dev/full", tmp_path / f"ckpt-{step}.npz.tmp")
            code = proc.wait(30)
        finally:
            proc.kill()
        assert code == EXIT_DISK_FULL, proc.log_tail()
        error = _failed_because(tmp_path)
        assert error.startswith("disk full writing ckpt-") and "No space left on device" in error
        log = proc.log_tail()
        assert "trainer: disk full writing ckpt-" in log and "Traceback" not in log
        records = scan_checkpoints(tmp_path)
        assert records and all(r.verified for r in records)
        refused = records[-1].step + 20
        assert f"ckpt-{refused}.npz" in error
        # The failed write gave its temporary back; nothing of that step is left.
        assert not list(tmp_path.glob(f"ckpt-{refused}.*"))

    def test_the_lab_fault_fills_the_running_trainers_disk(self, tmp_path: Path) -> None:
        args = make_args(tmp_path, total_steps=4000, step_ms=5.0, heartbeat_s=0.05)
        proc = TrainerProcess.start(args)
        try:
            proc.wait_for(lambda b: (b.checkpoint_step or 0) >= 20, timeout=30)
            proc.fill_disk()
            code = proc.wait(30)
        finally:
            proc.kill()
        assert code == EXIT_DISK_FULL, proc.log_tail()
        assert "No space left on device" in _failed_because(tmp_path)
        # A new run on the same full storage fails the same way, at its first write.
        again = TrainerProcess.start(args, control=Control(disk_full=True))
        assert again.wait(30) == EXIT_DISK_FULL
