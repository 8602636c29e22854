"""Where a lab pool's load-test thresholds bind under Poisson arrivals, from the lab's own
queue (:class:`~orchestrator.lab.slots.SlotPool`) rather than from its nominal capacity.

Locust's lab users arrive as Poisson streams, and a pool with a bounded queue refuses some
of them before it is full: the shipped eu-west web pool (6 slots of 80 ms, 12 queue places:
75 rps nominal) refuses 1% of Poisson arrivals from about 68 rps. A load test that stops at
a 1% error rate rightly stops there, not at 75 rps.
"""

from __future__ import annotations

import random

from orchestrator.lab.slots import SlotPool

__all__ = ["refused_share", "threshold_capacity"]


def refused_share(
    rps: float, slots: int, queue_limit: int, service_s: float, arrivals: int, seed: int = 0
) -> float:
    """The share of ``arrivals`` Poisson arrivals at ``rps`` the pool refuses (steady state:
    the pool starts empty, which ``arrivals`` in the hundred thousands makes negligible)."""
    rng = random.Random(seed)
    pool = SlotPool(slots, queue_limit)
    now = 0.0
    refused = 0
    for _ in range(arrivals):
        now += rng.expovariate(rps)
        refused += pool.admit(now, service_s) is None
    return refused / arrivals


def threshold_capacity(
    slots: int,
    queue_limit: int,
    service_ms: float,
    *,
    max_utilization: float,
    max_error_rate: float,
    arrivals: int = 100_000,
) -> float:
    """The load (rps) at which the first of the two thresholds binds: utilization
    ``max_utilization`` of slots / service time, or refusals ``max_error_rate`` of Poisson
    arrivals (found by bisection, the same arrivals at every rate so the share is monotone)."""
    service_s = service_ms / 1000.0
    nominal = slots / service_s
    low, high = 0.0, nominal * 1.5
    for _ in range(16):
        mid = (low + high) / 2
        if refused_share(mid, slots, queue_limit, service_s, arrivals) < max_error_rate:
            low = mid
        else:
            high = mid
    return min(max_utilization * nominal, low)
