"""The defaults of a load test, shared by the CLI, schedules, the ``load_test`` runbook
template and the workflow's input (they sit low, in the runbook layer, so each can use them)."""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "DEFAULT_MAX_UTILIZATION",
    "DEFAULT_P99_SLO_MS",
    "DEFAULT_SETTLE_S",
    "DEFAULT_WINDOW_S",
]

# Defaults of a load test (the CLI, schedules and the runbook template use them too), chosen
# for the shipped lab and sane for a web tier (docs/runbooks.md, "Load tests"). Measured on
# the shipped lab at 120 rps: eu-west's web pool (80 ms service time, 75 rps) shows a p99 of
# 85-200 ms up to 80% of capacity and 240-290 ms at it (its queue bounds the wait), with
# windows of 350-600 ms when this 2-core machine is busy: a 500 ms SLO stops the test
# where users would notice, not at the pool's own service time (100 ms stopped every test
# at its baseline). Errors start near 96% of capacity; utilization is linear in load, so
# 95% stops the test one step short of the queue overflowing (90% could never find more
# than 90% of the capacity).
#: the service pool's p99 a step may not push past, ms
DEFAULT_P99_SLO_MS = 500.0
DEFAULT_MAX_ERROR_RATE = 0.01
DEFAULT_MAX_UTILIZATION = 0.95
#: seconds judged per step: the lab's health window (Kraken aggregates 60 s on a real fleet)
DEFAULT_WINDOW_S = 10.0
#: seconds a new table settles before its window. A step moves buckets into the region cold
#: (the lab serves them 3x slower for 5 s), which overloads the pool until they warm and
#: fills its queue; the queue then drains at the pool's spare rate, a few seconds more near
#: capacity. Settling only 5 s opened the window on that full queue: the README path test's
#: load test read 1.2% errors at 79% of capacity and stopped at 57 of 75 rps (2026-12-05).
DEFAULT_SETTLE_S = 10.0
