"""A real HAProxy for tests and benchmarks: config written to a temp dir, started, stopped.

The config follows the conventions of docs/fleet-contract.md ("HAProxy"), like
examples/haproxy/haproxy.cfg: one frontend per PoP hashing ``X-User`` into buckets and
looking the bucket up in the routing map; one backend per region (the map's values);
one backend per service whose servers are the regions (pool weights and drains).
The map file holds every bucket but no boot mark, as an operator's file would.
"""

from __future__ import annotations

import asyncio
import http.server
import socket
import subprocess as sp
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from orchestrator.exceptions import FleetUnavailable
from orchestrator.fleet.haproxy import HAProxyFleet, RuntimeApi, load_topology
from orchestrator.models import RoutingTable
from orchestrator.ports import free_port
from orchestrator.waiting import exited, wait_until

__all__ = [
    "HAPROXY",
    "RegionServers",
    "RunningHAProxy",
    "haproxy_config",
    "region_servers",
    "running_haproxy",
    "settled_routing",
]

HAPROXY = "/usr/sbin/haproxy"


async def settled_routing(fleet: HAProxyFleet, within_s: float = 15.0) -> RoutingTable:
    """The live map's routing once no write is under way. The adapter refuses to read a map
    mid-write (its version is withdrawn until the write commits), and a rebalancer writing
    every 0.5 s, or a terminated one's activity still finishing, can be mid-write when a
    test reads: under a CPU hog one read landed inside a write and failed the test."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await fleet.routing()
        except FleetUnavailable as exc:
            if exc.reason != "write in progress" or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)


def haproxy_config(
    *,
    socket_path: Path,
    tcp_port: int,
    map_path: Path,
    pops: dict[str, int],
    regions: dict[str, int],
    services: dict[str, int],
    bucket_count: int,
) -> str:
    """haproxy.cfg text: PoP frontends on ``pops`` ports, region servers on ``regions``
    ports, a frontend per service on ``services`` ports."""
    default = next(iter(regions))
    lines = [
        "global",
        f"    stats socket {socket_path} mode 600 level admin",
        f"    stats socket ipv4@127.0.0.1:{tcp_port} level admin",
        "defaults",
        "    mode http",
        "    timeout connect 2s",
        "    timeout client 10s",
        "    timeout server 10s",
    ]
    for pop, port in pops.items():
        lines += [
            f"frontend {pop}",
            f"    bind 127.0.0.1:{port}",
            f"    http-request set-var(txn.bucket) req.hdr(x-user),xxh32,mod({bucket_count})",
            f"    http-request set-var(txn.route) str({pop}/),concat(,txn.bucket,)",
            f"    use_backend %[var(txn.route),map({map_path},{default})]",
        ]
    for region, port in regions.items():
        lines += [f"backend {region}", f"    server web 127.0.0.1:{port}"]
    for service, port in services.items():
        lines += [
            f"frontend {service}-in",
            f"    bind 127.0.0.1:{port}",
            f"    default_backend {service}",
            f"backend {service}",
            "    balance roundrobin",
            *(f"    server {r} 127.0.0.1:{p} weight 100" for r, p in regions.items()),
        ]
    return "\n".join(lines) + "\n"


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.region.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@dataclass
class RegionServers:
    """A tiny HTTP server per region answering its region's name."""

    ports: dict[str, int]
    servers: list[http.server.ThreadingHTTPServer] = field(default_factory=list)


@contextmanager
def region_servers(regions: Sequence[str]) -> Iterator[RegionServers]:
    running = RegionServers(ports={})
    try:
        for region in regions:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
            server.region = region  # type: ignore[attr-defined]
            threading.Thread(target=server.serve_forever, daemon=True).start()
            running.servers.append(server)
            running.ports[region] = server.server_address[1]
        yield running
    finally:
        for server in running.servers:
            server.shutdown()
            server.server_close()


@dataclass
class RunningHAProxy:
    directory: Path
    socket_path: Path
    map_path: Path
    config_path: Path
    topology_path: Path
    pop_ports: dict[str, int]
    service_ports: dict[str, int]
    #: the runtime API over TCP too (0: none)
    tcp_port: int = 0
    process: sp.Popen[bytes] | None = None

    def fleet(self) -> HAProxyFleet:
        return HAProxyFleet(
            RuntimeApi(str(self.socket_path)),
            load_topology(self.topology_path),
            routing_map=str(self.map_path),
        )

    def start(self) -> None:
        """Start HAProxy from its files (a restart loses every runtime change)."""
        self.socket_path.unlink(missing_ok=True)
        with (self.directory / "haproxy.log").open("ab") as log:
            self.process = sp.Popen(
                [HAPROXY, "-db", "-f", str(self.config_path)], stdout=log, stderr=log
            )
        process = self.process

        def answers() -> bool:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(str(self.socket_path))
                sock.sendall(b"show info\n")
                return b"Name: HAProxy" in sock.recv(4096)

        if not wait_until(
            answers, timeout_s=30, alive=exited(process, "haproxy"), ignore=(OSError,)
        ):
            self.stop()
            raise RuntimeError(f"haproxy did not answer on {self.socket_path} within 30 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except sp.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@contextmanager
def running_haproxy(
    directory: Path,
    *,
    pops: Sequence[str],
    regions: dict[str, int],
    services: Sequence[str] = ("web",),
    bucket_count: int = 64,
) -> Iterator[RunningHAProxy]:
    """HAProxy with every bucket of every PoP in the first region, started; stopped after.

    ``regions``: region -> port of the server answering for it.
    """
    first = next(iter(regions))
    map_path = directory / "routing.map"
    map_path.write_text(
        "".join(f"{pop}/{b} {first}\n" for pop in pops for b in range(bucket_count))
    )
    topology_path = directory / "topology.yaml"
    topology_path.write_text(
        yaml.safe_dump(
            {
                "regions": [{"name": r} for r in regions],
                "pops": [
                    {"name": p, "demand_weight": 1.0, "rtt_ms": dict.fromkeys(regions, 10.0)}
                    for p in pops
                ],
                "services": [{"name": s, "kind": "stateless"} for s in services],
                "bucket_count": bucket_count,
            }
        )
    )
    pop_ports = {p: free_port() for p in pops}
    service_ports = {s: free_port() for s in services}
    config_path = directory / "haproxy.cfg"
    socket_path = directory / "admin.sock"
    tcp_port = free_port()
    config_path.write_text(
        haproxy_config(
            socket_path=socket_path,
            tcp_port=tcp_port,
            map_path=map_path,
            pops=pop_ports,
            regions=regions,
            services=service_ports,
            bucket_count=bucket_count,
        )
    )
    proxy = RunningHAProxy(
        directory=directory,
        socket_path=socket_path,
        map_path=map_path,
        config_path=config_path,
        topology_path=topology_path,
        pop_ports=pop_ports,
        service_ports=service_ports,
        tcp_port=tcp_port,
    )
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
