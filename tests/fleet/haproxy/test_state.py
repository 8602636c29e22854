"""The HAProxy fleet's pure parts: reading ``show map`` and ``show servers state``, the
diff that makes a repeated target write nothing, addresses, and batching into lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import load_settings
from orchestrator.exceptions import ConfigError
from orchestrator.fleet.configured import fleet_from_settings
from orchestrator.fleet.haproxy import HAProxyFleet
from orchestrator.fleet.haproxy.runtime import MAX_LINE_BYTES, _chunks, parse_address
from orchestrator.fleet.haproxy.state import (
    BOOT_KEY,
    GEN_PREFIX,
    WRITING_KEY,
    diff_entries,
    parse_map,
    parse_servers_state,
    writer_tag,
)

SHOW_MAP = (
    "0x5629 edge-1/0 us-east\n"
    "0x5630 edge-1/1 eu-west\n"
    f"0x5631 {BOOT_KEY} 0123abcd\n"
    f"0x5632 {GEN_PREFIX}7 adopted\n"
    "0x5633 edge-1/0 eu-west\n"
    "\n"
)

SHOW_SERVERS = (
    "1\n"
    "# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight "
    "srv_iweight srv_time_since_last_change ...\n"
    "5 web 1 us-east 127.0.0.1 2 0 50 100 1 1 0 2 0 0 0 0 - 1 - 0 0 - - 0\n"
    "5 web 2 eu-west 127.0.0.1 2 8 100 100 0 1 0 2 0 0 0 0 - 2 - 0 0 - - 0\n"
    "5 web 3 ap-south 127.0.0.1 0 1 100 100 0 1 0 2 0 0 0 0 - 2 - 0 0 - - 0\n"
    "\n"
)


class TestMap:
    """A map reads as HAProxy looks it up (the first of duplicate keys wins) with its
    boot mark, its one version and any write under way."""

    def test_entries_boot_and_version(self) -> None:
        state = parse_map(SHOW_MAP)
        assert state.entries["edge-1/0"] == "us-east"
        assert state.duplicates == ["edge-1/0"]
        assert state.boot == "0123abcd"
        assert state.version == 7
        assert state.writing is None

    def test_no_boot_mark_after_a_restart(self) -> None:
        assert parse_map("0x1 edge-1/0 us-east\n\n").boot is None

    def test_two_generations_are_no_version(self) -> None:
        state = parse_map(f"0x1 {GEN_PREFIX}7 a\n0x2 {GEN_PREFIX}8 b\n")
        assert state.generations == [7, 8]
        assert state.version is None

    def test_write_under_way(self) -> None:
        state = parse_map(f"0x1 {WRITING_KEY} 8.{writer_tag('k')}\n")
        assert state.writing == (8, writer_tag("k"))

    def test_missing_buckets_are_named(self) -> None:
        regions, missing = parse_map(SHOW_MAP).buckets("edge-1", 3)
        assert regions == ["us-east", "eu-west", None]
        assert missing == [2]


class TestDiff:
    """Only buckets whose region differs are written; a key the map lacks is added."""

    def test_same_target_is_no_change(self) -> None:
        live = {"p/0": "a", "p/1": "b"}
        assert diff_entries(live, {"p": ["a", "b"]}) == []

    def test_changed_and_missing(self) -> None:
        live = {"p/0": "a"}
        assert diff_entries(live, {"p": ["b", "b"]}) == [("p/0", "b", True), ("p/1", "b", False)]


class TestServers:
    """A pool's weight is its user weight over the full weight; drained or in
    maintenance it is 0."""

    def test_weights(self) -> None:
        servers = parse_servers_state(SHOW_SERVERS)
        assert servers[("web", "us-east")].fraction(100) == 0.5
        assert servers[("web", "eu-west")].drained
        assert servers[("web", "eu-west")].fraction(100) == 0.0
        assert servers[("web", "ap-south")].maintenance
        assert servers[("web", "ap-south")].fraction(100) == 0.0


class TestRuntimeAddressAndBatches:
    """Addresses are unix paths or host:port; commands are batched into lines HAProxy's
    buffer holds, in order, and a command holding ';' is refused (it would split)."""

    @pytest.mark.parametrize(
        ("address", "parsed"),
        [
            ("/run/haproxy/admin.sock", ("unix", "/run/haproxy/admin.sock")),
            ("unix:/tmp/a.sock", ("unix", "/tmp/a.sock")),
            ("127.0.0.1:9999", ("127.0.0.1", 9999)),
            ("tcp:lb.internal:9999", ("lb.internal", 9999)),
        ],
    )
    def test_addresses(self, address: str, parsed: tuple[str, object]) -> None:
        assert parse_address(address) == parsed

    @pytest.mark.parametrize("address", ["unix:", "lb.internal", "host:99999"])
    def test_bad_addresses(self, address: str) -> None:
        with pytest.raises(ValueError):
            parse_address(address)

    def test_chunks_fit_and_keep_order(self) -> None:
        commands = [f"set map /m p/{i} region-{i % 3}" for i in range(3000)]
        chunks = _chunks(commands)
        assert [c for chunk in chunks for c in chunk] == commands
        assert all(len(";".join(chunk)) <= MAX_LINE_BYTES for chunk in chunks)
        assert len(chunks) > 1

    def test_semicolon_refused(self) -> None:
        with pytest.raises(ValueError, match="';'"):
            _chunks(["set map /m a;b c"])


class TestSettings:
    """ORCHESTRATOR_FLEET=haproxy selects the HAProxy fleet; it needs a topology file."""

    def test_selected(self, tmp_path: Path) -> None:
        topology = tmp_path / "topology.yaml"
        topology.write_text(
            "regions: [{name: us-east}, {name: eu-west}]\n"
            "pops: [{name: edge-1, demand_weight: 1, rtt_ms: {us-east: 5, eu-west: 80}}]\n"
            "services: [{name: web, kind: stateless}]\n"
            "bucket_count: 64\n"
        )
        env = {
            "ORCHESTRATOR_FLEET": "haproxy",
            "ORCHESTRATOR_HAPROXY_SOCKET": "127.0.0.1:9999",
            "ORCHESTRATOR_HAPROXY_TOPOLOGY": str(topology),
            "ORCHESTRATOR_HAPROXY_MAP": "/etc/haproxy/maps/routing.map",
        }
        fleet = fleet_from_settings(load_settings(env))
        assert isinstance(fleet, HAProxyFleet)
        assert fleet.routing_map == "/etc/haproxy/maps/routing.map"
        assert fleet.static_topology.bucket_count == 64

    def test_topology_required(self) -> None:
        with pytest.raises(ConfigError, match="ORCHESTRATOR_HAPROXY_TOPOLOGY"):
            fleet_from_settings(load_settings({"ORCHESTRATOR_FLEET": "haproxy"}))

    def test_server_template_names_both(self) -> None:
        with pytest.raises(ConfigError, match="ORCHESTRATOR_HAPROXY_SERVER"):
            load_settings({"ORCHESTRATOR_HAPROXY_SERVER": "{region}"})
