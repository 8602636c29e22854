"""Start the PyTorch job: one ``torchrun`` agent per lab host, each a real process.

Each agent (``python -m torch.distributed.run --nnodes=N --node-rank=I
--nproc-per-node=1``) starts that host's rank; the static rendezvous on loopback
makes rank ``I`` the ``I``-th host, always, which keeps training deterministic.
``--max-restarts=0``: restarting is the supervisor's job (it can move the job off a
dead host; torchrun cannot). Each agent gets its own session, so "the host is lost"
is one ``killpg``. No torch is imported here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field

from orchestrator.lab.training.status import (
    HEARTBEAT_FILE,
    PROGRESS_FILE,
    Heartbeat,
    Progress,
    read_heartbeat,
    read_progress,
)
from orchestrator.lab.training.torchjob.args import CHECKPOINT_STOP_FILE, WorkerArgs, rank_pid_file
from orchestrator.lab.training.torchjob.ranks import clear_rank_timings

__all__ = ["TorchJob", "free_port", "torch_env"]

#: one thread per rank: the CPU is shared, and results must not depend on thread splits
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torch_env(base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update({name: "1" for name in _THREAD_VARS})
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@dataclass
class TorchJob:
    args: WorkerArgs
    port: int
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def start(cls, args: WorkerArgs, *, port: int | None = None) -> TorchJob:
        args.workdir.mkdir(parents=True, exist_ok=True)
        # The previous run's heartbeat would read as this run's (stale: a hang) during the
        # tens of seconds before rank 0 writes one; without it the supervisor applies its
        # start-up grace instead. The previous run is dead, so nobody else writes these.
        for name in (HEARTBEAT_FILE, PROGRESS_FILE, CHECKPOINT_STOP_FILE):
            (args.workdir / name).unlink(missing_ok=True)
        for rank in range(len(args.hosts)):
            rank_pid_file(args.workdir, rank).unlink(missing_ok=True)
        clear_rank_timings(args.workdir, len(args.hosts))
        job = cls(args=args, port=port or free_port())
        nnodes = len(args.hosts)
        for index, host in enumerate(args.hosts):
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                f"--nnodes={nnodes}",
                f"--node-rank={index}",
                "--nproc-per-node=1",
                "--master-addr=127.0.0.1",
                f"--master-port={job.port}",
                "--max-restarts=0",
                "--monitor-interval=0.2",
                "-m",
                "orchestrator.lab.training.torchjob.worker",
                *args.argv(),
            ]
            log = (args.workdir / f"agent-{host}.log").open("ab")
            job.agents.append(
                subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=torch_env(),
                    start_new_session=True,
                )
            )
            log.close()
        return job

    def returncodes(self) -> list[int | None]:
        return [agent.poll() for agent in self.agents]

    @property
    def exited(self) -> bool:
        return all(code is not None for code in self.returncodes())

    def wait(self, timeout: float | None = None) -> list[int]:
        return [agent.wait(timeout) for agent in self.agents]

    def heartbeat(self) -> Heartbeat | None:
        return read_heartbeat(self.args.workdir)

    def progress(self) -> Progress | None:
        return read_progress(self.args.workdir)

    def rank_pid(self, rank: int) -> int | None:
        try:
            return int(rank_pid_file(self.args.workdir, rank).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def kill_rank(self, rank: int, signum: int = signal.SIGKILL) -> int:
        """Signal one rank's worker process (not its agent): a crash or, with SIGSTOP, a hang."""
        pid = self.rank_pid(rank)
        if pid is None:
            raise ProcessLookupError(f"rank {rank} has not written its pid yet")
        os.kill(pid, signum)
        return pid

    def kill_host(self, index: int) -> None:
        """The host is lost: its agent and rank die at once."""
        agent = self.agents[index]
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
        # torchrun starts its workers in sessions of their own: kill the rank too.
        pid = self.rank_pid(index)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def kill(self) -> None:
        for index in range(len(self.agents)):
            self.kill_host(index)
        self.wait()

    def log_tail(self, host: str, max_bytes: int = 4000) -> str:
        path = self.args.workdir / f"agent-{host}.log"
        data = path.read_bytes() if path.exists() else b""
        return data[-max_bytes:].decode(errors="replace")
