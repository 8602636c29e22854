"""The files a trainer writes for its supervisor: heartbeat, progress, control.

- ``heartbeat.json``: replaced atomically every ``--heartbeat-s`` by the training
  loop itself, so a hung loop (or a SIGSTOPped process) stops heartbeating while
  the process stays alive; that is what hang detection watches.
- ``progress.json``: written once when the run finishes, with the final digest.
- ``control.json``: written by the supervisor, read by the trainer at each
  heartbeat: lets the lab turn a running trainer into a straggler, or fill its disk.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from pydantic import Field, ValidationError

from orchestrator.lab.training.atomic import atomic_write_bytes
from orchestrator.models import StrictModel

__all__ = [
    "CONTROL_FILE",
    "HEARTBEAT_FILE",
    "PROGRESS_FILE",
    "Control",
    "Heartbeat",
    "Progress",
    "TrainerState",
    "read_control",
    "read_heartbeat",
    "read_progress",
    "write_control",
    "write_status",
]

HEARTBEAT_FILE = "heartbeat.json"
PROGRESS_FILE = "progress.json"
CONTROL_FILE = "control.json"

_M = TypeVar("_M", bound=StrictModel)


class TrainerState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    #: stopped cleanly by SIGTERM/SIGINT after finishing its current step
    STOPPED = "stopped"
    #: refused to start (bad checkpoint request); ``error`` says why
    FAILED = "failed"


class Heartbeat(StrictModel):
    job: str
    pid: int
    #: steps completed
    step: int = Field(ge=0)
    total_steps: int = Field(ge=0)
    #: wall clock, seconds since the epoch (the lab compares it with its own clock)
    time: float
    state: TrainerState
    seed: int
    hosts: list[str]
    #: the step this run started from (0: from scratch)
    resumed_from: int = Field(ge=0)
    #: the newest checkpoint this run committed (or resumed from), and its params digest
    checkpoint_step: int | None = None
    params_digest: str | None = None
    #: mean wall time of the steps since the previous heartbeat: the straggler signal
    step_ms_avg: float | None = None
    slow_factor: float = 1.0
    error: str | None = None


class Progress(StrictModel):
    job: str
    step: int = Field(ge=0)
    total_steps: int = Field(ge=0)
    seed: int
    #: sha256 of the final parameters (see :func:`..sgd.params_digest`)
    params_digest: str
    resumed_from: int = Field(ge=0)
    #: wall time of the training loop of this run, startup excluded
    elapsed_s: float = Field(ge=0)
    steps_run: int = Field(ge=0)
    finished_at: float


class Control(StrictModel):
    slow_factor: float = Field(default=1.0, gt=0)
    #: the lab's "disk full" fault: from now on every checkpoint write fails with ENOSPC
    disk_full: bool = False


def write_status(directory: Path, status: Heartbeat | Progress) -> None:
    """Heartbeats skip the fsyncs (a stale one is worthless); progress is made durable."""
    name = HEARTBEAT_FILE if isinstance(status, Heartbeat) else PROGRESS_FILE
    atomic_write_bytes(
        directory / name,
        status.model_dump_json().encode(),
        durable=isinstance(status, Progress),
    )


def _read(path: Path, model: type[_M]) -> _M | None:
    try:
        return model.model_validate(json.loads(path.read_bytes()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, ValidationError):
        # Files are replaced atomically, so this is a foreign or damaged file: no status.
        return None


def read_heartbeat(directory: Path) -> Heartbeat | None:
    return _read(directory / HEARTBEAT_FILE, Heartbeat)


def read_progress(directory: Path) -> Progress | None:
    return _read(directory / PROGRESS_FILE, Progress)


def read_control(directory: Path) -> Control | None:
    return _read(directory / CONTROL_FILE, Control)


def write_control(directory: Path, control: Control) -> None:
    atomic_write_bytes(directory / CONTROL_FILE, control.model_dump_json().encode())
