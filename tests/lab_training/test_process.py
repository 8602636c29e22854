"""The supervisor-side handle: pause (a hung trainer), resume, stop, stragglers, heartbeats."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.lab.training.process import TrainerProcess
from orchestrator.lab.training.status import TrainerState
from tests.lab_training.support import make_args, running

pytestmark = [pytest.mark.slow, pytest.mark.server]  # trainer processes


class TestHungTrainer:
    """SIGSTOP keeps the process alive while its heartbeat and step stop advancing."""

    def test_heartbeat_stops_while_paused_and_resumes_after(self, tmp_path: Path) -> None:
        args = make_args(tmp_path, total_steps=100_000, step_ms=5.0, heartbeat_s=0.1)
        with running(args) as proc:
            proc.wait_for(lambda b: b.step >= 10, timeout=20)
            proc.pause()
            frozen = proc.heartbeat()
            assert frozen is not None
            time.sleep(1.0)  # ten heartbeat intervals
            assert proc.alive() and proc.paused
            assert proc.heartbeat() == frozen
            age = proc.heartbeat_age()
            assert age is not None and age >= 1.0

            proc.resume()
            # The first beat after SIGCONT may still show the step that was frozen;
            # the heartbeat and the step both move again soon after.
            later = proc.wait_for(lambda b: b.time > frozen.time, timeout=5)
            assert later.state is TrainerState.RUNNING
            proc.wait_for(lambda b: b.step > frozen.step, timeout=5)

    def test_a_paused_trainer_still_stops_cleanly(self, tmp_path: Path) -> None:
        args = make_args(tmp_path, total_steps=100_000, step_ms=5.0)
        with running(args) as proc:
            proc.wait_for(lambda b: b.step >= 5, timeout=20)
            proc.pause()
            # 143 is SIGTERM answered by the trainer itself; a stop that had waited out the
            # grace period would end in SIGKILL (-9)
            assert proc.stop(grace_s=5.0) == 143
        beat = proc.heartbeat()
        assert beat is not None and beat.state is TrainerState.STOPPED

    def test_stop_escalates_to_sigkill_after_the_grace_period(self, tmp_path: Path) -> None:
        # A stand-in "interpreter" that ignores SIGTERM, as a trainer wedged in a
        # driver call would: only the SIGKILL after the grace period ends it.
        stubborn = tmp_path / "stubborn.sh"
        stubborn.write_text("#!/bin/sh\ntrap '' TERM\nwhile true; do sleep 0.05; done\n")
        stubborn.chmod(0o755)
        proc = TrainerProcess.start(make_args(tmp_path / "w"), python=str(stubborn))
        try:
            time.sleep(0.2)
            started = time.monotonic()
            assert proc.stop(grace_s=0.5) == -9
            assert time.monotonic() - started >= 0.5
        finally:
            proc.kill()


class TestStraggler:
    """A slow factor stretches every step; the heartbeat reports the step time."""

    def test_slow_factor_flag(self, tmp_path: Path) -> None:
        fast = TrainerProcess.start(
            make_args(tmp_path / "fast", total_steps=40, step_ms=15.0, checkpoint_every=100)
        )
        slow = TrainerProcess.start(
            make_args(
                tmp_path / "slow",
                total_steps=40,
                step_ms=15.0,
                checkpoint_every=100,
                slow_factor=3.0,
            )
        )
        assert fast.wait(30) == 0 and slow.wait(30) == 0
        fast_p, slow_p = fast.progress(), slow.progress()
        assert fast_p is not None and slow_p is not None
        assert fast_p.elapsed_s >= 40 * 0.015
        assert slow_p.elapsed_s >= 40 * 0.045
        assert slow_p.elapsed_s > 2.0 * fast_p.elapsed_s
        assert fast_p.params_digest == slow_p.params_digest

    def test_slowing_a_running_trainer(self, tmp_path: Path) -> None:
        # A 10 ms step took 69 ms on a loaded machine (2 cores, 4 test workers): the slowed
        # step (300 ms) stands far above what load alone does. A heartbeat spans 3-4 slowed
        # steps, so its average is within a step of the truth.
        args = make_args(tmp_path, total_steps=100_000, step_ms=10.0, heartbeat_s=1.0)
        with running(args) as proc:
            before = proc.wait_for(lambda b: b.step >= 20 and b.step_ms_avg is not None, timeout=20)
            assert before.step_ms_avg is not None and before.step_ms_avg < 150
            proc.set_slow_factor(30.0)
            # The factor is picked up at one heartbeat; the next one measures it.
            slowed = proc.wait_for(lambda b: b.slow_factor == 30.0, timeout=5)
            after = proc.wait_for(lambda b: b.time > slowed.time, timeout=5)
            assert after.step_ms_avg is not None and after.step_ms_avg >= 225


class TestHeartbeatOwnership:
    """A handle only reports heartbeats its own process wrote, never a predecessor's."""

    def test_a_killed_runs_heartbeat_is_not_the_new_runs(self, tmp_path: Path) -> None:
        args = make_args(tmp_path, total_steps=100_000, step_ms=5.0)
        with running(args) as old:
            old.wait_for(lambda b: b.step >= 5, timeout=20)
            old.kill()
        new = TrainerProcess.start(args)
        try:
            beat = new.heartbeat()
            assert beat is None or beat.pid == new.pid
            first = new.wait_for(lambda b: True, timeout=20)
            assert first.pid == new.pid != old.pid
        finally:
            new.kill()
        assert new.progress() is None  # killed, so no progress record
