"""What an operator runs on an HAProxy the orchestrator drives: check it, adopt it.

``check`` reports whether the proxy still holds the orchestrator's state (boot mark,
one routing version, every bucket key, each service's server) without changing it.
``adopt`` declares the proxy's live state to be the one to steer from: it sets a new
boot mark and a fresh routing version (greater than any a writer may still hold, so a
stale write is refused) and clears an interrupted write. It changes no route or weight.
"""

from __future__ import annotations

import secrets
import time

from pydantic import BaseModel, Field

from orchestrator.exceptions import FleetRejected
from orchestrator.fleet.haproxy.fleet import HAProxyFleet
from orchestrator.fleet.haproxy.state import BOOT_KEY, GEN_PREFIX, WRITING_KEY

__all__ = ["ProxyCheck", "adopt", "check"]


class ProxyCheck(BaseModel):
    address: str
    routing_map: str
    #: the boot mark, None when the proxy restarted from its config file
    boot: str | None
    version: int | None
    #: an interrupted or in-flight routing write: the version it was writing
    writing: int | None
    missing_buckets: int
    duplicate_keys: list[str] = Field(default_factory=list)
    #: "<region>/<service>" whose server HAProxy lacks
    missing_servers: list[str] = Field(default_factory=list)
    #: "<region>/<service>" -> live pool weight (0..1)
    weights: dict[str, float] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.boot is not None
            and self.version is not None
            and self.writing is None
            and not self.missing_buckets
            and not self.duplicate_keys
        )

    @property
    def problems(self) -> list[str]:
        found = []
        if self.boot is None:
            found.append("no boot mark: the proxy restarted from its config file")
        if self.version is None:
            found.append("no single routing version key")
        if self.writing is not None:
            found.append(f"a routing write to version {self.writing} did not finish")
        if self.missing_buckets:
            found.append(f"{self.missing_buckets} bucket keys missing from the map")
        if self.duplicate_keys:
            found.append(f"keys present twice (HAProxy reads the first): {self.duplicate_keys}")
        return found


async def check(fleet: HAProxyFleet) -> ProxyCheck:
    state = await fleet.read_map()
    topology = fleet.static_topology
    missing = sum(len(state.buckets(p.name, topology.bucket_count)[1]) for p in topology.pops)
    servers = await fleet.servers()
    weights: dict[str, float] = {}
    missing_servers: list[str] = []
    for region in topology.region_names:
        for service in topology.services:
            name = f"{region}/{service.name}"
            found = servers.get(fleet.server_of(region, service.name))
            if found is None:
                missing_servers.append(name)
            else:
                weights[name] = found.fraction(fleet.full_weight)
    writing = state.writing
    return ProxyCheck(
        address=fleet.runtime.address,
        routing_map=fleet.routing_map,
        boot=state.boot,
        version=state.version,
        writing=writing[0] if writing else None,
        missing_buckets=missing,
        duplicate_keys=sorted(set(state.duplicates)),
        missing_servers=missing_servers,
        weights=weights,
    )


async def adopt(fleet: HAProxyFleet) -> ProxyCheck:
    """Adopt the live state; refuses a map that lacks bucket keys (routing would fail)."""
    before = await check(fleet)
    if before.missing_buckets:
        raise FleetRejected(
            f"cannot adopt {fleet.routing_map}: {before.missing_buckets} bucket keys are "
            "missing; load a complete map (every <pop>/<bucket>) first",
            reason="incomplete map",
        )
    state = await fleet.read_map()
    m = fleet.routing_map
    # Seconds since the epoch in the high bits, chance in the low 20: a writer's version
    # from before (an earlier adoption plus one per write since) matches it only by a
    # one-in-a-million accident, so its stale If-Match is a conflict. Below 2**53: exact
    # in JSON everywhere.
    fresh = (int(time.time()) << 20) + secrets.randbelow(1 << 20)
    version = max([fresh, *(g + 1 for g in state.generations)])
    commands = [f"del map {m} {GEN_PREFIX}{g}" for g in state.generations]
    if state.writing is not None:
        commands.append(f"del map {m} {WRITING_KEY}")
    if state.boot is not None:
        commands.append(f"del map {m} {BOOT_KEY}")
    commands += [
        f"add map {m} {GEN_PREFIX}{version} adopted",
        f"add map {m} {BOOT_KEY} {secrets.token_hex(8)}",
    ]
    await fleet.runtime.writes(commands)
    return await check(fleet)
