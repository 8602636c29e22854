"""The files an HAProxy data plane for a lab starts from (pure: text in, text out).

Conventions are the adapter's (docs/fleet-contract.md#haproxy), so ``HAProxyFleet``
steers this proxy unchanged:

* a frontend per PoP, named as the PoP, on its own port. The user is the ``user`` query
  parameter (``/edge/<pop>?user=U&service=S``, the Python data plane's URL, works as is);
  its bucket is ``url_param(user),url_dec(1),xxh32,mod(<bucket_count>)``, exactly
  :func:`~orchestrator.policy.rebalance.buckets.bucket_of`; ``<pop>/<bucket>`` is looked up
  in the routing map, whose values are region names;
* a backend per front service, named as the service, with one server per region named as
  the region (``ORCHESTRATOR_HAPROXY_SERVER={service}/{region}``, the default). A request
  goes to its routed region's server (``use-server``) with probability
  ``weight / 100`` (the server's live weight, 0 when drained: :data:`POOL_WEIGHT_LUA`); otherwise the
  backend balances it over the other servers by weight, as the Python lab forwards by
  pool weight. The server's ``maxconn`` is the pool's slots plus room for the requests in
  dependency calls (:func:`server_maxconn`), ``maxqueue`` its queue limit less what the
  backend holds in front of it (:func:`server_maxqueue`), and
  ``timeout queue`` bounds the wait: past either, HAProxy answers 503 itself.

A request pays its PoP's round trip to the routed region (``pops[].rtt_ms``) in the
frontend, before it is queued, so the RTT holds no server connection (:data:`RTT_LUA`, a
yielding ``core.msleep``), as the Python lab sleeps it before the region's pools. Every PoP
frontend stamps the request's arrival at the edge (``x-lab-edge-us``) and, after the RTT,
in the region (``x-lab-accept-us``; ``date(0,us)``, wall clock in microseconds; HAProxy
2.6 has no ``request_date`` fetch), both before it is queued: a region backend on the same
host measures the region's latency including the wait in HAProxy's queue, and the PoP's
including the RTT, as the Python lab counts them.
A real Prometheus scrapes HAProxy's exporter (``stats`` frontend) and every region backend's
``/metrics``: :func:`prometheus_yml` is that scrape config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from orchestrator.lab.config import LabConfig
from orchestrator.lab.state import FleetState
from orchestrator.models import ServiceKind

__all__ = [
    "ACCEPT_HEADER",
    "EDGE_HEADER",
    "FULL_WEIGHT",
    "POOL_WEIGHT_LUA",
    "RTT_LUA",
    "RULES",
    "Layout",
    "haproxy_cfg",
    "prometheus_yml",
    "queue_timeout_ms",
    "routing_map",
    "DEPENDENCY_QUANTILE",
    "dependency_ms",
    "poisson_quantile",
    "primaries_of",
    "server_maxconn",
    "server_maxqueue",
    "topology",
]

#: the request's arrival in its region (at its PoP frontend, after the RTT), microseconds
#: since the epoch (HAProxy's clock)
ACCEPT_HEADER = "x-lab-accept-us"

#: the request's arrival at its PoP frontend, before the RTT
EDGE_HEADER = "x-lab-edge-us"

#: a pool at weight 1.0 (the adapter's ORCHESTRATOR_HAPROXY_FULL_WEIGHT default)
FULL_WEIGHT = 100

#: recording rules (the region health queries at a 1m window) and the refusal alert; package
#: data, so a pip-installed lab loads them too (deploy/ is not in the package)
RULES = Path(__file__).with_name("haproxy-lab.rules.yml")


#: ``lua.pool_weight(<backend>,<server>)``: the server's weight as the orchestrator sees it,
#: 0 while drained or in maintenance. HAProxy 2.6's ``srv_weight`` fetch keeps a drained
#: server's weight, and ``use-server`` sends to a drained server (it is still up), so a
#: drain needs this to stop a routed region's requests.
POOL_WEIGHT_LUA = """\
core.register_fetches("pool_weight", function(txn, backend, server)
  local srv = core.backends[backend].servers[server]
  local status = srv:get_stats()["status"]
  if status == "DRAIN" or status:find("MAINT") or status:find("DOWN") then
    return 0
  end
  return srv:get_weight()
end)
"""


#: ``http-request lua.rtt``: wait ``txn.rtt_ms``, the PoP's round trip to the routed region.
#: ``core.msleep`` yields in an action, so a waiting request holds no thread (nor, being in
#: the frontend, a server connection).
RTT_LUA = """\
core.register_action("rtt", {"http-req"}, function(txn)
  local ms = tonumber(txn:get_var("txn.rtt_ms"))
  if ms ~= nil and ms > 0 then
    core.msleep(ms)
  end
end)
"""


@dataclass(frozen=True)
class Layout:
    """Where everything listens and lives."""

    directory: Path
    pop_ports: dict[str, int]
    region_ports: dict[str, int]
    stats_port: int

    @property
    def socket_path(self) -> Path:
        return self.directory / "admin.sock"

    @property
    def map_path(self) -> Path:
        return self.directory / "routing.map"

    @property
    def config_path(self) -> Path:
        return self.directory / "haproxy.cfg"

    @property
    def lua_path(self) -> Path:
        return self.directory / "lab.lua"

    @property
    def topology_path(self) -> Path:
        return self.directory / "topology.yaml"

    @property
    def prometheus_path(self) -> Path:
        return self.directory / "prometheus.yml"

    @property
    def beside_path(self) -> Path:
        """What the region backends follow of the lab's own state (:mod:`.beside`)."""
        return self.directory / "beside.json"

    def scrape_targets(self) -> dict[str, list[str]]:
        """Prometheus job -> ``host:port`` targets (every one serves ``/metrics``)."""
        return {
            "haproxy": [f"127.0.0.1:{self.stats_port}"],
            "lab-regions": [f"127.0.0.1:{p}" for p in self.region_ports.values()],
        }


def primaries_of(config: LabConfig) -> dict[str, str]:
    """Every shard's primary region at boot (shard id -> region)."""
    return {shard.id: shard.primary for shard in config.shard_list()}


def dependency_ms(
    config: LabConfig, region: str, service: str, primaries: Mapping[str, str] | None = None
) -> float:
    """The warm time a request of ``service`` served in ``region`` spends in its dependency
    calls, one after another: a stateless one's service time in the region; a stateful
    one's at the user's shard primary, plus the inter-region RTT when that is elsewhere,
    averaged over the shards (a user's shard is a stable hash of its id, so every shard is
    as likely). ``primaries``: shard id -> region (None: the boot placement)."""
    placed = primaries_of(config) if primaries is None else primaries
    depends_on = config.service(service).depends_on
    total = 0.0
    for dependency in depends_on:
        shards = [s for s in config.shard_list() if s.service == dependency]
        if config.service(dependency).kind is ServiceKind.STATEFUL and shards:
            for shard in shards:
                where = placed.get(shard.id, shard.primary)
                pool = config.region(where).services.get(dependency)
                rtt = config.rtt_between(region, where) or 0.0
                total += (rtt + (pool.service_time_ms if pool else 0.0)) / len(shards)
        else:
            pool = config.region(region).services.get(dependency)
            total += pool.service_time_ms if pool else 0.0
    return total


def _mean_in_calls(
    config: LabConfig, region: str, service: str, primaries: Mapping[str, str] | None = None
) -> float:
    """How many of the pool's requests are in dependency calls at once, on average, when
    it serves its capacity (Little's law: capacity x dependency time)."""
    pool = config.region(region).services[service]
    return pool.capacity_rps * dependency_ms(config, region, service, primaries) / 1000.0


#: maxconn leaves room for the connections in dependency calls at full capacity this often
DEPENDENCY_QUANTILE = 0.999


def server_maxconn(
    config: LabConfig, region: str, service: str, primaries: Mapping[str, str] | None = None
) -> int:
    """The server's ``maxconn``: the pool's slots, plus room for the requests in their
    dependency calls when the pool serves its capacity.

    HAProxy counts a connection until the answer, dependency calls included (the RTT to a
    remote kv primary too: :func:`dependency_ms`), while the lab's pool frees its slot
    before them (the slots are held in the region's backend, :mod:`.backend`). With
    ``maxconn`` = slots, the capacity through HAProxy was ``slots / (service + dependency
    time)``, 13% under what the topology advertises for web (92 ms against 80), and a
    drain paced by the advertised capacity filled HAProxy's queues. Scaled by the mean
    hold, a small pool 503'd at 80% of its capacity once remote primaries cost RTT (the
    README path's load test: eu-west, 6 slots, 84 ms of dependencies on average, 0 to
    140 ms of RTT): the requests in dependency calls come and go at random, and at their
    mean there is no room for their peaks. So the room is the count that holds them at
    capacity with probability :data:`DEPENDENCY_QUANTILE` (a Poisson count of mean
    ``capacity x dependency time``). Cold requests, longer in their slots, still wait for
    the backend's slots, not HAProxy's connections. ``primaries``: the shards' placement
    now (a move of primaries changes the RTT a request pays).
    """
    pool = config.region(region).services[service]
    in_calls = _mean_in_calls(config, region, service, primaries)
    return pool.slots + poisson_quantile(in_calls, DEPENDENCY_QUANTILE)


def server_maxqueue(config: LabConfig, region: str, service: str) -> int:
    """The server's ``maxqueue``: the pool's queue, less the places the backend already
    holds in front of it at the boot placement.

    Under overload the backend's wait for a slot holds up to ``maxconn`` less the slots
    and the requests in dependency calls, about ``quantile - mean`` of the in-call count
    (:func:`server_maxconn`). With ``maxqueue`` = the queue, the queue behind HAProxy was
    that much deeper than the Python lab's (19-23 places a drain_haproxy receiver), and a
    naive drain's surge ended as latency rather than 503s. Less those places, the two
    waits together hold the pool's queue when the in-call count is at its mean, as the
    Python lab's queue does. Not less the whole extra room: with ``maxconn`` sized for the
    mean only and ``maxqueue`` cut by it, eu-west's 6-slot pool kept half its queue and the
    README path's load test stopped on its 503s. HAProxy 2.6 sets no ``maxqueue`` at run
    time, so a later move of primaries changes the backend's share only by the change in
    ``quantile - mean``. At least 1: ``maxqueue 0`` is HAProxy's "unlimited"."""
    pool = config.region(region).services[service]
    in_calls = _mean_in_calls(config, region, service)
    held_in_backend = poisson_quantile(in_calls, DEPENDENCY_QUANTILE) - in_calls
    return max(1, pool.queue_limit - round(held_in_backend))


def poisson_quantile(mean: float, p: float) -> int:
    """The least ``k`` with P(N <= k) >= ``p`` for N ~ Poisson(``mean``) (a normal
    approximation above a mean of 500, where the terms underflow)."""
    if mean <= 0:
        return 0
    if mean > 500:
        return math.ceil(mean + 3.1 * math.sqrt(mean))
    k, term = 0, math.exp(-mean)
    total = term
    while total < p:
        k += 1
        term *= mean / k
        total += term
    return k


def queue_timeout_ms(config: LabConfig, service: str) -> int:
    """How long a request may wait for a slot: twice the time the longest queue of any
    region's pool takes to drain at capacity when every request in it is cold
    (``queue_limit x service_time x cold.factor / slots``), so the count (``maxqueue``)
    decides, as in the Python lab (whose queue has no time limit), and the time is a
    backstop. Sized by the warm rate instead, the timeout ran out before a queue of cold
    requests drained (drain_haproxy's web pools, 40 slots of 80 ms and 160 places: 640 ms
    against 960 ms), so a receiver taking cold buckets answered 503s (``econ``, which
    HAProxy counts for a queue timeout) that the Python lab would have served."""
    longest = max(
        r.services[service].queue_limit
        * r.services[service].service_time_ms
        * config.cold.factor
        / r.services[service].slots
        for r in config.regions
        if service in r.services
    )
    return max(50, round(2 * longest))


def routing_map(config: LabConfig) -> str:
    """The map at boot: the lab's initial routing, every ``<pop>/<bucket>``."""
    state = FleetState(config)
    lines = []
    for pop in state.routing.pops:
        lines += [f"{pop}/{b} {r}" for b, r in enumerate(state.routing.buckets_of(pop))]
    return "\n".join(lines) + "\n"


def topology(config: LabConfig) -> str:
    """The lab's topology for the adapter (HAProxy does not know capacities or PoPs)."""
    return yaml.safe_dump(FleetState(config).topology().model_dump(mode="json"))


def haproxy_cfg(config: LabConfig, layout: Layout) -> str:
    front = [s.name for s in config.front_services]
    default_region = config.regions[0].name
    lines = [
        "# Generated by `orchestrator lab serve --data-plane haproxy` (docs/fleet-contract.md).",
        "global",
        f"    stats socket {layout.socket_path} mode 600 level admin",
        "    maxconn 4096",
        f"    lua-load {layout.lua_path}",
        "defaults",
        "    mode http",
        "    timeout connect 2s",
        "    timeout client 30s",
        "    timeout server 30s",
    ]
    services_acl = " ".join(front)
    rtt_ms = {p.name: p.rtt_ms for p in config.pops}
    for pop, port in layout.pop_ports.items():
        lines += [
            f"frontend {pop}",
            f"    bind 127.0.0.1:{port}",
            "    http-request return status 400 content-type application/json string "
            '\'{"error":"InvalidRequest","field":"user","reason":"the user query parameter '
            "is required\"}' if !{ url_param(user) -m found }",
            "    http-request set-var(txn.service) url_param(service)",
            f"    http-request set-var(txn.service) str({front[0]}) "
            "if !{ url_param(service) -m found }",
            "    http-request return status 422 content-type application/json string "
            f'\'{{"error":"InvalidRequest","field":"service","reason":"one of {services_acl}"}}\''
            f" if !{{ var(txn.service) -m str {services_acl} }}",
            "    http-request set-var(txn.bucket) "
            f"url_param(user),url_dec(1),xxh32,mod({config.bucket_count})",
            f"    http-request set-var(txn.route) str({pop}/),concat(,txn.bucket,)",
            "    http-request set-var(txn.region) "
            f"var(txn.route),map({layout.map_path},{default_region})",
            f"    http-request set-header {EDGE_HEADER} %[date(0,us)]",
            *(
                f"    http-request set-var(txn.rtt_ms) int({round(ms)}) "
                f"if {{ var(txn.region) -m str {region} }}"
                for region, ms in rtt_ms[pop].items()
                if round(ms) > 0
            ),
            "    http-request lua.rtt",
            f"    http-request set-header {ACCEPT_HEADER} %[date(0,us)]",
            f"    http-request set-header x-lab-pop {pop}",
            "    http-request set-header x-lab-bucket %[var(txn.bucket)]",
            "    http-request set-header x-lab-routed %[var(txn.region)]",
            "    use_backend %[var(txn.service)]",
        ]
    for service in front:
        lines += [
            f"backend {service}",
            "    balance roundrobin",
            f"    timeout queue {queue_timeout_ms(config, service)}ms",
        ]
        for region in config.regions:
            r = region.name
            lines += [
                f"    http-request set-var(txn.weight) lua.pool_weight({service},{r}) "
                f"if {{ var(txn.region) -m str {r} }}",
            ]
        for region in config.regions:
            r = region.name
            lines.append(
                f"    use-server {r} if {{ var(txn.region) -m str {r} }} "
                "{ rand(" + str(FULL_WEIGHT) + "),sub(txn.weight) lt 0 }"
            )
        for region in config.regions:
            maxconn = server_maxconn(config, region.name, service)
            maxqueue = server_maxqueue(config, region.name, service)
            lines.append(
                f"    server {region.name} 127.0.0.1:{layout.region_ports[region.name]} "
                f"weight {FULL_WEIGHT} maxconn {maxconn} maxqueue {maxqueue}"
            )
    lines += [
        "frontend stats",
        f"    bind 127.0.0.1:{layout.stats_port}",
        "    http-request use-service prometheus-exporter if { path /metrics }",
    ]
    return "\n".join(lines) + "\n"


def prometheus_yml(layout: Layout, scrape_interval_s: int = 5) -> str:
    """A prometheus.yml scraping this lab: HAProxy's exporter and the region backends, the
    series ``orchestrator/promhealth/haproxy-lab-queries.yaml`` reads, and evaluating
    :data:`RULES` (absolute path) at every scrape."""
    interval = f"{scrape_interval_s}s"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(RULES.resolve())],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            for job, targets in layout.scrape_targets().items()
        ],
    }
    return "# Generated by `orchestrator lab serve --data-plane haproxy`.\n" + yaml.safe_dump(
        config, sort_keys=False
    )
