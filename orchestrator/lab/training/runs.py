"""One run of a training job: a real trainer process (live) or an analytic one (model).

Both answer the same questions (step, last heartbeat, state, newest checkpoint), so
the cluster and the fleet API do not care which physics is behind a job.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.contracts.training import JobFailure, JobState
from orchestrator.lab.training.process import TrainerProcess
from orchestrator.lab.training.status import Control, TrainerState
from orchestrator.lab.training.trainer import EXIT_DISK_FULL, EXIT_MANIFESTS_LOST, TrainerArgs

__all__ = ["LiveRun", "ModelRun", "Run", "model_digest"]

Clock = Callable[[], float]


def model_digest(job: str, seed: int, step: int) -> str:
    """The stand-in parameters digest of a model-mode checkpoint: a pure function of its step."""
    return hashlib.sha256(f"{job}:{seed}:{step}".encode()).hexdigest()


class Run:
    """What the cluster asks of a run; ``ended_at`` is set when the run stops or dies."""

    resumed_from: int
    started_at: float
    ended_at: float | None = None
    stopped_by_api = False

    def step(self) -> int:
        raise NotImplementedError

    def last_heartbeat(self) -> float | None:
        raise NotImplementedError

    def exited(self) -> bool:
        raise NotImplementedError

    def finished(self) -> bool:
        raise NotImplementedError

    def checkpoint_step(self) -> int | None:
        raise NotImplementedError

    def params_digest(self) -> str | None:
        return None

    def step_ms_avg(self) -> float | None:
        return None

    def host_step_ms(self) -> dict[str, float] | None:
        """Each host's own compute per step (ms), where the run reports it per rank."""
        return None

    def failure(self) -> JobFailure | None:
        """The run's own reason for ending, when it exited with one."""
        return None

    def fill_disk(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def checkpoint_stop(self) -> None:
        """Checkpoint at the current step, then stop (a planned move). A run that cannot
        checkpoint on demand just stops: its newest committed checkpoint is what it has."""
        self.stop()

    def kill(self) -> None:
        raise NotImplementedError

    def pause(self) -> None:
        raise NotImplementedError

    def set_slow_factor(self, factor: float) -> None:
        raise NotImplementedError

    def state(self, clock: Clock) -> JobState:
        if not self.exited():
            return JobState.RUNNING
        if self.ended_at is None:
            # Exited on its own since we last looked: finished or crashed now.
            self.ended_at = clock()
        if self.finished():
            return JobState.FINISHED
        return JobState.STOPPED if self.stopped_by_api else JobState.CRASHED


#: trainer exit codes a restart cannot cure, and the reason the fleet reports for them
_FATAL_EXITS = {EXIT_DISK_FULL: "disk_full", EXIT_MANIFESTS_LOST: "checkpoints_lost"}


class LiveRun(Run):
    def __init__(self, args: TrainerArgs, resumed_from: int, *, disk_full: bool = False) -> None:
        control = Control(disk_full=True) if disk_full else None
        self.proc = TrainerProcess.start(args, control=control)
        self.resumed_from = resumed_from
        self.started_at = time.time()

    def step(self) -> int:
        beat = self.proc.heartbeat()
        return self.resumed_from if beat is None else beat.step

    def last_heartbeat(self) -> float | None:
        beat = self.proc.heartbeat()
        return None if beat is None else beat.time

    def exited(self) -> bool:
        return not self.proc.alive()

    def finished(self) -> bool:
        return self.proc.returncode == 0

    def checkpoint_step(self) -> int | None:
        beat = self.proc.heartbeat()
        return None if beat is None else beat.checkpoint_step

    def params_digest(self) -> str | None:
        progress = self.proc.progress()
        if progress is not None:
            return progress.params_digest
        beat = self.proc.heartbeat()
        return None if beat is None else beat.params_digest

    def step_ms_avg(self) -> float | None:
        beat = self.proc.heartbeat()
        return None if beat is None else beat.step_ms_avg

    def failure(self) -> JobFailure | None:
        code = self.proc.returncode
        if code not in _FATAL_EXITS:
            return None
        # The trainer's failed heartbeat says why, unless the disk refused that too.
        beat = self.proc.heartbeat()
        said = beat.error if beat and beat.state is TrainerState.FAILED else None
        reason = _FATAL_EXITS[code]
        return JobFailure(
            reason=reason,
            detail=said or reason.replace("_", " "),
            retryable=False,
            exit_code=code,
        )

    def fill_disk(self) -> None:
        self.proc.fill_disk()

    def stop(self) -> None:
        self.stopped_by_api = True
        self.proc.stop(grace_s=3.0)
        self.ended_at = self.ended_at or time.time()

    def checkpoint_stop(self) -> None:
        self.stopped_by_api = True
        self.proc.checkpoint_and_stop()
        self.ended_at = self.ended_at or time.time()

    def kill(self) -> None:
        self.proc.kill()
        self.ended_at = self.ended_at or time.time()

    def pause(self) -> None:
        self.proc.pause()

    def set_slow_factor(self, factor: float) -> None:
        self.proc.set_slow_factor(factor)

    @property
    def workdir(self) -> Path:
        return self.proc.workdir


class ModelRun(Run):
    """Progress computed from the clock: ``step_s`` per step, no process at all."""

    def __init__(
        self,
        *,
        clock: Clock,
        resumed_from: int,
        total_steps: int,
        step_s: float,
        heartbeat_s: float,
        checkpoint_every: int,
    ) -> None:
        self.clock = clock
        self.started_at = clock()
        self.resumed_from = resumed_from
        self.total_steps = total_steps
        self.step_s = max(step_s, 1e-9)
        self.heartbeat_s = heartbeat_s
        self.checkpoint_every = checkpoint_every
        self.paused_at: float | None = None
        self.slow_factor = 1.0
        #: the step checkpointed on demand when the run was stopped for a move
        self.on_demand: int | None = None

    def _frozen_at(self) -> float:
        now = self.clock()
        for t in (self.ended_at, self.paused_at):
            if t is not None:
                now = min(now, t)
        return now

    def step(self) -> int:
        elapsed = max(self._frozen_at() - self.started_at, 0.0)
        done = math.floor(elapsed / (self.step_s * self.slow_factor) + 1e-9)
        return min(self.total_steps, self.resumed_from + done)

    def last_heartbeat(self) -> float:
        # A heartbeat lands every heartbeat_s while the run is alive and not hung.
        at = self._frozen_at()
        beats = math.floor((at - self.started_at) / self.heartbeat_s + 1e-9)
        return self.started_at + beats * self.heartbeat_s

    def exited(self) -> bool:
        return self.ended_at is not None or self.step() >= self.total_steps

    def finished(self) -> bool:
        return self.step() >= self.total_steps

    def checkpoint_step(self) -> int | None:
        step = self.step()
        if step >= self.total_steps:
            return step
        if self.on_demand is not None:
            return self.on_demand
        k = (step // self.checkpoint_every) * self.checkpoint_every
        return k if k > self.resumed_from else (self.resumed_from or None)

    def stop(self) -> None:
        self.stopped_by_api = True
        self.ended_at = self.ended_at or self.clock()

    def checkpoint_stop(self) -> None:
        self.stop()
        self.on_demand = self.step()

    def kill(self) -> None:
        self.ended_at = self.ended_at or self.clock()

    def pause(self) -> None:
        self.paused_at = self.paused_at or self.clock()

    def set_slow_factor(self, factor: float) -> None:
        # Re-anchor so the steps already done stay done.
        done = self.step() - self.resumed_from
        now = self.clock()
        self.slow_factor = factor
        self.started_at = now - done * self.step_s * factor
