"""The trainer process: ``python -m orchestrator.lab.training.trainer --job J --workdir D ...``.

It trains :mod:`.sgd`'s model for ``--total-steps`` steps, sleeping ``--step-ms``
x ``--slow-factor`` per step in place of GPU compute, heartbeats into
``D/heartbeat.json``, and checkpoints every ``--checkpoint-every`` steps through
:mod:`.checkpoints` (data durable first, manifest last, keep ``--keep``).

Exit codes: 0 finished; 2 bad arguments; 3 the requested checkpoint cannot be used
(nothing is trained, the heartbeat says ``failed`` and why); 4 another live trainer
holds the workdir; 5 the disk is full (ENOSPC/EDQUOT): a restart cannot succeed until
someone frees space, so it is a failure of its own, not a crash to retry; 6 checkpoint
data survives whose manifests were lost (see :mod:`.resume`): refused rather than
silently restarted from step 0; 128+signal after SIGTERM/SIGINT (143 for SIGTERM), once
the current step (and its checkpoint, if due) is complete: never a half checkpoint;
138 after SIGUSR1, the checkpoint on demand of a planned move: the current step is
completed and checkpointed (unless it already is) before the trainer stops, so a
restart from that checkpoint loses no step.
Every refusal and failure is one line on stderr and the reason in a ``failed``
heartbeat (when the disk still takes one).

The workdir is locked (``flock``) for the life of the process, so a supervisor that
restarts a job before the old trainer is really dead gets exit 4 instead of two
writers interleaving checkpoints in one directory. The kernel drops the lock when
the process dies, even by SIGKILL.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from orchestrator.lab.training.atomic import TMP_SUFFIX
from orchestrator.lab.training.checkpoints import (
    checkpoint_id,
    prune_checkpoints,
    write_checkpoint,
)
from orchestrator.lab.training.resume import ManifestsLost, ResumeRefused, resolve_resume
from orchestrator.lab.training.sgd import (
    TrainState,
    init_state,
    params_digest,
    train_step,
    train_uninterrupted,
)
from orchestrator.lab.training.status import (
    PROGRESS_FILE,
    Heartbeat,
    Progress,
    TrainerState,
    read_control,
    write_status,
)
from orchestrator.logging import configure_logging, get_logger

__all__ = [
    "BLAS_THREAD_VARS",
    "CRASH_PHASES",
    "EXIT_BAD_ARGS",
    "EXIT_BAD_CHECKPOINT",
    "EXIT_DISK_FULL",
    "EXIT_LOCKED",
    "EXIT_MANIFESTS_LOST",
    "EXIT_OK",
    "LOCK_FILE",
    "ManifestsLost",
    "ResumeRefused",
    "TrainerArgs",
    "main",
    "parse_args",
    "resolve_resume",
    "train_uninterrupted",
]

EXIT_OK, EXIT_BAD_ARGS, EXIT_BAD_CHECKPOINT, EXIT_LOCKED = 0, 2, 3, 4
EXIT_DISK_FULL, EXIT_MANIFESTS_LOST = 5, 6
#: the errors that mean "no space": nothing but freeing some will help
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
LOCK_FILE = "trainer.lock"
#: every thread-pool knob numpy's BLAS may read; pinned to 1 so results never depend on
#: how a reduction was split across threads
BLAS_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
#: where ``--fault-crash-at PHASE:STEP`` SIGKILLs the trainer inside a checkpoint write
CRASH_PHASES = ("data-tmp", "data", "manifest")
#: checkpoint at the current step, then stop (exit 128 + SIGUSR1): a planned move
CHECKPOINT_SIGNAL = signal.SIGUSR1
#: the longest the loop sleeps at once, so a SIGTERM is noticed promptly
_SLEEP_SLICE_S = 0.05

log = get_logger(__name__)


@dataclass(frozen=True)
class TrainerArgs:
    job: str
    workdir: Path
    hosts: tuple[str, ...]
    total_steps: int
    checkpoint_every: int
    step_ms: float
    seed: int
    #: "latest", "none", or a checkpoint step
    resume: str | int
    keep: int
    heartbeat_s: float
    slow_factor: float
    crash_at: tuple[str, int] | None = None

    def argv(self) -> list[str]:
        """The command-line arguments that parse back to these args."""
        args = [
            f"--job={self.job}",
            f"--workdir={self.workdir}",
            f"--hosts={','.join(self.hosts)}",
            f"--total-steps={self.total_steps}",
            f"--checkpoint-every={self.checkpoint_every}",
            f"--step-ms={self.step_ms}",
            f"--seed={self.seed}",
            f"--resume={self.resume}",
            f"--keep={self.keep}",
            f"--heartbeat-s={self.heartbeat_s}",
            f"--slow-factor={self.slow_factor}",
        ]
        if self.crash_at is not None:
            args.append(f"--fault-crash-at={self.crash_at[0]}:{self.crash_at[1]}")
        return args


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.lab.training.trainer",
        description="Deterministic numpy trainer with heartbeats and atomic checkpoints.",
    )
    p.add_argument("--job", required=True)
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--hosts", required=True, help="comma-separated; recorded, not used")
    p.add_argument("--total-steps", required=True, type=int)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", default="latest", help="latest | none | STEP")
    p.add_argument("--keep", type=int, default=3)
    p.add_argument("--heartbeat-s", type=float, default=1.0)
    p.add_argument("--slow-factor", type=float, default=1.0)
    p.add_argument("--fault-crash-at", default=None, help=argparse.SUPPRESS)
    return p


def parse_args(argv: Sequence[str] | None = None) -> TrainerArgs:
    """Parse and validate; a bad value exits 2 with a message naming the flag."""
    parser = _parser()
    ns = parser.parse_args(argv)
    checks = [
        (ns.job.strip() != "", "--job: must not be empty"),
        (ns.total_steps >= 1, f"--total-steps: must be at least 1, got {ns.total_steps}"),
        (ns.checkpoint_every >= 1, f"--checkpoint-every: must be >= 1, got {ns.checkpoint_every}"),
        (ns.step_ms >= 0, f"--step-ms: must be >= 0, got {ns.step_ms}"),
        (ns.seed >= 0, f"--seed: must be >= 0, got {ns.seed}"),
        (ns.keep >= 1, f"--keep: must be at least 1, got {ns.keep}"),
        (ns.heartbeat_s > 0, f"--heartbeat-s: must be > 0, got {ns.heartbeat_s}"),
        (ns.slow_factor > 0, f"--slow-factor: must be > 0, got {ns.slow_factor}"),
    ]
    for ok, message in checks:
        if not ok:
            parser.error(message)
    hosts = tuple(h.strip() for h in ns.hosts.split(","))
    if not all(hosts):
        parser.error(f"--hosts: empty host name in {ns.hosts!r}")
    resume: str | int = ns.resume
    if ns.resume not in ("latest", "none"):
        try:
            resume = int(ns.resume)
        except ValueError:
            parser.error(f"--resume: must be latest, none or a step, got {ns.resume!r}")
        if int(resume) < 0:
            parser.error(f"--resume: a step must be non-negative, got {ns.resume}")
    crash_at = None
    if ns.fault_crash_at is not None:
        phase, _, step = ns.fault_crash_at.partition(":")
        if phase not in CRASH_PHASES or not step.isdigit():
            parser.error(f"--fault-crash-at: expected one of {CRASH_PHASES}:STEP")
        crash_at = (phase, int(step))
    return TrainerArgs(
        job=ns.job,
        workdir=ns.workdir,
        hosts=hosts,
        total_steps=ns.total_steps,
        checkpoint_every=ns.checkpoint_every,
        step_ms=ns.step_ms,
        seed=ns.seed,
        resume=resume,
        keep=ns.keep,
        heartbeat_s=ns.heartbeat_s,
        slow_factor=ns.slow_factor,
        crash_at=crash_at,
    )


class Trainer:
    def __init__(self, args: TrainerArgs, state: TrainState) -> None:
        self.args = args
        self.state = state
        self.resumed_from = state.step
        self.checkpoint_step: int | None = state.step if state.step > 0 else None
        self.checkpoint_digest = params_digest(state.flat_params()) if state.step else None
        self.slow_factor = args.slow_factor
        #: the lab's "disk full" fault: every checkpoint write fails with ENOSPC
        self.disk_full = False
        self.stop_signal: int | None = None
        self._beat_steps = 0
        self._beat_started = time.monotonic()
        self._next_beat = 0.0

    def request_stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_signal = signum

    def _crash_hook(self, phase: str, step: int) -> None:
        if self.args.crash_at == (phase, step):
            os.kill(os.getpid(), signal.SIGKILL)

    def beat(self, state: TrainerState, error: str | None = None) -> None:
        now = time.monotonic()
        elapsed = now - self._beat_started
        control = read_control(self.args.workdir)
        if control is not None:
            self.slow_factor = control.slow_factor
            self.disk_full = control.disk_full
        write_status(
            self.args.workdir,
            Heartbeat(
                job=self.args.job,
                pid=os.getpid(),
                step=self.state.step,
                total_steps=self.args.total_steps,
                time=time.time(),
                state=state,
                seed=self.args.seed,
                hosts=list(self.args.hosts),
                resumed_from=self.resumed_from,
                checkpoint_step=self.checkpoint_step,
                params_digest=self.checkpoint_digest,
                step_ms_avg=1000.0 * elapsed / self._beat_steps if self._beat_steps else None,
                slow_factor=self.slow_factor,
                error=error,
            ),
        )
        self._beat_steps, self._beat_started = 0, now
        self._next_beat = now + self.args.heartbeat_s

    def checkpoint(self) -> None:
        step = self.state.step
        digest = params_digest(self.state.flat_params())
        if self.disk_full:
            path = self.args.workdir / f"{checkpoint_id(step)}.npz"
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        write_checkpoint(
            self.args.workdir,
            step,
            self.state.to_arrays(),
            meta={"job": self.args.job, "seed": self.args.seed, "params_digest": digest},
            hook=self._crash_hook if self.args.crash_at else None,
        )
        # Older checkpoints go only now that the new manifest is durable.
        pruned = prune_checkpoints(self.args.workdir, self.args.keep)
        self.checkpoint_step, self.checkpoint_digest = step, digest
        log.info("checkpoint", job=self.args.job, step=step, digest=digest[:12], pruned=pruned)

    def _compute(self, started: float) -> None:
        """Stand in for GPU time; heartbeat while waiting; cut short by a stop request."""
        deadline = started + self.args.step_ms * self.slow_factor / 1000.0
        while self.stop_signal is None:
            now = time.monotonic()
            if now >= self._next_beat:
                self.beat(TrainerState.RUNNING)
            if now >= deadline:
                return
            time.sleep(min(deadline - now, self._next_beat - now, _SLEEP_SLICE_S))

    def run(self) -> int:
        args = self.args
        self.beat(TrainerState.RUNNING)
        loop_started = time.monotonic()
        while self.state.step < args.total_steps and self.stop_signal is None:
            started = time.monotonic()
            train_step(self.state)
            self._compute(started)
            self._beat_steps += 1
            if self.state.step % args.checkpoint_every == 0:
                self.checkpoint()
            if time.monotonic() >= self._next_beat:
                self.beat(TrainerState.RUNNING)
        if self.state.step < args.total_steps:
            assert self.stop_signal is not None
            if self.stop_signal == CHECKPOINT_SIGNAL and self.checkpoint_step != self.state.step:
                self.checkpoint()
            self.beat(TrainerState.STOPPED)
            log.info("stopped", job=args.job, step=self.state.step, signal=self.stop_signal)
            return 128 + self.stop_signal
        if self.checkpoint_step != self.state.step:
            self.checkpoint()
        final = params_digest(self.state.flat_params())
        write_status(
            args.workdir,
            Progress(
                job=args.job,
                step=self.state.step,
                total_steps=args.total_steps,
                seed=args.seed,
                params_digest=final,
                resumed_from=self.resumed_from,
                elapsed_s=time.monotonic() - loop_started,
                steps_run=self.state.step - self.resumed_from,
                finished_at=time.time(),
            ),
        )
        self.beat(TrainerState.FINISHED)
        log.info("finished", job=args.job, step=self.state.step, digest=final[:12])
        return EXIT_OK


def _lock(workdir: Path) -> IO[str] | None:
    handle = (workdir / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _clear_leftovers(workdir: Path) -> None:
    # We hold the lock, so no writer is alive: temporaries are abandoned writes, and
    # a progress file belongs to an earlier run. (control.json is the launcher's.)
    for path in workdir.iterdir():
        if path.name.endswith(TMP_SUFFIX) or path.name == PROGRESS_FILE:
            path.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(json=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    lock = _lock(args.workdir)
    if lock is None:
        print(f"trainer: {args.workdir} is locked by another live trainer", file=sys.stderr)
        return EXIT_LOCKED
    trainer: Trainer | None = None
    pending: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if trainer is None:
            pending.append(signum)
        else:
            trainer.request_stop(signum, frame)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(CHECKPOINT_SIGNAL, on_signal)
    try:
        _clear_leftovers(args.workdir)
        try:
            state, skipped = resolve_resume(args)
        except ResumeRefused as exc:
            code = EXIT_MANIFESTS_LOST if isinstance(exc, ManifestsLost) else EXIT_BAD_CHECKPOINT
            return _refuse(args, f"cannot resume {args.job} ({args.resume}): {exc}", code)
        trainer = Trainer(args, state)
        if pending:
            trainer.stop_signal = pending[0]
        log.info(
            "started",
            job=args.job,
            pid=os.getpid(),
            resumed_from=state.step,
            skipped=skipped,
            hosts=list(args.hosts),
        )
        return trainer.run()
    except OSError as exc:
        if exc.errno not in _DISK_FULL_ERRNOS:
            raise
        # Restarting would fail the same way at the same write: a crash loop, each round
        # with a traceback. Say it once, with its own exit code the supervisor acts on.
        where = f" writing {Path(exc.filename).name}" if exc.filename else ""
        return _refuse(args, f"disk full{where}: {exc.strerror}", EXIT_DISK_FULL, trainer)
    finally:
        lock.close()


def _refuse(args: TrainerArgs, message: str, code: int, trainer: Trainer | None = None) -> int:
    """One line on stderr and a ``failed`` heartbeat saying why; ``code`` to exit with."""
    print(f"trainer: {message}", file=sys.stderr)
    # A full disk may not take the heartbeat either; the exit code still tells.
    with contextlib.suppress(OSError):
        (trainer or Trainer(args, init_state(args.seed))).beat(TrainerState.FAILED, error=message)
    return code


def _pin_blas_threads() -> None:
    """Re-exec with every BLAS thread knob at 1 unless the launcher already did it.

    The variables only take effect before numpy loads, and numpy is loaded by the
    time this module runs, hence the exec (same pid, so handles stay valid).
    """
    if all(os.environ.get(var) == "1" for var in BLAS_THREAD_VARS):
        return
    env = os.environ | dict.fromkeys(BLAS_THREAD_VARS, "1")
    os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]], env)


if __name__ == "__main__":
    _pin_blas_threads()
    sys.exit(main())
