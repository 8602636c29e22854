"""The trainer as a real process: resumes, crashes, clean stops and refusals."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from orchestrator.lab.training.checkpoints import (
    corrupt_newest,
    load_checkpoint,
    scan_checkpoints,
)
from orchestrator.lab.training.process import TRAINER_MODULE, TrainerProcess, trainer_env
from orchestrator.lab.training.sgd import TrainState, params_digest, train_uninterrupted
from orchestrator.lab.training.status import Heartbeat, TrainerState, read_heartbeat, read_progress
from orchestrator.lab.training.trainer import (
    BLAS_THREAD_VARS,
    CRASH_PHASES,
    EXIT_BAD_CHECKPOINT,
    EXIT_LOCKED,
    parse_args,
)
from tests.lab_training.support import SEED, make_args, reference_digests, running

pytestmark = [pytest.mark.slow, pytest.mark.server]  # trainer processes


def _run_to_end(workdir: Path, **overrides: object) -> int:
    proc = TrainerProcess.start(make_args(workdir, **overrides))
    code = proc.wait(30)
    assert code is not None, proc.log_tail()
    return code


def _reached(step: int) -> Callable[[Heartbeat], bool]:
    return lambda beat: beat.step >= step


def _error(workdir: Path) -> str:
    beat = read_heartbeat(workdir)
    assert beat is not None and beat.state is TrainerState.FAILED
    return beat.error or ""


def _final_params(workdir: Path, step: int) -> np.ndarray:
    return TrainState.from_arrays(step, load_checkpoint(workdir, step).arrays).flat_params()


def _assert_every_verified_checkpoint_is_right(workdir: Path, seed: int, steps: int) -> int:
    """Each checkpoint that verifies holds exactly the reference parameters of its step."""
    reference = reference_digests(seed, steps)
    verified = 0
    for record in scan_checkpoints(workdir):
        if record.verified:
            assert params_digest(_final_params(workdir, record.step)) == reference[record.step]
            verified += 1
    return verified


class TestBitIdenticalResume:
    """Runs killed with SIGKILL and resumed from ``latest`` end bit-identical to one clean run."""

    def test_four_kill_resume_cycles(self, tmp_path: Path) -> None:
        total = 240
        resumed_from: list[int] = []
        for target in (35, 90, 150, 205):
            with running(make_args(tmp_path, total_steps=total, step_ms=3.0)) as proc:
                beat = proc.wait_for(_reached(target), timeout=20)
                resumed_from.append(beat.resumed_from)
                newest = beat.checkpoint_step
                assert proc.kill() == -9
            # What the next run resumes from is what this one had committed.
            assert newest is not None and newest >= target - 20
        assert _run_to_end(tmp_path, total_steps=total) == 0
        progress = read_progress(tmp_path)
        assert progress is not None and progress.resumed_from >= 200
        assert resumed_from[0] == 0 and resumed_from == sorted(resumed_from)
        assert len(set(resumed_from)) == 4
        expected = train_uninterrupted(SEED, total)
        assert _final_params(tmp_path, total).tobytes() == expected.tobytes()
        assert progress.params_digest == params_digest(expected)

    def test_random_sigkills_during_constant_checkpointing(self, tmp_path: Path) -> None:
        # Checkpointing every step with no compute time makes the trainer spend most
        # of its life inside a checkpoint write, so random kills land mid-write.
        rng = random.Random(1234)
        args = make_args(tmp_path, total_steps=100_000, checkpoint_every=1, step_ms=0.0, keep=2)
        for _ in range(6):
            with running(args) as proc:
                proc.wait_for(lambda b: b.state is TrainerState.RUNNING, timeout=20)
                proc.wait(rng.uniform(0.01, 0.25))
                proc.kill()
            assert _assert_every_verified_checkpoint_is_right(tmp_path, SEED, 3000) >= 1
        # The schedule depends on the step alone, so finishing at a nearer total is
        # the same computation.
        total = max(r.step for r in scan_checkpoints(tmp_path) if r.verified) + 30
        assert _run_to_end(tmp_path, total_steps=total, checkpoint_every=1, keep=2) == 0
        progress = read_progress(tmp_path)
        assert progress is not None and progress.resumed_from > 0
        assert progress.params_digest == reference_digests(SEED, 3000)[total]


class TestCrashInsideACheckpointWrite:
    """SIGKILL at each phase of a write: only a committed (manifested) checkpoint is resumed."""

    @pytest.mark.parametrize("phase", CRASH_PHASES)
    def test_resume_skips_what_was_not_committed(self, tmp_path: Path, phase: str) -> None:
        code = _run_to_end(tmp_path, total_steps=60, crash_at=(phase, 40))
        assert code == -9
        statuses = {r.step: r.status.value for r in scan_checkpoints(tmp_path)}
        expected = {
            "data-tmp": {20: "ok"},
            "data": {20: "ok", 40: "partial"},
            "manifest": {20: "ok", 40: "ok"},
        }[phase]
        assert statuses == expected
        assert (tmp_path / "ckpt-40.npz.tmp").exists() == (phase == "data-tmp")

        assert _run_to_end(tmp_path, total_steps=60) == 0
        progress = read_progress(tmp_path)
        assert progress is not None
        assert progress.resumed_from == (40 if phase == "manifest" else 20)
        assert progress.params_digest == reference_digests(SEED, 60)[60]
        assert not list(tmp_path.glob("*.tmp"))


class TestCorruptCheckpoints:
    """A corrupt newest checkpoint is skipped by ``latest`` and refused by name (exit 3)."""

    def test_latest_falls_back_to_the_previous_one(self, tmp_path: Path) -> None:
        assert _run_to_end(tmp_path, total_steps=60) == 0
        assert corrupt_newest(tmp_path).step == 60
        assert _run_to_end(tmp_path, total_steps=100) == 0
        progress = read_progress(tmp_path)
        assert progress is not None and progress.resumed_from == 40
        assert progress.params_digest == params_digest(train_uninterrupted(SEED, 100))

    def test_asking_for_the_corrupt_step_exits_3(self, tmp_path: Path) -> None:
        assert _run_to_end(tmp_path, total_steps=60) == 0
        corrupt_newest(tmp_path)
        assert _run_to_end(tmp_path, total_steps=100, resume=60) == EXIT_BAD_CHECKPOINT
        beat = read_heartbeat(tmp_path)
        assert beat is not None and beat.state is TrainerState.FAILED
        assert beat.error is not None and "corrupt" in beat.error
        assert "cannot resume" in (tmp_path / "trainer.log").read_text()

    def test_latest_refuses_when_nothing_committed_verifies(self, tmp_path: Path) -> None:
        assert _run_to_end(tmp_path, total_steps=20, keep=1) == 0
        corrupt_newest(tmp_path)
        assert _run_to_end(tmp_path, total_steps=60) == EXIT_BAD_CHECKPOINT
        assert "no checkpoint verifies" in _error(tmp_path)

    def test_a_checkpoint_of_another_seed_is_refused(self, tmp_path: Path) -> None:
        assert _run_to_end(tmp_path, total_steps=20) == 0
        assert _run_to_end(tmp_path, total_steps=40, seed=SEED + 1, resume=20) == 3
        assert "seed" in _error(tmp_path)


class TestCleanStop:
    """SIGTERM finishes the current step, leaves no temporary or half checkpoint, exits 143."""

    def test_sigterm(self, tmp_path: Path) -> None:
        with running(make_args(tmp_path, total_steps=5000, step_ms=5.0)) as proc:
            proc.wait_for(lambda b: b.step >= 45, timeout=20)
            assert proc.stop(grace_s=5.0) == 143
        beat = read_heartbeat(tmp_path)
        assert beat is not None and beat.state is TrainerState.STOPPED
        assert not list(tmp_path.glob("*.tmp"))
        records = scan_checkpoints(tmp_path)
        assert records and all(r.verified for r in records)
        assert records[-1].step == beat.checkpoint_step
        assert _assert_every_verified_checkpoint_is_right(tmp_path, SEED, beat.step) == len(records)


class TestRefusals:
    """Bad arguments exit 2 naming the flag; a second trainer on a locked workdir exits 4."""

    @pytest.mark.parametrize(
        ("flag", "value"),
        [
            ("--checkpoint-every", "0"),
            ("--resume", "yesterday"),
            ("--slow-factor", "0"),
            ("--hosts", "a,,b"),
        ],
    )
    def test_bad_arguments(self, tmp_path: Path, flag: str, value: str) -> None:
        argv = make_args(tmp_path).argv()
        argv = [a for a in argv if not a.startswith(flag + "=")] + [f"{flag}={value}"]
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        assert exc.value.code == 2

    def test_bad_arguments_as_a_process(self, tmp_path: Path) -> None:
        done = subprocess.run(
            [sys.executable, "-m", TRAINER_MODULE, "--job=j", f"--workdir={tmp_path}",
             "--hosts=a", "--total-steps=0"],
            capture_output=True, text=True, env=trainer_env(), timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 2
        assert "--total-steps" in done.stderr

    def test_second_trainer_on_the_same_workdir(self, tmp_path: Path) -> None:
        with running(make_args(tmp_path, total_steps=5000, step_ms=5.0)) as first:
            first.wait_for(lambda b: b.step >= 1, timeout=20)
            second = TrainerProcess.start(make_args(tmp_path, total_steps=5000))
            assert second.wait(20) == EXIT_LOCKED
            assert second.heartbeat() is None
            assert first.alive() and first.heartbeat() is not None
        # The kernel drops the lock of a SIGKILLed trainer: the next one can start.
        assert _run_to_end(tmp_path, total_steps=40, resume="none") == 0


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


class TestBlasPinning:
    """The trainer always runs with every BLAS thread knob at 1, however it was launched."""

    def test_the_handle_pins_them(self, tmp_path: Path) -> None:
        with running(make_args(tmp_path, total_steps=5000, step_ms=5.0)) as proc:
            proc.wait_for(lambda b: b.step >= 1, timeout=20)
            env = _environ(proc.pid)
        assert all(env.get(var) == "1" for var in BLAS_THREAD_VARS)

    def test_a_bare_launch_re_execs_itself_pinned(self, tmp_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARS}
        env["OPENBLAS_NUM_THREADS"] = "2"
        argv = make_args(tmp_path, total_steps=5000, step_ms=5.0).argv()
        child = subprocess.Popen(
            [sys.executable, "-m", TRAINER_MODULE, *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proc = TrainerProcess(make_args(tmp_path), child)
        try:
            proc.wait_for(lambda b: b.step >= 1, timeout=20)
            pinned = _environ(child.pid)
        finally:
            proc.kill()
        # Same pid (exec, not a child), new environment.
        assert all(pinned.get(var) == "1" for var in BLAS_THREAD_VARS)
