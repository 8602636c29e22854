"""A failure trace fixed in advance, and the job it is played against.

:class:`~orchestrator.lab.training.trace.TraceFleet` plays a :class:`FailureTrace` against
a :class:`TraceJob`; :func:`trace_from_simulation` draws the trace the ETTR simulation
(:mod:`orchestrator.policy.training.ettr_sim`) would, so the two can be compared.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from orchestrator.models import StrictModel
from orchestrator.policy.training.ettr_sim import SimulationParams, failure_traces

__all__ = ["FailureTrace", "TraceJob", "trace_from_simulation"]

FailureKindName = Literal["gpu", "crash"]


class TraceJob(StrictModel):
    name: str = Field(min_length=1)
    region: str = "us-east"
    hosts: int = Field(ge=1)
    gpus_per_host: int = Field(default=8, ge=1)
    step_s: float = Field(gt=0)
    checkpoint_every: int = Field(ge=1)
    restart_s: float = Field(ge=0)
    heartbeat_s: float = Field(default=10.0, gt=0)
    keep: int = Field(default=4, ge=1)
    #: w: the blocking write of one checkpoint (the simulation's ``cost_s``)
    checkpoint_write_s: float = Field(default=0.0, ge=0)

    @property
    def interval_s(self) -> float:
        return self.checkpoint_every * self.step_s

    @property
    def cycle_s(self) -> float:
        """Compute of one interval plus its checkpoint write."""
        return self.interval_s + self.checkpoint_write_s


class FailureTrace(StrictModel):
    horizon_s: float = Field(gt=0)
    #: seconds from trace time 0, ascending, all before the horizon
    failures_s: list[float]
    kinds: list[FailureKindName]
    #: per failure: which of the run's hosts breaks (modulo its host count)
    host_picks: list[int]


def trace_from_simulation(
    params: SimulationParams, *, seed: int, gpu_share: float = 0.6
) -> FailureTrace:
    """The first trace :func:`~orchestrator.policy.training.ettr_sim.failure_traces` draws for
    ``params`` and ``seed``, each failure given a kind and a host from a second stream."""
    times = failure_traces(params, 1, seed)[0]
    times = times[times < params.horizon_s]
    rng = np.random.default_rng([seed, 1])
    gpu = rng.random(times.size) < gpu_share
    picks = rng.integers(0, 1 << 30, size=times.size)
    return FailureTrace(
        horizon_s=params.horizon_s,
        failures_s=[float(t) for t in times],
        kinds=["gpu" if g else "crash" for g in gpu],
        host_picks=[int(p) for p in picks],
    )
