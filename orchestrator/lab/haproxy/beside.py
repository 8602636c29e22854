"""What the HAProxy lab keeps beside the proxy: the parts of a fleet HAProxy does not steer.

A fleet behind HAProxy has more than the proxy carries: internal pools (cache, kv), kv
shard primaries, batch jobs, config files. In the lab they are the Python lab's own state
(:class:`~orchestrator.lab.state.FleetState`: a key applies once, a replay answers the
first answer), so the shipped region drain's tasks for them (``drain-cache-pool``,
``move-kv-primaries``, ``stop-batch-jobs``) run on this data plane as on the Python one.
What they change in the traffic:

* a batch job running in a region takes its ``slot_share`` of the region's front servers'
  connections (``set maxconn server``, from :func:`server_maxconn`), as it takes the
  Python lab's slots, and a building without power (``--faults``) its share of them;
  every write sets all of them from the state, so it is idempotent;
* an internal pool's weight and a shard's primary are recorded and shown in the topology,
  and steer no request: a region backend calls its dependencies in its own region (the
  inter-region RTT a remote primary costs is not carried over to this data plane).
"""

from __future__ import annotations

import asyncio

from fastapi.responses import JSONResponse

from orchestrator.fleet.haproxy import HAProxyFleet
from orchestrator.lab.config import LabConfig
from orchestrator.lab.errors import rejected
from orchestrator.lab.haproxy.config import server_maxconn
from orchestrator.lab.state import FleetState
from orchestrator.models import (
    BatchJobAction,
    ConfigChange,
    ServiceWeightChange,
    ShardMove,
    Topology,
)

__all__ = ["Beside"]


class Beside:
    """The lab's state for what HAProxy does not carry, and its effect on the proxy."""

    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self.state = FleetState(config)
        #: the services behind HAProxy (a backend each); the rest are kept here
        self.front = {s.name for s in config.front_services}
        #: the ``maxconn`` commands last written (None: not yet)
        self._applied: list[str] | None = None
        # one write at a time: a write computed before a change must not land after the
        # write of that change (the sampler's and an endpoint's can overlap)
        self._writing = asyncio.Lock()

    def keeps(self, service: str) -> bool:
        """True for a service HAProxy has no backend for (an internal pool)."""
        return service not in self.front

    def topology(self, live: Topology) -> Topology:
        """HAProxy's topology (front weights from its servers) with this state's shards,
        batch jobs and internal pool weights."""
        own = self.state.topology()
        weights = {
            key: weight
            for key, weight in own.service_weights.items()
            if self.keeps(key.partition("/")[2])
        }
        return live.model_copy(
            update={
                "shards": own.shards,
                "batch_jobs": own.batch_jobs,
                "service_weights": {**weights, **live.service_weights},
            }
        )

    def set_service_weight(self, change: ServiceWeightChange, key: str) -> JSONResponse:
        return self.state.set_service_weight(change, key=key).response()

    def move_shards(self, move: ShardMove, key: str) -> JSONResponse:
        return self.state.move_shards(move, key=key).response()

    def change_config(self, change: ConfigChange, key: str) -> JSONResponse:
        return self.state.change_config(change, key=key).response()

    async def batch_job(
        self, action: BatchJobAction, key: str, fleet: HAProxyFleet
    ) -> JSONResponse:
        """Record the action once, then set every front server's ``maxconn`` from the state.
        A replay sets them again: a write that failed after the record is completed by the
        caller's retry."""
        answer = self.state.batch_job(action, key=key).response()
        await self.apply(fleet, force=True)
        return answer

    def set_power(self, building: str, on: bool) -> str:
        """Cut or restore a building's power in the state; its region. A cut that would
        leave a whole region dark is refused (HAProxy has no connection limit for "none":
        ``maxconn 0`` means unlimited), before anything changes."""
        region = self.state.building_region(building)
        if not on:
            left = [
                b
                for b in self.config.region(region).buildings
                if b != building and b not in self.state.unpowered
            ]
            if not left:
                raise rejected(
                    400,
                    f"{building} is {region}'s last building with power: a whole region "
                    "without power is not carried over to --data-plane haproxy",
                    "building",
                )
        self.state.set_power(building, on)
        return region

    async def apply(self, fleet: HAProxyFleet, *, force: bool = False) -> None:
        """Set every front server's ``maxconn`` from the state: when it changed since the
        last write, or always (``force``: a retried write must reach the proxy)."""
        async with self._writing:
            commands = self.maxconn_commands(fleet)
            if force or commands != self._applied:
                await fleet.runtime.writes(commands)
                self._applied = commands

    def maxconn_commands(self, fleet: HAProxyFleet) -> list[str]:
        """``set maxconn server`` for every front server: its pool's connections less the
        share its region's running batch jobs take, times its powered share (at least one)."""
        commands = []
        for region in self.config.regions:
            share = self.state.batch_share(region.name)
            powered = self.state.power_share(region.name)
            for service in sorted(self.front & set(region.services)):
                backend, server = fleet.server_of(region.name, service)
                full = server_maxconn(self.config, region.name, service)
                limit = max(1, round(full * (1 - share) * powered))
                commands.append(f"set maxconn server {backend}/{server} {limit}")
        return commands
