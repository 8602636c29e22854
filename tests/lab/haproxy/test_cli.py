"""``orchestrator lab serve --data-plane haproxy``: the fleet API over HAProxy's truth.

The real command in a subprocess; the orchestrator's own HttpFleet writes routing and
drains through it, real requests go through the PoP frontends, and SIGTERM to the command
leaves no HAProxy or backend behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess as sp
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from orchestrator.contracts.training import JobState, StartJobRequest
from orchestrator.fleet.http import HttpFleet
from orchestrator.lab.haproxy.config import server_maxconn
from orchestrator.models import (
    BatchJobAction,
    HealthReport,
    RoutingWrite,
    ServiceWeightChange,
    ShardMove,
)
from orchestrator.processes import group_alive
from orchestrator.waiting import wait_until
from tests.lab.haproxy.serving import Served, lab_serve, web_limits
from tests.lab.haproxy.test_data_plane import lab_config, of, users_routed

pytestmark = pytest.mark.server


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with lab_serve(tmp_path) as running:
        yield running


class TestFleetApi:
    """HttpFleet against the lab steers HAProxy: routing, drains, health from its counters."""

    async def test_routing_and_drain_through_the_fleet_api(self, served: Served) -> None:
        pop = served.info["pops"]["p1"]
        async with HttpFleet(served.url) as fleet, httpx.AsyncClient(timeout=10) as client:
            table = await fleet.routing()
            west = users_routed(of(table, "p1"), "west", 20)
            write = RoutingWrite(fractions={"p1": {"east": 1.0}, "p2": {"tiny": 1.0}})
            after = await fleet.write_routing(write, if_match=table.version, idempotency_key="e")
            assert after.version > table.version
            answers = [await client.get(f"{pop}/edge/p1", params={"user": u}) for u in west]
            assert {a.json()["region"] for a in answers} == {"east"}

            await fleet.set_service_weight(
                ServiceWeightChange(region="east", service="web", weight=0.0),
                idempotency_key="drain",
            )
            topology = await fleet.topology()
            assert topology.service_weights["east/web"] == 0.0
            drained = [await client.get(f"{pop}/edge/p1", params={"user": u}) for u in west]
            assert all(a.status_code == 200 for a in drained)
            assert "east" not in {a.json()["region"] for a in drained}

            health = await fleet.health(window_s=60)
            seen = {r.region: r for r in health.regions}
            assert seen["east"].samples == len(answers)
            assert seen["east"].error_rate == 0.0
            assert seen["west"].samples + seen["tiny"].samples == len(drained)
            assert {p.pop: p.samples for p in health.pops}["p1"] == len(answers) + len(drained)

    async def test_what_is_not_carried_over_is_refused_by_name(self, served: Served) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            audit = await client.get(f"{served.url}/v1/audit")
            answer = await client.get(f"{served.url}/edge/p1", params={"user": "u"})
        assert audit.status_code == 400
        assert "the audit log" in audit.json()["reason"]
        assert answer.status_code == 421
        assert served.info["pops"]["p1"] in answer.json()["reason"]


class TestBesideTheProxy:
    """What HAProxy does not steer (internal pools, kv primaries, batch jobs) is the lab's
    own state: a key applies once, the topology shows it beside HAProxy's live weights,
    and a running batch job takes its share of its region's HAProxy connections."""

    async def test_shards_internal_pools_and_batch_jobs(self, served: Served) -> None:
        async with HttpFleet(served.url) as fleet:
            before = await fleet.topology()
            east = [s.id for s in before.shards if s.primary == "east"]
            assert len(east) == 2
            move = ShardMove(shards=east, to_region="west")
            first = await fleet.move_shards(move, idempotency_key="move")
            again = await fleet.move_shards(move, idempotency_key="move")
            await fleet.set_service_weight(
                ServiceWeightChange(region="east", service="cache", weight=0.0),
                idempotency_key="cache",
            )
            after = await fleet.topology()
        assert first.detail["moved"] == east
        assert again.audit_seq == first.audit_seq  # the replay, not a second move
        assert {s.primary for s in after.shards if s.id in east} == {"west"}
        assert after.service_weights["east/cache"] == 0.0
        assert after.service_weights["east/web"] == 1.0  # HAProxy's own, read live

    async def test_a_running_batch_job_takes_its_share_of_connections(self, served: Served) -> None:
        full = server_maxconn(lab_config(internal=True), "east", "web")
        tiny = server_maxconn(lab_config(internal=True), "tiny", "web")
        assert await web_limits(served) == {"east": full, "west": full, "tiny": tiny}
        async with HttpFleet(served.url) as fleet:
            start = BatchJobAction(job="reindex", action="start")
            await fleet.batch_job(start, idempotency_key="start")
            await fleet.batch_job(start, idempotency_key="start")
            running = await web_limits(served)
            jobs = (await fleet.topology()).batch_jobs
            await fleet.batch_job(
                BatchJobAction(job="reindex", action="stop"), idempotency_key="stop"
            )
            stopped = await web_limits(served)
        assert [(j.name, j.running) for j in jobs] == [("reindex", True)]
        assert running == {"east": round(full * 0.5), "west": full, "tiny": tiny}
        assert stopped == {"east": full, "west": full, "tiny": tiny}


class TestTraining:
    """The lab's GPU cluster is served beside HAProxy, as by the Python lab: a training job
    starts on a host, checkpoints and stops through the fleet contract."""

    async def test_a_job_runs_checkpoints_and_stops(self, served: Served) -> None:
        async with HttpFleet(served.url) as fleet:
            cluster = await fleet.training_cluster()
            host = next(h.name for h in cluster.hosts if h.region == "east")
            await fleet.start_training_job(
                StartJobRequest(job="tiny-job", hosts=[host]), idempotency_key="start"
            )
            deadline = time.monotonic() + 60
            while not (await fleet.training_checkpoints("tiny-job")).checkpoints:
                assert time.monotonic() < deadline, "no checkpoint within 60 s"
                await asyncio.sleep(0.5)
            await fleet.stop_training_job("tiny-job", idempotency_key="stop")
            job = next(
                j for j in (await fleet.training_cluster()).jobs if j.spec.name == "tiny-job"
            )
        assert {h.region for h in cluster.hosts} == {"east", "west", "tiny"}
        assert job.state == JobState.STOPPED
        assert job.step >= 10


class TestTraffic:
    """``orchestrator lab traffic`` finds the PoP frontends and its Locust users go through
    HAProxy: every request is counted by HAProxy, at its PoP and at a region."""

    def test_locust_traffic_goes_through_haproxy(self, served: Served) -> None:
        done = sp.run(
            [
                sys.executable,
                "-c",
                "from orchestrator.cli import app; app()",
                "lab",
                "traffic",
                "--rps",
                "10",
                "--duration",
                "5",
                "--lab",
                served.url,
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        answer = httpx.get(f"{served.url}/v1/health", params={"window_s": 60}, timeout=10)
        health = HealthReport.model_validate(answer.json())
        pops = {p.pop: p for p in health.pops}
        assert sum(p.samples for p in pops.values()) >= 20
        # p1's regions have room; p2 sends its share to the one-slot region, which refuses some
        assert pops["p1"].samples > 0
        assert pops["p1"].error_rate == 0.0
        assert sum(r.samples for r in health.regions) == sum(p.samples for p in pops.values())

    def test_several_locust_processes_share_the_rate(self, served: Served) -> None:
        """``--processes 2``: Locust's workers each run half the users, and together
        offer the asked rate (one process tops out at a few hundred rps of CPU)."""
        done = sp.run(
            [
                sys.executable,
                "-c",
                "from orchestrator.cli import app; app()",
                "lab",
                "traffic",
                "--rps",
                "20",
                "--duration",
                "6",
                "--processes",
                "2",
                "--lab",
                served.url,
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert "in 2 process(es)" in done.stdout.decode()
        answer = httpx.get(f"{served.url}/v1/health", params={"window_s": 60}, timeout=10)
        health = HealthReport.model_validate(answer.json())
        total = sum(p.samples for p in health.pops)
        # 20 rps for 6 s is 120; one worker's half of the users could send 60 at most
        assert total >= 80
        assert sum(r.samples for r in health.regions) == total


class TestPrometheusTargets:
    """/healthz tells the user what a Prometheus scrapes, and the scrape config is written."""

    def test_healthz_names_the_scrape_config(self, served: Served) -> None:
        prom = served.info["prometheus"]
        config = yaml.safe_load(Path(prom["config"]).read_text())
        jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in config["scrape_configs"]}
        assert jobs == prom["targets"]
        assert f"http://{jobs['haproxy'][0]}/metrics" == served.info["haproxy_metrics"]
        assert len(jobs["lab-regions"]) == 3
        for target in jobs["lab-regions"]:
            assert (
                "lab_region_request_duration_seconds_bucket"
                in httpx.get(f"http://{target}/metrics").text
            )


class TestStop:
    """SIGTERM to the command stops HAProxy and every region backend with it."""

    def test_no_process_outlives_the_lab(self, served: Served) -> None:
        pids = [pid for pid in served.info["pids"].values() if pid]
        assert len(pids) == 4  # HAProxy and three region backends
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(30) == 0
        assert wait_until(lambda: not any(group_alive(p) for p in pids), timeout_s=10)
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
