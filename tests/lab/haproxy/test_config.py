"""The generated HAProxy files and the counters' arithmetic (pure, no process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.lab.config import load_config
from orchestrator.lab.haproxy.config import (
    Layout,
    dependency_ms,
    haproxy_cfg,
    poisson_quantile,
    queue_timeout_ms,
    routing_map,
    server_maxconn,
    server_maxqueue,
)
from orchestrator.lab.haproxy.stats import Counters, Counts, StatsWindow, parse_servers, parse_stat


def layout(tmp: Path) -> Layout:
    config = load_config(None)
    return Layout(
        directory=tmp,
        pop_ports={p.name: 9000 + i for i, p in enumerate(config.pops)},
        region_ports={r.name: 9100 + i for i, r in enumerate(config.regions)},
        stats_port=9200,
    )


class TestConfig:
    """The adapter's conventions: a frontend per PoP, a backend per front service with a
    server per region whose maxconn admits the pool's slots and room for the requests
    in their dependency calls (a remote kv primary's RTT included) at the pool's capacity,
    and whose maxqueue is the pool's queue less the places that room leaves the backend's
    wait for a slot."""

    def test_every_pop_hashes_like_bucket_of_and_reads_the_map(self, tmp_path: Path) -> None:
        config = load_config(None)
        text = haproxy_cfg(config, layout(tmp_path))
        for pop in config.pops:
            assert f"frontend {pop.name}\n" in text
            assert f"str({pop.name}/),concat(,txn.bucket,)" in text
        assert text.count("url_param(user),url_dec(1),xxh32,mod(1024)") == len(config.pops)
        assert text.count(f"map({tmp_path / 'routing.map'},us-east)") == len(config.pops)

    def test_region_servers_carry_the_pool_capacity(self, tmp_path: Path) -> None:
        text = haproxy_cfg(load_config(None), layout(tmp_path))
        assert "backend web\n" in text and "backend sessions\n" in text
        # web in eu-west: 6 slots, and room for the requests in their dependency calls at
        # its capacity (75 rps x 83.7 ms: cache 4, kv 8 and the RTT to the user's kv
        # primary, a third here, a third in us-east 75 ms away, a third in us-west 140 ms
        # away) 999 times in 1,000: 15 of a Poisson count of mean 6.3; its queue of 12 less
        # the 8.7 places beyond the mean that the backend's wait for a slot holds
        assert "server eu-west 127.0.0.1:9102 weight 100 maxconn 21 maxqueue 3" in text
        # sessions in us-east: 4 slots, 8 of mean 2.1 in calls, a queue of 8 less 5.9
        assert "server us-east 127.0.0.1:9100 weight 100 maxconn 12 maxqueue 2" in text
        # twice the longest web queue's drain time, every request in it cold:
        # 16 x 80 ms x 3 / 8 slots
        assert queue_timeout_ms(load_config(None), "web") == 960
        assert "timeout queue 960ms" in text

    def test_maxconn_holds_the_dependency_calls_at_capacity_nearly_always(self) -> None:
        config = load_config(None)
        for region in config.regions:
            for service in ("web", "sessions"):
                pool = region.services[service]
                in_calls = pool.capacity_rps * dependency_ms(config, region.name, service) / 1e3
                room = server_maxconn(config, region.name, service) - pool.slots
                # more than the mean (a Poisson count), and the 99.9th percentile exactly
                assert room > in_calls
                assert room == poisson_quantile(in_calls, 0.999)

    def test_both_waits_hold_the_pools_queue_at_the_mean_in_calls(self) -> None:
        config = load_config(None)
        for region in config.regions:
            for service in ("web", "sessions"):
                pool = region.services[service]
                in_calls = pool.capacity_rps * dependency_ms(config, region.name, service) / 1e3
                in_backend = server_maxconn(config, region.name, service) - pool.slots - in_calls
                in_haproxy = server_maxqueue(config, region.name, service)
                # within a rounding, or one place over where the backend's holds them all:
                # maxqueue is at least 1, since 0 is HAProxy's "unlimited"
                assert abs(in_backend + in_haproxy - pool.queue_limit) <= 0.5 or (
                    in_haproxy == 1 and pool.queue_limit - 0.5 <= in_backend < pool.queue_limit
                )

    def test_poisson_quantile(self) -> None:
        # scipy.stats.poisson.ppf(0.999, mean) for these means: 4, 15, 89, 463
        assert [poisson_quantile(m, 0.999) for m in (0.5, 6.3, 63, 400)] == [4, 15, 89, 463]
        assert poisson_quantile(0.0, 0.999) == 0
        assert poisson_quantile(10_000, 0.999) == 10_310  # the normal approximation

    def test_boot_map_holds_every_bucket_of_every_pop(self) -> None:
        config = load_config(None)
        lines = routing_map(config).splitlines()
        assert len(lines) == len(config.pops) * config.bucket_count
        assert {line.split()[1] for line in lines} <= {r.name for r in config.regions}


STAT = """# pxname,svname,stot,econ,eresp,hrsp_5xx,req_tot
p1,FRONTEND,0,,,3,10
web,east,4,2,0,1,
web,west,3,0,0,0,
web,BACKEND,9,2,0,3,9
sessions,east,1,0,0,0,
"""


class TestStats:
    """A refused request counts on its region (econ), a served one by its status."""

    def test_parse_sums_services_per_region(self) -> None:
        regions, pops = parse_stat(STAT, ["web", "sessions"], ["p1"])
        assert regions == {"east": Counts(7, 3), "west": Counts(3, 0)}
        assert pops == {"p1": Counts(10, 3)}

    def test_parse_keeps_each_pool(self) -> None:
        assert parse_servers(STAT, ["web", "sessions"]) == {
            "web/east": Counts(6, 3),
            "web/west": Counts(3, 0),
            "sessions/east": Counts(1, 0),
        }

    def test_counters_window_each_scope(self) -> None:
        counters = Counters(60, ["web", "sessions"], ["p1"])
        counters.add(0.0, "# pxname,svname,stot,econ,eresp,hrsp_5xx,req_tot\n")
        counters.add(2.0, STAT)
        assert counters.pools.over(10) == (2.0, parse_servers(STAT, ["web", "sessions"]))
        assert counters.regions.over(10)[1]["east"] == Counts(7, 3)
        assert counters.pops.over(10)[1] == {"p1": Counts(10, 3)}

    def test_window_differences(self) -> None:
        window = StatsWindow(retention_s=60)
        window.add(0.0, {"east": Counts(0, 0)})
        window.add(5.0, {"east": Counts(10, 1)})
        window.add(10.0, {"east": Counts(30, 2)})
        assert window.over(5.0) == (5.0, {"east": Counts(20, 1)})
        assert window.over(60.0) == (10.0, {"east": Counts(30, 2)})
        assert StatsWindow(60).over(5.0) == (0.0, {})


class TestServeOptions:
    """``lab serve --data-plane`` refuses what it cannot do, in one line, before starting."""

    def test_unknown_data_plane(self) -> None:
        from typer.testing import CliRunner

        from orchestrator.cli import app

        result = CliRunner().invoke(app, ["lab", "serve", "--data-plane", "envoy"])
        assert result.exit_code != 0
        assert "--data-plane must be auto, python or haproxy" in result.output

    def test_haproxy_is_live_only(self) -> None:
        from typer.testing import CliRunner

        from orchestrator.cli import app

        result = CliRunner().invoke(
            app, ["lab", "serve", "--data-plane", "haproxy", "--mode", "model"]
        )
        assert result.exit_code != 0
        assert "live traffic only" in result.output

    def test_auto_is_haproxy_where_it_can_carry_the_lab(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from orchestrator.commands import lab
        from orchestrator.lab.haproxy import plane

        monkeypatch.setattr(plane, "haproxy_binary", lambda: "/usr/sbin/haproxy")
        assert lab._auto_data_plane("live", False)[0] == "haproxy"
        assert lab._auto_data_plane("live", True)[0] == "python"
        assert lab._auto_data_plane("model", False) == ("python", "--mode model")
        monkeypatch.setattr(plane, "haproxy_binary", lambda: None)
        chosen, why = lab._auto_data_plane("live", False)
        assert chosen == "python" and "scripts/install-system-deps.sh" in why
