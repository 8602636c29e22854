"""``HAProxyFleet``: the :class:`~orchestrator.fleet.protocol.Fleet` over HAProxy's runtime API.

Routing is a live map (``<pop>/<bucket> -> <region>``, see :mod:`.state`); a service's pool
weight in a region is a server's weight (``set server B/S weight N``) and a weight of 0 is
``state drain``. The topology (regions, PoPs, services, bucket count) comes from a file,
since HAProxy does not know it; the service weights in it are read live.

Exactly once without an audit log: every write reads the live state first and sends only
what differs, so the same target twice writes nothing; routing versions live in the map
and are claimed atomically (:mod:`.state`). A proxy that lost its runtime state (restarted
from its config file) has no boot mark: every call that reads or changes traffic raises
:class:`~orchestrator.exceptions.ProxyStateLost` until ``orchestrator haproxy adopt``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

import yaml
from pydantic import ValidationError

from orchestrator.contracts.training import (
    QuarantineRequest,
    StartJobRequest,
    TrainingCheckpoints,
    TrainingCluster,
)
from orchestrator.exceptions import (
    ConfigError,
    FleetRejected,
    FleetUnavailable,
    InvalidRequest,
    ProxyStateLost,
    VersionConflict,
)
from orchestrator.fleet.haproxy.runtime import RuntimeApi
from orchestrator.fleet.haproxy.state import (
    GEN_PREFIX,
    NAME,
    WRITING_KEY,
    MapState,
    ServerState,
    bucket_key,
    diff_entries,
    parse_map,
    parse_servers_state,
    writer_tag,
)
from orchestrator.logging import get_logger
from orchestrator.models import (
    AuditEntry,
    BatchJobAction,
    ConfigChange,
    HealthReport,
    MutationResult,
    RegionHealth,
    RoutingTable,
    RoutingWrite,
    ServiceWeightChange,
    ShardMove,
    Topology,
)
from orchestrator.policy.rebalance.buckets import assign_buckets

__all__ = ["TRANSACTION_ABOVE", "HAProxyFleet", "load_topology"]

#: a routing write moving more buckets than this replaces the map in one transaction
TRANSACTION_ABOVE = 64

log = get_logger(__name__)


def load_topology(path: Path) -> Topology:
    """The topology file (YAML or JSON); :class:`ConfigError` names the file and field."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        topology = Topology.model_validate(data)
    except OSError as exc:
        raise ConfigError("ORCHESTRATOR_HAPROXY_TOPOLOGY", f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError("ORCHESTRATOR_HAPROXY_TOPOLOGY", f"{path}: not YAML: {exc}") from None
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise ConfigError(
            "ORCHESTRATOR_HAPROXY_TOPOLOGY", f"{path}: {where}: {error['msg']}"
        ) from None
    for name in [*topology.region_names, *(p.name for p in topology.pops)]:
        if not NAME.match(name):
            raise ConfigError(
                "ORCHESTRATOR_HAPROXY_TOPOLOGY",
                f"{path}: {name!r} cannot be a map key or backend name (letters, digits, "
                "'_.:-', not starting with '_')",
            )
    return topology


class HAProxyFleet:
    """Drives one HAProxy. ``routing_map`` is the map's file name as haproxy.cfg uses it;
    ``server`` names a service's server in a region (``{service}/{region}``)."""

    def __init__(
        self,
        runtime: RuntimeApi,
        topology: Topology,
        *,
        routing_map: str,
        server: str = "{service}/{region}",
        full_weight: int = 100,
    ) -> None:
        self.runtime = runtime
        self._topology = topology
        self.routing_map = routing_map
        self._server = server
        self.full_weight = full_weight

    @property
    def static_topology(self) -> Topology:
        """The topology file's content (service weights not read live)."""
        return self._topology

    def __repr__(self) -> str:
        return f"HAProxyFleet({self.runtime.address!r}, map={self.routing_map!r})"

    async def __aenter__(self) -> HAProxyFleet:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Nothing to release: every command is its own connection."""

    # --- reads -----------------------------------------------------------

    async def read_map(self) -> MapState:
        answer = await self.runtime.command(f"show map {self.routing_map}")
        if answer.startswith("Unknown map identifier"):
            raise FleetRejected(
                f"HAProxy at {self.runtime.address} has no map {self.routing_map!r}: "
                "ORCHESTRATOR_HAPROXY_MAP must be the file name haproxy.cfg's map() uses",
                reason="unknown map",
            )
        return parse_map(answer)

    async def servers(self) -> dict[tuple[str, str], ServerState]:
        return parse_servers_state(await self.runtime.command("show servers state"))

    def server_of(self, region: str, service: str) -> tuple[str, str]:
        backend, _, server = self._server.format(region=region, service=service).partition("/")
        return backend, server

    async def topology(self) -> Topology:
        live = await self.servers()
        weights = {}
        for region in self._topology.region_names:
            for service in self._topology.services:
                found = live.get(self.server_of(region, service.name))
                if found is not None:
                    weights[f"{region}/{service.name}"] = found.fraction(self.full_weight)
        return self._topology.model_copy(update={"service_weights": weights})

    async def routing(self) -> RoutingTable:
        state = await self.read_map()
        version = self._check(state)
        return self._table(version, self._live_buckets(state))

    async def health(self, window_s: float | None = None) -> HealthReport:
        """No numbers: HAProxy's runtime API has counters and averages over its last 1,024
        requests, but no windowed rates or percentiles. Every region is reported with
        ``samples=0`` (missing), never as zeros; answer health from Prometheus (HAProxy's
        exporter) with ``orchestrator.promhealth.with_health_source``."""
        return HealthReport(
            window_s=window_s or 60.0,
            observed_at=datetime.now(UTC),
            regions=[RegionHealth(region=r) for r in self._topology.region_names],
        )

    async def audit(self, since_seq: int = 0) -> list[AuditEntry]:
        """Always empty: HAProxy keeps no audit log; exactly-once comes from comparing
        live state before every write (the module's docstring)."""
        return []

    # --- routing ------------------------------------------------------------

    def _check(self, state: MapState) -> int:
        """The routing version, or why the map cannot be trusted."""
        if state.boot is None:
            raise ProxyStateLost(
                f"HAProxy at {self.runtime.address}: map {self.routing_map} has no boot mark: "
                "the proxy restarted from its config file and lost the orchestrator's routing "
                "and weights. Refusing to act: run `orchestrator haproxy check`, then "
                "`orchestrator haproxy adopt` once its state is what you want",
                reason="boot mark missing",
            )
        version = state.version
        if version is None:
            if state.writing is not None:
                raise FleetUnavailable(
                    f"HAProxy map {self.routing_map}: a write to version {state.writing[0]} "
                    "is under way (if it persists, its writer died: `orchestrator haproxy "
                    "adopt`)",
                    reason="write in progress",
                )
            raise FleetUnavailable(
                f"HAProxy map {self.routing_map}: {len(state.generations)} generation keys "
                f"({GEN_PREFIX}<N>) where one is expected: `orchestrator haproxy adopt`",
                reason="no routing version",
            )
        return version

    def _live_buckets(self, state: MapState) -> dict[str, list[str]]:
        buckets: dict[str, list[str]] = {}
        for pop in self._topology.pops:
            regions, missing = state.buckets(pop.name, self._topology.bucket_count)
            if missing:
                raise FleetUnavailable(
                    f"HAProxy map {self.routing_map} lacks {len(missing)} bucket keys of PoP "
                    f"{pop.name} (first: {pop.name}/{missing[0]}); the map must hold every "
                    f"<pop>/<bucket> for bucket_count={self._topology.bucket_count}",
                    reason="incomplete map",
                )
            buckets[pop.name] = [r for r in regions if r is not None]
        return buckets

    def _table(self, version: int, buckets: dict[str, list[str]]) -> RoutingTable:
        count = self._topology.bucket_count
        fractions = {}
        for pop, regions in buckets.items():
            shares = dict.fromkeys(self._topology.region_names, 0.0)
            for region in regions:
                shares[region] = shares.get(region, 0.0) + 1.0 / count
            fractions[pop] = shares
        return RoutingTable(version=version, fractions=fractions, buckets=buckets)

    def _targets(self, write: RoutingWrite, live: dict[str, list[str]]) -> dict[str, list[str]]:
        pops = {p.name for p in self._topology.pops}
        regions = set(self._topology.region_names)
        count = self._topology.bucket_count
        for pop in sorted(set(write.fractions) - pops):
            raise InvalidRequest(f"fractions.{pop}: unknown PoP", reason=f"fractions.{pop}")
        for pop in sorted(pops - set(write.fractions)):
            raise InvalidRequest(f"fractions.{pop}: every PoP needs fractions", reason="fractions")
        targets = {}
        for pop, shares in write.fractions.items():
            for region in shares:
                if region not in regions:
                    field = f"fractions.{pop}.{region}"
                    raise InvalidRequest(f"{field}: unknown region", reason=field)
            given = (write.buckets or {}).get(pop)
            if given is not None:
                if len(given) != count or not set(given) <= regions:
                    field = f"buckets.{pop}"
                    raise InvalidRequest(
                        f"{field}: needs {count} buckets naming known regions", reason=field
                    )
                targets[pop] = list(given)
            else:
                positive = {r: f for r, f in shares.items() if f > 0}
                targets[pop] = assign_buckets(positive, count, live[pop])
        return targets

    async def write_routing(
        self, write: RoutingWrite, *, if_match: int, idempotency_key: str
    ) -> RoutingTable:
        """Move the buckets that differ; a version claim makes one of two racing writers win.

        The same target again writes nothing and answers the live table (so a retry whose
        first attempt applied gets its answer, not a 409), whatever ``if_match`` says.
        """
        tag = writer_tag(idempotency_key)
        state = await self.read_map()
        resuming = state.version is None and state.writing == (if_match + 1, tag)
        taken = state.version is None and f"{GEN_PREFIX}{if_match}" not in state.entries
        if taken and not resuming and state.boot is not None:
            # Another writer claimed version if_match and is writing its successor.
            raise VersionConflict(
                f"routing version {if_match} is being replaced by another writer",
                status=409,
                reason="routing changed since read",
            )
        version = if_match if resuming else self._check(state)
        live = {
            pop.name: [r or "" for r in state.buckets(pop.name, self._topology.bucket_count)[0]]
            for pop in self._topology.pops
        }
        targets = self._targets(write, live)
        changes = diff_entries(state.entries, targets)
        if not changes and not resuming:
            log.info("haproxy routing unchanged", version=version, key=idempotency_key)
            return self._table(version, targets)
        if version != if_match:
            raise VersionConflict(
                f"routing is at version {version}, not {if_match} (If-Match)",
                status=409,
                reason="routing changed since read",
            )
        new = if_match + 1
        m = self.routing_map
        if not resuming:
            # The claim: HAProxy deletes the key for exactly one of several writers.
            answer = await self.runtime.command(f"del map {m} {GEN_PREFIX}{if_match}")
            if answer.strip():
                raise VersionConflict(
                    f"routing version {if_match} was taken by another writer ({answer.strip()})",
                    status=409,
                    reason="routing changed since read",
                )
            await self.runtime.writes([f"add map {m} {WRITING_KEY} {new}.{tag}"])
        if len(changes) > TRANSACTION_ABOVE:
            await self._replace(state, targets, new, tag)
        else:
            commands = [
                f"{'set' if exists else 'add'} map {m} {key} {region}"
                for key, region, exists in changes
            ]
            commands += [f"add map {m} {GEN_PREFIX}{new} {tag}", f"del map {m} {WRITING_KEY}"]
            await self.runtime.writes(commands)
        log.info("haproxy routing written", version=new, moved=len(changes), key=idempotency_key)
        return self._table(new, targets)

    async def _replace(
        self, state: MapState, targets: dict[str, list[str]], new: int, tag: str
    ) -> None:
        """The whole map in one transaction (``prepare map``, ``add map @V``, ``commit map``):
        every bucket and the new version switch at once, and in O(entries): ``set map``
        finds its key by a linear scan in HAProxy 2.6, so thousands of them cost O(n^2).
        Keys other than the buckets and the version (an operator's own) are carried over."""
        m = self.routing_map
        answer = await self.runtime.command(f"prepare map {m}")
        found = re.search(r"New version created: (\d+)", answer)
        if found is None:
            raise FleetRejected(f"prepare map {m}: {answer.strip()}", reason=answer.strip())
        v = found.group(1)
        final = {
            k: value
            for k, value in state.entries.items()
            if k != WRITING_KEY and not k.startswith(GEN_PREFIX)
        }
        for pop, regions in targets.items():
            final.update({bucket_key(pop, b): region for b, region in enumerate(regions)})
        final[f"{GEN_PREFIX}{new}"] = tag
        await self.runtime.writes([f"add map @{v} {m} {k} {value}" for k, value in final.items()])
        await self.runtime.writes([f"commit map @{v} {m}"])

    # --- service weights ---------------------------------------------------------

    async def set_service_weight(
        self, change: ServiceWeightChange, *, idempotency_key: str
    ) -> MutationResult:
        """``weight 0`` drains the server (``state drain``, its weight kept for the return);
        any other weight is ``weight round(w * full_weight)`` and ``state ready``."""
        self._check(await self.read_map())
        if change.region not in self._topology.region_names:
            raise InvalidRequest(f"region: unknown region {change.region!r}", reason="region")
        backend, server = self.server_of(change.region, change.service)
        found = (await self.servers()).get((backend, server))
        if found is None:
            raise InvalidRequest(
                f"service: HAProxy has no server {backend}/{server} "
                f"(ORCHESTRATOR_HAPROXY_SERVER={self._server})",
                reason="service",
            )
        commands = []
        where = f"{backend}/{server}"
        if change.weight == 0:
            if not found.drained:
                commands.append(f"set server {where} state drain")
        else:
            weight = max(1, round(change.weight * self.full_weight))
            if found.user_weight != weight:
                commands.append(f"set server {where} weight {weight}")
            if found.drained and not found.maintenance:
                commands.append(f"set server {where} state ready")
        if commands:
            await self.runtime.writes(commands)
        log.info("haproxy service weight", server=where, commands=commands, key=idempotency_key)
        return MutationResult(
            idempotency_key=idempotency_key,
            audit_seq=0,
            kind="service-weight",
            detail={
                "server": where,
                "applied": bool(commands),
                "commands": commands,
                "before": found.fraction(self.full_weight),
                "weight": change.weight,
                "maintenance": found.maintenance,
            },
        )

    # --- what HAProxy does not do --------------------------------------------------

    def _unsupported(self, what: str) -> NoReturn:
        raise FleetRejected(
            f"the HAProxy fleet cannot {what}: HAProxy steers traffic only (routing map and "
            "server weights); run this through a fleet API (ORCHESTRATOR_FLEET=http)",
            reason="unsupported",
        )

    async def move_shards(self, move: ShardMove, *, idempotency_key: str) -> MutationResult:
        self._unsupported("move shard primaries")

    async def batch_job(self, action: BatchJobAction, *, idempotency_key: str) -> MutationResult:
        self._unsupported("start or stop batch jobs")

    async def change_config(self, change: ConfigChange, *, idempotency_key: str) -> MutationResult:
        self._unsupported("change config files")

    async def training_cluster(self) -> TrainingCluster:
        self._unsupported("report training hosts")

    async def training_checkpoints(self, job: str) -> TrainingCheckpoints:
        self._unsupported("list checkpoints")

    async def stop_training_job(
        self, job: str, *, idempotency_key: str, checkpoint: bool = False
    ) -> MutationResult:
        self._unsupported("stop training jobs")

    async def start_training_job(
        self, request: StartJobRequest, *, idempotency_key: str
    ) -> MutationResult:
        self._unsupported("start training jobs")

    async def quarantine_host(
        self, request: QuarantineRequest, *, idempotency_key: str
    ) -> MutationResult:
        self._unsupported("quarantine hosts")

    async def release_host(self, host: str, *, idempotency_key: str) -> MutationResult:
        self._unsupported("release hosts")
