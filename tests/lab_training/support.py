"""Helpers for the trainer tests: argument sets, reference runs, running trainers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from orchestrator.lab.training.process import TrainerProcess
from orchestrator.lab.training.sgd import init_state, params_digest, train_step
from orchestrator.lab.training.trainer import TrainerArgs

SEED = 11


def make_args(workdir: Path, **overrides: Any) -> TrainerArgs:
    values: dict[str, Any] = {
        "job": "job-a",
        "workdir": workdir,
        "hosts": ("h1", "h2"),
        "total_steps": 200,
        "checkpoint_every": 20,
        "step_ms": 2.0,
        "seed": SEED,
        "resume": "latest",
        "keep": 3,
        "heartbeat_s": 0.1,
        "slow_factor": 1.0,
    }
    values.update(overrides)
    return TrainerArgs(**values)


@cache
def reference_digests(seed: int, steps: int) -> tuple[str, ...]:
    """``params_digest`` after 0, 1, ..., ``steps`` steps of one uninterrupted run."""
    state = init_state(seed)
    digests = [params_digest(state.flat_params())]
    for _ in range(steps):
        train_step(state)
        digests.append(params_digest(state.flat_params()))
    return tuple(digests)


@contextmanager
def running(args: TrainerArgs) -> Iterator[TrainerProcess]:
    """A started trainer that is always SIGKILLed on the way out (test failures included)."""
    proc = TrainerProcess.start(args)
    try:
        yield proc
    finally:
        proc.resume()
        proc.kill()
