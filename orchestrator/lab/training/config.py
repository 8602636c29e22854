"""The ``training:`` section of the lab config: hosts per building, spares, jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.models import StrictModel

__all__ = ["TrainingJobConfig", "TrainingLabConfig"]


class TrainingJobConfig(StrictModel):
    name: str = Field(min_length=1)
    region: str = Field(min_length=1)
    #: whole hosts the job needs
    hosts: int = Field(default=2, ge=1)
    gpus_per_host: int = Field(default=8, ge=1)
    total_steps: int = Field(default=400, ge=1)
    checkpoint_every: int = Field(default=20, ge=1)
    #: time per step, ms (a sleep standing in for GPU compute)
    step_ms: float = Field(default=20.0, ge=0.0)
    heartbeat_s: float = Field(default=0.5, gt=0.0)
    seed: int = Field(default=0, ge=0)
    #: checkpoints kept on disk
    keep: int = Field(default=4, ge=1)
    #: what a live run is: the numpy trainer, or the PyTorch job (DDP under one torchrun
    #: agent per host, DCP checkpoints; see docs/torch-training.md)
    kind: Literal["numpy", "torch"] = "numpy"


class TrainingLabConfig(StrictModel):
    hosts_per_building: int = Field(default=4, ge=0)
    #: of those, how many start in the warm spare pool
    spares_per_building: int = Field(default=1, ge=0)
    gpus_per_host: int = Field(default=8, ge=1)
    jobs: list[TrainingJobConfig] = Field(default_factory=list)
    #: where live trainers keep their checkpoints (one directory per job); None: a
    #: temporary directory for the life of the lab
    workdir: Path | None = None
