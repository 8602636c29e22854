"""The supervisor side of one trainer process: start, stop, kill, pause, resume, observe.

The lab's training cluster holds one :class:`TrainerProcess` per running job and
maps its faults onto real signals:

- GPU error / host down / building power loss: :meth:`TrainerProcess.kill` (SIGKILL,
  no chance to clean up, exactly like losing the machine);
- hung trainer: :meth:`TrainerProcess.pause` (SIGSTOP: alive, no heartbeat, no progress);
- straggler: :meth:`TrainerProcess.set_slow_factor`;
- an orderly stop before a restart elsewhere: :meth:`TrainerProcess.stop` (SIGTERM,
  then SIGKILL after a grace period);
- a planned move: :meth:`TrainerProcess.checkpoint_and_stop` (SIGUSR1: checkpoint at
  the current step, then exit).

Every heartbeat carries the writer's pid, and :meth:`TrainerProcess.heartbeat`
ignores one written by an earlier process in the same workdir, so a restarted job
never looks alive on the strength of its predecessor's last heartbeat.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from orchestrator.lab.training.status import (
    CONTROL_FILE,
    Control,
    Heartbeat,
    Progress,
    read_control,
    read_heartbeat,
    read_progress,
    write_control,
)
from orchestrator.lab.training.trainer import BLAS_THREAD_VARS, CHECKPOINT_SIGNAL, TrainerArgs
from orchestrator.processes import spawn

__all__ = ["LOG_FILE", "TRAINER_MODULE", "TrainerProcess", "trainer_env"]

TRAINER_MODULE = "orchestrator.lab.training.trainer"
#: the child's stdout and stderr, appended across restarts
LOG_FILE = "trainer.log"
_POLL_S = 0.02


def trainer_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``base`` (default: ours) with BLAS pinned to one thread."""
    env = dict(os.environ if base is None else base)
    env.update(dict.fromkeys(BLAS_THREAD_VARS, "1"))
    return env


class TrainerProcess:
    """A running (or finished) trainer subprocess. Create with :meth:`start`."""

    def __init__(self, args: TrainerArgs, popen: subprocess.Popen[bytes]) -> None:
        self.args = args
        self._popen = popen
        self.paused = False

    @classmethod
    def start(
        cls,
        args: TrainerArgs,
        *,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        control: Control | None = None,
    ) -> TrainerProcess:
        """Launch ``python -m orchestrator.lab.training.trainer`` with ``args``.

        A control file left by an earlier run is replaced by ``control`` (or removed), so
        a straggler fault does not follow the job to its new hosts; a full disk, which
        belongs to the storage and not to the hosts, is passed on by the caller.
        """
        args.workdir.mkdir(parents=True, exist_ok=True)
        (args.workdir / CONTROL_FILE).unlink(missing_ok=True)
        if control is not None:
            write_control(args.workdir, control)
        with (args.workdir / LOG_FILE).open("ab") as log:
            # Its own session: a Ctrl-C aimed at the lab does not hit every trainer, and
            # the lab decides how each one stops; a lab killed outright takes them along.
            popen = spawn(
                [python, "-m", TRAINER_MODULE, *args.argv()],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=trainer_env(env),
            )
        return cls(args, popen)

    # --- observation -----------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def workdir(self) -> Path:
        return self.args.workdir

    @property
    def returncode(self) -> int | None:
        """The exit code once exited (negative: killed by that signal), else None."""
        return self._popen.poll()

    def alive(self) -> bool:
        return self.returncode is None

    def heartbeat(self) -> Heartbeat | None:
        """This process's latest heartbeat; None before its first one."""
        beat = read_heartbeat(self.workdir)
        return beat if beat is not None and beat.pid == self.pid else None

    def heartbeat_age(self, now: float | None = None) -> float | None:
        """Seconds since this process last heartbeat (wall clock), None if it never did."""
        beat = self.heartbeat()
        return None if beat is None else (time.time() if now is None else now) - beat.time

    def progress(self) -> Progress | None:
        """The final progress record, once this run has finished."""
        return read_progress(self.workdir) if self.returncode == 0 else None

    def log_tail(self, max_bytes: int = 4000) -> str:
        try:
            data = (self.workdir / LOG_FILE).read_bytes()
        except FileNotFoundError:
            return ""
        return data[-max_bytes:].decode(errors="replace")

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None if still running after ``timeout`` seconds."""
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_for(self, predicate: Callable[[Heartbeat], bool], timeout: float) -> Heartbeat:
        """Poll heartbeats until one satisfies ``predicate``.

        TimeoutError (with the trainer's log tail) if none does within ``timeout`` or
        the process exits without one doing so.
        """
        deadline = time.monotonic() + timeout
        while True:
            exited = not self.alive()
            beat = self.heartbeat()
            if beat is not None and predicate(beat):
                return beat
            if exited or time.monotonic() >= deadline:
                state = f"exited {self.returncode}" if exited else f"no match in {timeout}s"
                raise TimeoutError(
                    f"trainer {self.args.job} (pid {self.pid}) {state}; last heartbeat "
                    f"{beat.model_dump_json() if beat else None}; log: {self.log_tail(1500)}"
                )
            time.sleep(_POLL_S)

    # --- control -----------------------------------------------------------------------

    def _signal(self, signum: int) -> bool:
        """Deliver ``signum`` unless the process has been reaped (its pid may be reused)."""
        if self._popen.poll() is not None:
            return False
        self._popen.send_signal(signum)
        return True

    def stop(self, grace_s: float = 5.0) -> int:
        """SIGTERM, then SIGKILL after ``grace_s``; returns the exit code (143: clean).

        A paused trainer is continued after the SIGTERM, or it could never act on it.
        """
        if self._signal(signal.SIGTERM):
            self._signal(signal.SIGCONT)
            self.paused = False
            code = self.wait(grace_s)
            if code is not None:
                return code
            self._signal(signal.SIGKILL)
        return self._popen.wait()

    def checkpoint_and_stop(self, grace_s: float = 30.0) -> int:
        """SIGUSR1: finish the current step, checkpoint it, exit (138); SIGKILL after
        ``grace_s`` (a checkpoint write takes longer than a step, hence the longer grace)."""
        if self._signal(CHECKPOINT_SIGNAL):
            self._signal(signal.SIGCONT)
            self.paused = False
            code = self.wait(grace_s)
            if code is not None:
                return code
            self._signal(signal.SIGKILL)
        return self._popen.wait()

    def kill(self) -> int:
        """SIGKILL now (a crash, a dead host): no cleanup, no last heartbeat."""
        self._signal(signal.SIGKILL)
        self.paused = False
        return self._popen.wait()

    def pause(self) -> None:
        """SIGSTOP: the "hung trainer" fault. Alive, but no heartbeat and no progress."""
        if self._signal(signal.SIGSTOP):
            self.paused = True

    def resume(self) -> None:
        """SIGCONT: undo :meth:`pause`."""
        self._signal(signal.SIGCONT)
        self.paused = False

    def set_slow_factor(self, factor: float) -> None:
        """Make the running trainer a straggler (takes effect at its next heartbeat)."""
        control = read_control(self.workdir) or Control()
        write_control(self.workdir, control.model_copy(update={"slow_factor": factor}))

    def fill_disk(self) -> None:
        """The "disk full" fault: the trainer's next checkpoint write fails with ENOSPC."""
        control = read_control(self.workdir) or Control()
        write_control(self.workdir, control.model_copy(update={"disk_full": True}))

    def __enter__(self) -> TrainerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(grace_s=2.0)
