"""The PyTorch job's arguments and exit codes; no torch here, so the launcher and the lab
build a job's command line without importing it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CHECKPOINT_STOP_FILE",
    "EXIT_BAD_CHECKPOINT",
    "EXIT_CHECKPOINT_STOP",
    "STATS_FILE",
    "EXIT_OK",
    "SAVE_MODES",
    "WorkerArgs",
    "parse_args",
    "rank_pid_file",
]


#: rank 0's checkpoint timings, written when the run finishes (the benchmark reads it)
STATS_FILE = "checkpoint-stats.json"


def rank_pid_file(workdir: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its pid once it has joined the process group."""
    return workdir / f"rank-{rank}.pid"


EXIT_OK, EXIT_BAD_CHECKPOINT = 0, 3
#: every rank checkpointed the step they had all reached, on demand, and stopped
EXIT_CHECKPOINT_STOP = 138
#: written by the lab into the workdir: checkpoint at the current step, then stop (a
#: planned move). Rank 0 reads it each step and broadcasts it, so every rank stops at the
#: same step and writes its shard of the same checkpoint.
CHECKPOINT_STOP_FILE = "checkpoint-stop"
SAVE_MODES = ("blocking", "async")


@dataclass(frozen=True)
class WorkerArgs:
    job: str
    workdir: Path
    hosts: tuple[str, ...]
    total_steps: int
    checkpoint_every: int
    seed: int
    resume: str | int
    keep: int
    heartbeat_s: float
    batch: int
    lr: float
    save: str
    step_ms: float
    timeout_s: float
    hidden: int = 128

    def argv(self) -> list[str]:
        return [
            f"--job={self.job}",
            f"--workdir={self.workdir}",
            f"--hosts={','.join(self.hosts)}",
            f"--total-steps={self.total_steps}",
            f"--checkpoint-every={self.checkpoint_every}",
            f"--seed={self.seed}",
            f"--resume={self.resume}",
            f"--keep={self.keep}",
            f"--heartbeat-s={self.heartbeat_s}",
            f"--batch={self.batch}",
            f"--lr={self.lr}",
            f"--save={self.save}",
            f"--step-ms={self.step_ms}",
            f"--timeout-s={self.timeout_s}",
            f"--hidden={self.hidden}",
        ]


def parse_args(argv: Sequence[str] | None = None) -> WorkerArgs:
    p = argparse.ArgumentParser(
        prog="torchrun ... -m orchestrator.lab.training.torchjob.worker",
        description="One rank of the lab's deterministic DDP job.",
    )
    p.add_argument("--job", required=True)
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--hosts", required=True)
    p.add_argument("--total-steps", required=True, type=int)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", default="latest", help="latest | none | STEP")
    p.add_argument("--keep", type=int, default=3)
    p.add_argument("--heartbeat-s", type=float, default=0.5)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--save", choices=SAVE_MODES, default="async")
    p.add_argument(
        "--step-ms", type=float, default=0.0, help="compute per step (a sleep standing in for GPU)"
    )
    p.add_argument("--hidden", type=int, default=128, help="MLP width")
    p.add_argument("--timeout-s", type=float, default=60.0, help="collective timeout")
    ns = p.parse_args(argv)
    for ok, message in [
        (ns.total_steps >= 1, f"--total-steps: must be at least 1, got {ns.total_steps}"),
        (ns.checkpoint_every >= 1, f"--checkpoint-every: must be >= 1, got {ns.checkpoint_every}"),
        (ns.keep >= 1, f"--keep: must be at least 1, got {ns.keep}"),
        (ns.hidden >= 1, f"--hidden: must be at least 1, got {ns.hidden}"),
        (ns.batch >= 1, f"--batch: must be at least 1, got {ns.batch}"),
        (ns.heartbeat_s > 0, f"--heartbeat-s: must be > 0, got {ns.heartbeat_s}"),
    ]:
        if not ok:
            p.error(message)
    resume: str | int = ns.resume
    if ns.resume not in ("latest", "none"):
        if not ns.resume.isdigit():
            p.error(f"--resume: must be latest, none or a step, got {ns.resume!r}")
        resume = int(ns.resume)
    return WorkerArgs(
        job=ns.job,
        workdir=ns.workdir,
        hosts=tuple(h for h in ns.hosts.split(",") if h),
        total_steps=ns.total_steps,
        checkpoint_every=ns.checkpoint_every,
        seed=ns.seed,
        resume=resume,
        keep=ns.keep,
        heartbeat_s=ns.heartbeat_s,
        batch=ns.batch,
        lr=ns.lr,
        save=ns.save,
        step_ms=ns.step_ms,
        timeout_s=ns.timeout_s,
        hidden=ns.hidden,
    )
