"""Start and stop a lab's HAProxy data plane: a backend process per region, then HAProxy.

:meth:`HAProxyDataPlane.start` writes the files (:mod:`.config`) into a directory,
starts one backend process per region and HAProxy (each in its own process group, bound
to die with this process), waits for each to answer, and adopts the fresh proxy (boot
mark, routing version) so the adapter steers it at once. :meth:`stop` stops them all.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from orchestrator.exceptions import ConfigError
from orchestrator.fleet.haproxy import HAProxyFleet, RuntimeApi, load_topology
from orchestrator.fleet.haproxy.admin import adopt
from orchestrator.lab.config import LabConfig
from orchestrator.lab.haproxy.config import (
    POOL_WEIGHT_LUA,
    RTT_LUA,
    Layout,
    haproxy_cfg,
    prometheus_yml,
    routing_map,
    topology,
)
from orchestrator.logging import get_logger
from orchestrator.ports import free_ports
from orchestrator.processes import spawn, stop_group
from orchestrator.waiting import exited, http_ok, wait_until

__all__ = ["HAPROXY", "HAProxyDataPlane", "haproxy_binary"]

HAPROXY = "haproxy"

log = get_logger(__name__)


def haproxy_binary() -> str | None:
    """The installed HAProxy (Debian's is in /usr/sbin, often not on a user's PATH)."""
    return shutil.which(HAPROXY) or shutil.which(f"/usr/sbin/{HAPROXY}")


class HAProxyDataPlane:
    """The lab's regions behind a real HAProxy. Always :meth:`stop` it (or use ``with``)."""

    def __init__(
        self,
        config: LabConfig,
        directory: Path,
        *,
        edge_port_base: int = 0,
        stats_port: int = 0,
        start_timeout_s: float = 60.0,
    ) -> None:
        """``edge_port_base``: PoPs listen on it, +1, ... in config order (0: free ports)."""
        self.config = config
        pops = [p.name for p in config.pops]
        regions = [r.name for r in config.regions]
        free = iter(free_ports(len(pops) + len(regions) + 1))
        self.layout = Layout(
            directory=directory,
            pop_ports={
                p: (edge_port_base + i if edge_port_base else next(free))
                for i, p in enumerate(pops)
            },
            region_ports={r: next(free) for r in regions},
            stats_port=stats_port or next(free),
        )
        self._timeout_s = start_timeout_s
        self.backends: dict[str, subprocess.Popen[bytes]] = {}
        self.haproxy: subprocess.Popen[bytes] | None = None

    def pop_url(self, pop: str) -> str:
        return f"http://127.0.0.1:{self.layout.pop_ports[pop]}"

    def region_url(self, region: str) -> str:
        return f"http://127.0.0.1:{self.layout.region_ports[region]}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.layout.stats_port}/metrics"

    def fleet(self) -> HAProxyFleet:
        """The adapter over this proxy (a new one per caller: it holds no connection)."""
        return HAProxyFleet(
            RuntimeApi(str(self.layout.socket_path)),
            load_topology(self.layout.topology_path),
            routing_map=str(self.layout.map_path),
        )

    def write_files(self) -> None:
        layout = self.layout
        layout.directory.mkdir(parents=True, exist_ok=True)
        (layout.directory / "lab.yaml").write_text(
            yaml.safe_dump(self.config.model_dump(mode="json")), encoding="utf-8"
        )
        layout.map_path.write_text(routing_map(self.config), encoding="utf-8")
        layout.topology_path.write_text(topology(self.config), encoding="utf-8")
        layout.lua_path.write_text(POOL_WEIGHT_LUA + RTT_LUA, encoding="utf-8")
        layout.config_path.write_text(haproxy_cfg(self.config, layout), encoding="utf-8")
        layout.prometheus_path.write_text(prometheus_yml(layout), encoding="utf-8")
        # the backends start from the config's primaries and slots, not a previous run's
        layout.beside_path.unlink(missing_ok=True)

    def start(self) -> HAProxyDataPlane:
        binary = haproxy_binary()
        if binary is None:
            raise ConfigError(
                "--data-plane", "haproxy is not installed (scripts/install-system-deps.sh)"
            )
        self.write_files()
        try:
            self._start_backends()
            self._start_haproxy(binary)
            self._adopt()
        except BaseException:
            self.stop()
            raise
        log.info(
            "haproxy data plane up", pops=self.layout.pop_ports, dir=str(self.layout.directory)
        )
        return self

    def _adopt(self) -> None:
        """Adopt the fresh proxy; from a thread when called inside an event loop (a test)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(adopt(self.fleet()))
            return
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, adopt(self.fleet())).result()

    def _start_backends(self) -> None:
        layout = self.layout
        for region, port in layout.region_ports.items():
            with (layout.directory / f"backend-{region}.log").open("ab") as out:
                self.backends[region] = spawn(
                    [
                        sys.executable,
                        "-m",
                        "orchestrator.lab.haproxy.backend",
                        "--config",
                        str(layout.directory / "lab.yaml"),
                        "--region",
                        region,
                        "--port",
                        str(port),
                        "--map",
                        str(layout.map_path),
                        "--socket",
                        str(layout.socket_path),
                        "--beside",
                        str(layout.beside_path),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
        for region, process in self.backends.items():
            url = f"{self.region_url(region)}/lab/served"
            if not wait_until(
                lambda url=url: http_ok(url),  # type: ignore[misc]
                timeout_s=self._timeout_s,
                interval_s=0.1,
                alive=exited(
                    process, f"the {region} backend", layout.directory / f"backend-{region}.log"
                ),
            ):
                raise RuntimeError(f"the {region} backend did not answer on {url}")

    def _start_haproxy(self, binary: str) -> None:
        layout = self.layout
        layout.socket_path.unlink(missing_ok=True)
        with (layout.directory / "haproxy.log").open("ab") as out:
            self.haproxy = spawn(
                [binary, "-db", "-f", str(layout.config_path)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        process = self.haproxy

        def answers() -> bool:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(2.0)
                sock.connect(str(layout.socket_path))
                sock.sendall(b"show info\n")
                return b"Name: HAProxy" in sock.recv(4096)

        if not wait_until(
            answers,
            timeout_s=self._timeout_s,
            alive=exited(process, "haproxy", layout.directory / "haproxy.log"),
            ignore=(OSError,),
        ):
            raise RuntimeError(f"haproxy did not answer on {layout.socket_path}")

    def stop(self) -> None:
        """Stop HAProxy first (no request reaches a stopping backend), then the backends;
        how long each took is logged (a stop that hangs says where)."""
        started = time.monotonic()
        if self.haproxy is not None:
            stop_group(self.haproxy, timeout_s=10.0)
            self.haproxy = None
            log.info("haproxy stopped", took_s=round(time.monotonic() - started, 2))
        for region, process in self.backends.items():
            began = time.monotonic()
            stop_group(process, timeout_s=10.0)
            log.info("backend stopped", region=region, took_s=round(time.monotonic() - began, 2))
        self.backends.clear()

    def __enter__(self) -> HAProxyDataPlane:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
