"""The PyTorch job under ``torchrun --max-restarts`` alone: the baseline arm of torch_recovery.

What ML teams run today without a supervisor: one ``torchrun`` agent per host, c10d
rendezvous (the one torchrun documents for fault tolerance: when a worker fails its
agent restarts the worker group, and every other agent sees the new round and restarts
its own), ``--max-restarts N``. The same worker, seed and arguments as the supervised job.

Faults act as in the lab: a rank SIGKILLed or SIGSTOPped by its pid file, a host lost
(its agent and its worker SIGKILLed), a building lost (several hosts at once), the
newest checkpoint's shard corrupted with a crash. No lab, no Temporal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.lab.training.sharded import corrupt_newest_sharded
from orchestrator.lab.training.status import (
    HEARTBEAT_FILE,
    Heartbeat,
    read_heartbeat,
    read_progress,
)
from orchestrator.lab.training.torchjob.args import WorkerArgs, rank_pid_file
from orchestrator.lab.training.torchjob.launch import free_port, torch_env
from orchestrator.lab.training.torchjob.ranks import write_slow_factor

#: the straggler fault's slowdown, as the lab's default
STRAGGLER_FACTOR = 4.0
STRAGGLER_WAIT_S = 15.0

__all__ = ["TorchrunAlone", "children", "run_torchrun_arm"]


def children(pid: int) -> set[int]:
    """Direct children of ``pid`` (every thread's), from /proc; empty once it is gone."""
    out: set[int] = set()
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                out.update(int(p) for p in (task / "children").read_text().split())
    return out


def alive(pid: int) -> bool:
    """Running or stopped, not a zombie nor gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class TorchrunAlone:
    args: WorkerArgs
    max_restarts: int
    port: int = field(default_factory=free_port)
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)
    launches: int = 0

    def start(self) -> None:
        """Start (or, after a lost host, relaunch by hand) one agent per host."""
        self.kill()
        (self.args.workdir / HEARTBEAT_FILE).unlink(missing_ok=True)
        self.args.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.launches += 1
        nnodes = len(self.args.hosts)
        self.agents = []
        for host in self.args.hosts:
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nnodes={nnodes}",
                "--nproc-per-node=1",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{self.port}",
                f"--rdzv-id={self.args.job}-{self.launches}",
                f"--max-restarts={self.max_restarts}",
                "--monitor-interval=0.2",
                "-m",
                "orchestrator.lab.training.torchjob.worker",
                *self.args.argv(),
            ]
            log = (self.args.workdir / f"agent-{host}.log").open("ab")
            self.agents.append(
                subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=torch_env(),
                    start_new_session=True,
                )
            )
            log.close()

    def heartbeat(self) -> Heartbeat | None:
        return read_heartbeat(self.args.workdir)

    def workers(self) -> set[int]:
        """Every live worker process (the agents' children)."""
        return {p for a in self.agents for p in children(a.pid) if alive(p)}

    def returncodes(self) -> list[int | None]:
        return [a.poll() for a in self.agents]

    def rank_pid(self, rank: int) -> int:
        return int(rank_pid_file(self.args.workdir, rank).read_text())

    def signal_rank(self, rank: int, signum: int) -> None:
        os.kill(self.rank_pid(rank), signum)

    def kill_host(self, index: int) -> None:
        """The host is lost: its agent and its worker die at once."""
        agent = self.agents[index]
        doomed = children(agent.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        agent.wait()

    def kill(self) -> None:
        for index in range(len(self.agents)):
            self.kill_host(index)


def _until(predicate: Callable[[], bool], deadline: float) -> float | None:
    """Poll until ``predicate`` holds (the wall time then) or ``deadline`` passes (None)."""
    while time.time() < deadline:
        if predicate():
            return time.time()
        time.sleep(0.05)
    return None


def _progressed(job: TorchrunAlone, old: set[int]) -> bool:
    """A run other than the one hit has stepped past the checkpoint it resumed from."""
    beat = job.heartbeat()
    return beat is not None and beat.pid not in old and beat.step > beat.resumed_from


def _ready(job: TorchrunAlone, checkpoint_every: int) -> bool:
    beat = job.heartbeat()
    return (
        beat is not None
        and alive(beat.pid)
        and (beat.checkpoint_step or 0) >= beat.resumed_from + checkpoint_every
    )


def _inject(job: TorchrunAlone, kind: str) -> None:
    last = len(job.args.hosts) - 1
    if kind == "rank-kill":
        job.signal_rank(2, signal.SIGKILL)
    elif kind == "hang":
        job.signal_rank(last, signal.SIGSTOP)
    elif kind == "corrupt-checkpoint":
        # As in the lab: the storage fault comes with a crash (every rank killed, the
        # agents stay and restart them), then the newest checkpoint's shard is damaged.
        for pid in job.workers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        corrupt_newest_sharded(job.args.workdir)
    elif kind == "straggler":
        # The last rank's host computes 4x slower: nothing fails, the job just crawls.
        write_slow_factor(job.args.workdir, job.args.hosts[-1], STRAGGLER_FACTOR)
    elif kind == "host-down":
        job.kill_host(1)
    elif kind == "power-loss":
        # The lab places the whole job in one building: the building takes every host.
        job.kill()
    else:
        raise ValueError(f"kind: unknown fault {kind!r}")


def _one_fault(
    job: TorchrunAlone,
    kind: str,
    *,
    bound_s: float,
    ready_s: float,
    relaunches: list[float],
    last: bool,
) -> dict[str, Any]:
    before = job.heartbeat()
    assert before is not None
    old = job.workers()
    at = time.time()
    _inject(job, kind)
    if kind == "straggler":
        # torchrun has no notion of a straggler: however long the wait, nothing reacts;
        # a short one keeps the crawling job from finishing before the next fault.
        bound_s = STRAGGLER_WAIT_S
    deadline = at + bound_s
    # torchrun reacted: the hit worker group is gone (killed, or failed and reaped)
    torn = _until(lambda: not (old & job.workers()), deadline)
    back = _until(lambda: _progressed(job, old), deadline)
    row: dict[str, Any] = {
        "fault": kind,
        "step_at_fault": before.step,
        "detect_s": None if torn is None else torn - at,
        "restart_s": None if back is None or torn is None else back - torn,
        "mttr_s": None if back is None else back - at,
        "recovered": back is not None,
        "agents_exited": [c for c in job.returncodes() if c is not None],
    }
    if back is None and kind == "straggler":
        # Nothing to relaunch: the job runs, at the straggler's pace. The operator who
        # finally notices swaps the host out (here: the slowness is lifted).
        row["waited_s"] = bound_s
        now = job.heartbeat()
        row["steps_in_wait"] = (now.step if now else before.step) - before.step
        (job.args.workdir / f"slow-{job.args.hosts[-1]}").unlink(missing_ok=True)
        row["lost_steps"] = 0
        return row
    elif back is None and last:
        # No fault follows: the job is left down (it did not finish on its own).
        row["waited_s"] = bound_s
        return row
    elif back is None:
        row["waited_s"] = bound_s
        began = time.time()
        job.start()
        fresh = _until(lambda: _progressed(job, set()), time.time() + ready_s)
        if fresh is None:
            raise RuntimeError(f"manual relaunch after {kind} made no progress")
        relaunches.append(fresh - began)
        row["manual_relaunch_s"] = fresh - began
    after = job.heartbeat()
    assert after is not None
    row["resumed_from_step"] = after.resumed_from
    row["lost_steps"] = before.step - after.resumed_from
    return row


def run_torchrun_arm(
    args: WorkerArgs, faults: list[str], *, max_restarts: int, bound_s: float, ready_s: float
) -> dict[str, Any]:
    """The fault sequence against torchrun alone. A fault it does not recover from within
    ``bound_s`` is recorded as such; then the benchmark relaunches the job by hand (what an
    operator would do, timed: it is also the bare restart-to-progress baseline) so the next
    fault finds a running job."""
    job = TorchrunAlone(args, max_restarts)
    rows: list[dict[str, Any]] = []
    relaunches: list[float] = []
    started = time.time()
    job.start()
    try:
        for n, kind in enumerate(faults, start=1):
            if _until(lambda: _ready(job, args.checkpoint_every), time.time() + ready_s) is None:
                raise RuntimeError(f"torchrun arm never ready for {kind}: {job.heartbeat()}")
            rows.append(
                _one_fault(
                    job,
                    kind,
                    bound_s=bound_s,
                    ready_s=ready_s,
                    relaunches=relaunches,
                    last=n == len(faults),
                )
            )
        finished = rows[-1]["recovered"] and _until(
            lambda: all(c is not None for c in job.returncodes()), time.time() + ready_s
        )
        progress = read_progress(args.workdir)
        return {
            "failures": rows,
            "relaunch_s": relaunches,
            "manual_relaunches": job.launches - 1,
            "finished": bool(finished) and job.returncodes() == [0] * len(job.agents),
            "params_digest": None if progress is None else progress.params_digest,
            "wall_s": time.time() - started,
        }
    finally:
        job.kill()
