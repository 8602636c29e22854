"""The PyTorch job as a run of the lab's training cluster (``kind: torch`` in the lab config).

It answers the cluster's questions from the files rank 0 writes (heartbeat,
progress) and the agents' exit codes, exactly as :class:`..runs.LiveRun` does for
the numpy trainer, so TrainingJobSupervisorWorkflow supervises it unchanged.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from orchestrator.lab.training.runs import Run
from orchestrator.lab.training.status import Progress
from orchestrator.lab.training.torchjob.args import CHECKPOINT_STOP_FILE, WorkerArgs
from orchestrator.lab.training.torchjob.launch import TorchJob
from orchestrator.lab.training.torchjob.ranks import read_host_step_ms, write_slow_factor

__all__ = ["TorchRun"]


class TorchRun(Run):
    def __init__(self, args: WorkerArgs, resumed_from: int) -> None:
        self.job = TorchJob.start(args)
        self.resumed_from = resumed_from
        self.started_at = time.time()

    def step(self) -> int:
        final = self._final()
        if final is not None:
            return final.step
        beat = self.job.heartbeat()
        return self.resumed_from if beat is None else beat.step

    def _final(self) -> Progress | None:
        """This run's final progress, once rank 0 has written it. Rank 0 writes it before
        its last heartbeat, so for a moment it is the newer of the two: the job reads as
        finished (:meth:`_done`) while the heartbeat still holds a step from up to a
        heartbeat earlier (in CI: finished at step 51 of 60)."""
        progress = self.job.progress()
        if progress is None or progress.resumed_from != self.resumed_from:
            return None
        return progress if progress.step >= self.job.args.total_steps else None

    def last_heartbeat(self) -> float | None:
        beat = self.job.heartbeat()
        return None if beat is None else beat.time

    def exited(self) -> bool:
        codes = self.job.returncodes()
        if all(code is not None for code in codes):
            return True
        if any(code not in (None, 0) for code in codes):
            # One host's agent failed: the job is down (its peers follow within the
            # collective timeout). Take the rest down now, so a restart never races them.
            self.job.kill()
            return True
        return self._done()

    def _done(self) -> bool:
        """Rank 0 wrote the final progress: every step run, the last checkpoint committed.

        The agents may take seconds more to exit (each waits for the others at torchrun's
        exit barrier; on a loaded machine a finished job sat 6 s there and read as hung):
        the job is finished now, not when the last agent is gone.
        """
        return self._final() is not None

    def finished(self) -> bool:
        codes = self.job.returncodes()
        return all(code in (None, 0) for code in codes) and (
            codes == [0] * len(codes) or self._done()
        )

    def checkpoint_step(self) -> int | None:
        final = self._final()
        if final is not None:
            return final.step  # the last step's checkpoint is committed before it is written
        beat = self.job.heartbeat()
        return None if beat is None else beat.checkpoint_step

    def params_digest(self) -> str | None:
        progress = self.job.progress()
        return None if progress is None else progress.params_digest

    def stop(self) -> None:
        self.stopped_by_api = True
        self.job.kill()
        self.ended_at = self.ended_at or time.time()

    def checkpoint_stop(self) -> None:
        """Ask every rank to checkpoint the step they reach and stop; SIGKILL after 120 s."""
        self.stopped_by_api = True
        (self.workdir / CHECKPOINT_STOP_FILE).write_text("requested by the lab\n")
        deadline = time.monotonic() + 120.0
        for agent in self.job.agents:
            try:
                agent.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                break
        if not self.job.exited:
            self.job.kill()
        self.ended_at = self.ended_at or time.time()

    def kill(self) -> None:
        self.job.kill()
        self.ended_at = self.ended_at or time.time()

    def kill_rank(self, rank: int) -> int:
        """The "one rank SIGKILLed" fault: the worker dies, its agent stays."""
        return self.job.kill_rank(rank, signal.SIGKILL)

    def set_slow_factor(self, factor: float) -> None:
        """The straggler fault: the last rank's host computes ``factor`` times slower."""
        write_slow_factor(self.workdir, self.job.args.hosts[-1], factor)

    def host_step_ms(self) -> dict[str, float] | None:
        # Fresh within three heartbeats: a rank that stopped reporting is not timed.
        args = self.job.args
        return read_host_step_ms(args.workdir, args.hosts, 3 * args.heartbeat_s) or None

    def pause(self) -> None:
        # A hung rank: SIGSTOP the last one; every other rank blocks in all-reduce,
        # no process exits, and only the missing heartbeats tell.
        self.job.kill_rank(len(self.job.agents) - 1, signal.SIGSTOP)

    @property
    def workdir(self) -> Path:
        return self.job.args.workdir
