"""Live user traffic for the lab: Locust users spread over PoPs by demand weight.

Run it through ``orchestrator lab traffic --rps N``, which reads the PoP weights
from the lab and passes them here in the environment:

- ``LAB_TRAFFIC_POPS``: JSON ``{pop: demand_weight}``;
- ``LAB_TRAFFIC_RPS``: total requests per second across all Locust users;
- ``LAB_TRAFFIC_USERS``: how many Locust users share that rate;
- ``LAB_TRAFFIC_MIX``: JSON ``{service: share}`` (e.g. web 0.8, sessions 0.2);
- ``LAB_TRAFFIC_IDS``: end-user ids each Locust user cycles through (default 64);
- ``LAB_TRAFFIC_SHIFT``: optional JSON ``{"after_s": S, "pops": {pop: weight}}``: S seconds
  after the first user starts, every user moves to the PoP the new weights give its index,
  so the demand mix shifts at once while the total rate stays the same.
- ``LAB_TRAFFIC_POP_URLS``: optional JSON ``{pop: base URL}``: a lab whose data plane is
  HAProxy (``lab serve --data-plane haproxy``) has a frontend per PoP on its own port.

Each Locust user is pinned to one PoP (smooth weighted round-robin, so the PoP
mix matches the weights) and owns a fixed set of end-user ids, so buckets and
sticky sessions are real and repeatable. Its requests arrive on a Poisson schedule
(exponential gaps, its own seeded stream), so the users together are Poisson
arrivals, as real users are: Locust's ``constant_throughput`` keeps every user on a
fixed 1/rate beat, so users spawned together and users released together by a stall
arrive together, bursts that filled HAProxy's queues at 60% utilization. It runs in its own process: gevent
monkey-patches the interpreter, so it is never imported by the orchestrator.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from typing import Any

from locust import task
from locust.contrib.fasthttp import FastHttpUser

_POPS: dict[str, float] = json.loads(os.environ.get("LAB_TRAFFIC_POPS", '{"nyc": 1}'))
_RPS = float(os.environ.get("LAB_TRAFFIC_RPS", "10"))
_USERS = max(int(os.environ.get("LAB_TRAFFIC_USERS", "5")), 1)
#: each Locust user's requests per second
_USER_RPS = _RPS / _USERS
_MIX: dict[str, float] = json.loads(os.environ.get("LAB_TRAFFIC_MIX", '{"web": 1}'))
_IDS = max(int(os.environ.get("LAB_TRAFFIC_IDS", "64")), 1)
_SHIFT: dict[str, Any] | None = json.loads(os.environ.get("LAB_TRAFFIC_SHIFT", "null"))
_POP_URLS: dict[str, str] = json.loads(os.environ.get("LAB_TRAFFIC_POP_URLS", "{}"))
_counter = itertools.count()
_started: list[float] = []


def _pop_order(weights: dict[str, float]) -> list[str]:
    """Smooth weighted round-robin (as nginx does): any prefix tracks the weights."""
    current = dict.fromkeys(weights, 0.0)
    total = sum(weights.values())
    order: list[str] = []
    # One full period is enough when weights are small integers; 1,000 keeps
    # fractional weights within a fraction of a percent.
    for _ in range(1000):
        for pop, weight in weights.items():
            current[pop] += weight
        chosen = max(current, key=lambda p: (current[p], p))
        current[chosen] -= total
        order.append(chosen)
    return order


_order = _pop_order(_POPS)
_shift_order = _pop_order(_SHIFT["pops"]) if _SHIFT else None


class LabUser(FastHttpUser):
    """One stream of end users arriving at one PoP, at ``RPS / USERS`` requests per second."""

    def wait_time(self) -> float:
        """Until the next arrival on this user's Poisson schedule. Behind it by less than
        a mean gap (its answer outlasted a short gap), it sends at once and keeps the
        schedule, so the rate holds; further behind (a stall), the schedule restarts from
        now with a fresh gap, so a stall does not release every user on the same beat."""
        now = time.monotonic()
        self.due += self.arrivals.expovariate(_USER_RPS)
        if self.due < now - 1.0 / _USER_RPS:
            self.due = now + self.arrivals.expovariate(_USER_RPS)
        return max(0.0, self.due - now)

    def on_start(self) -> None:
        index = self.index = next(_counter)
        if not _started:
            _started.append(time.monotonic())
        self.pop = _order[index % len(_order)]
        # With --processes every worker counts its users from 0: the worker's index keeps
        # their end users (and so their buckets) apart; worker 0 keeps the one-process ids.
        worker = int(getattr(self.environment.runner, "worker_index", 0) or 0)
        self.rng = random.Random(index + 1_000_003 * worker)
        # its own stream, so the ids and services drawn from rng stay as they were
        self.arrivals = random.Random(~(index + 1_000_003 * worker))
        self.due = time.monotonic()
        owner = f"{index}" if worker == 0 else f"w{worker}-{index}"
        self.user_ids = [f"{self.pop}-{owner}-{k}" for k in range(_IDS)]
        self.services = list(_MIX)
        self.service_weights = [_MIX[s] for s in self.services]

    def _follow_shift(self) -> None:
        if _SHIFT is None or _shift_order is None:
            return
        if time.monotonic() - _started[0] < float(_SHIFT["after_s"]):
            return
        pop = _shift_order[self.index % len(_shift_order)]
        if pop != self.pop:
            # The same end users, now arriving somewhere else (ids keep their buckets).
            self.pop = pop

    @task
    def visit(self) -> None:
        self._follow_shift()
        user = self.rng.choice(self.user_ids)
        service = self.rng.choices(self.services, self.service_weights)[0]
        params: dict[str, Any] = {"user": user, "service": service}
        with self.client.get(
            f"{_POP_URLS.get(self.pop, '')}/edge/{self.pop}",
            params=params,
            name=f"/edge/{self.pop} [{service}]",
            catch_response=True,
        ) as response:
            if response.status_code == 200:
                response.success()
            else:
                response.failure(f"HTTP {response.status_code}")
