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
* a shard's primary decides where a request's kv call goes: the region backends follow
  the primaries in :meth:`Beside.state_file` (and their share of slots, as above), so a
  request whose shard's primary is elsewhere pays the inter-region RTT; the front servers'
  ``maxconn`` covers that RTT (:func:`server_maxconn`, set again when primaries move);
* an internal pool's weight is recorded and shown in the topology, and steers no request:
  a region backend calls a stateless dependency in its own region.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

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

    def __init__(self, config: LabConfig, state_path: Path | None = None) -> None:
        """``state_path``: where the region backends read the primaries and slots from."""
        self.config = config
        self.state_path = state_path
        self.state = FleetState(config)
        #: the services behind HAProxy (a backend each); the rest are kept here
        self.front = {s.name for s in config.front_services}
        #: the ``maxconn`` commands last written (None: not yet)
        self._applied: list[str] | None = None
        #: the state file's text last written (the sampler applies every second: no read)
        self._written: str | None = None
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

    async def move_shards(self, move: ShardMove, key: str, fleet: HAProxyFleet) -> JSONResponse:
        """Record the move once, then tell the backends and HAProxy (``maxconn`` covers the
        RTT the new placement costs); a replay writes them again, as :meth:`batch_job`."""
        answer = self.state.move_shards(move, key=key).response()
        await self.apply(fleet, force=True)
        return answer

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
        """Write the backends' state file, then set every front server's ``maxconn`` from
        the state: when it changed since the last write, or always (``force``: a retried
        write must reach the proxy)."""
        async with self._writing:
            self.write_state_file()
            commands = self.maxconn_commands(fleet)
            if force or commands != self._applied:
                await fleet.runtime.writes(commands)
                self._applied = commands

    def state_file(self) -> dict[str, dict[str, object]]:
        """What the region backends follow: every shard's primary, and each region's share
        of its front pools' slots (less its running batch jobs', times its powered share)."""
        return {
            "primaries": dict(sorted(self.state.shard_primary.items())),
            "slot_share": {r.name: self._slot_share(r.name) for r in self.config.regions},
        }

    def write_state_file(self) -> None:
        """Replace the state file (atomically: a backend never reads half of one) when its
        content changed."""
        if self.state_path is None:
            return
        text = json.dumps(self.state_file(), sort_keys=True)
        if text == self._written:
            return
        partial = self.state_path.with_suffix(".json.partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, self.state_path)
        self._written = text

    def _slot_share(self, region: str) -> float:
        return (1 - self.state.batch_share(region)) * self.state.power_share(region)

    def maxconn_commands(self, fleet: HAProxyFleet) -> list[str]:
        """``set maxconn server`` for every front server: its pool's connections for the
        primaries' placement now, less the share its region's running batch jobs take, times
        its powered share (at least one)."""
        commands = []
        primaries = self.state.shard_primary
        for region in self.config.regions:
            share = self._slot_share(region.name)
            for service in sorted(self.front & set(region.services)):
                backend, server = fleet.server_of(region.name, service)
                full = server_maxconn(self.config, region.name, service, primaries)
                limit = max(1, round(full * share))
                commands.append(f"set maxconn server {backend}/{server} {limit}")
        return commands
