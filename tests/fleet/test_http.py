"""HttpFleet against the real lab server, and its error mapping."""

from __future__ import annotations

import socket

import httpx
import pytest

from orchestrator.exceptions import (
    FleetNotFound,
    FleetRejected,
    FleetUnauthorized,
    FleetUnavailable,
    InvalidRequest,
    VersionConflict,
)
from orchestrator.fleet import Fleet, HttpFleet
from orchestrator.models import (
    BatchJobAction,
    ConfigChange,
    RoutingWrite,
    ServiceWeightChange,
    ShardMove,
)
from tests.fixtures.lab import LabFactory, RunningLab
from tests.fixtures.ports import free_port


class TestAgainstTheLab:
    """Every Fleet method round-trips through the lab and parses into the shared models."""

    async def test_reads(self, lab_fleet: HttpFleet) -> None:
        assert isinstance(lab_fleet, Fleet)
        topology = await lab_fleet.topology()
        routing = await lab_fleet.routing()
        health = await lab_fleet.health(window_s=5)
        assert [r.name for r in topology.regions] == ["us-east", "us-west", "eu-west"]
        assert set(routing.fractions) == {p.name for p in topology.pops}
        assert routing.buckets is not None and len(routing.buckets["nyc"]) == 1024
        assert health.window_s == 5
        assert (await lab_fleet.routing(include_buckets=False)).buckets is None

    async def test_mutations_are_applied_once_and_audited(
        self, lab_fleet: HttpFleet, lab_server: RunningLab
    ) -> None:
        start = len(await lab_fleet.audit())
        routing = await lab_fleet.routing()
        write = RoutingWrite(fractions=routing.fractions, reason="client test")
        table = await lab_fleet.write_routing(
            write, if_match=routing.version, idempotency_key="c-r"
        )
        again = await lab_fleet.write_routing(
            write, if_match=routing.version, idempotency_key="c-r"
        )
        assert table == again and table.version == routing.version + 1
        results = [
            await lab_fleet.set_service_weight(
                ServiceWeightChange(region="eu-west", service="web", weight=0.8),
                idempotency_key="c-w",
            ),
            await lab_fleet.move_shards(
                ShardMove(shards=["kv-0000"], to_region="us-west"), idempotency_key="c-s"
            ),
            await lab_fleet.batch_job(
                BatchJobAction(job="log-compaction", action="start"), idempotency_key="c-b"
            ),
            await lab_fleet.change_config(
                ConfigChange(path="edge/limits.yaml", content="rps: 10"), idempotency_key="c-c"
            ),
        ]
        replay = await lab_fleet.move_shards(
            ShardMove(shards=["kv-0000"], to_region="us-west"), idempotency_key="c-s"
        )
        assert replay == results[1]
        assert [r.kind for r in results] == ["service-weight", "shard-move", "batch-job", "config"]
        audit = await lab_fleet.audit(since_seq=start)
        keys = [e.idempotency_key for e in audit]
        assert keys == ["c-r", "c-w", "c-s", "c-b", "c-c"]
        topology = await lab_fleet.topology()
        assert topology.service_weights["eu-west/web"] == 0.8
        assert next(s for s in topology.shards if s.id == "kv-0000").primary == "us-west"
        # put the shared lab back
        await lab_fleet.set_service_weight(
            ServiceWeightChange(region="eu-west", service="web", weight=1.0), idempotency_key="c-w2"
        )
        await lab_fleet.batch_job(
            BatchJobAction(job="log-compaction", action="stop"), idempotency_key="c-b2"
        )

    async def test_errors_map_to_exceptions(self, lab_fleet: HttpFleet) -> None:
        routing = await lab_fleet.routing()
        write = RoutingWrite(fractions=routing.fractions)
        with pytest.raises(VersionConflict) as conflict:
            await lab_fleet.write_routing(write, if_match=routing.version - 1, idempotency_key="e1")
        assert conflict.value.status == 409 and "version" in conflict.value.reason
        with pytest.raises(InvalidRequest) as invalid:
            await lab_fleet.set_service_weight(
                ServiceWeightChange(region="mars", service="web", weight=0.5),
                idempotency_key="e2",
            )
        assert invalid.value.status == 422 and "region" in invalid.value.reason
        with pytest.raises(InvalidRequest):
            await lab_fleet.health(window_s=10_000)

    async def test_injected_api_faults(self, lab_server: RunningLab, lab_fleet: HttpFleet) -> None:
        async with lab_server.http() as control:
            await control.post("/lab/faults", json={"api_error_rate": 1.0})
            with pytest.raises(FleetUnavailable) as failed:
                await lab_fleet.topology()
            await control.post("/lab/faults", json={"api_hang_rate": 1.0, "api_hang_s": 1.5})
            quick = HttpFleet(lab_server.url, timeout=0.3)
            try:
                with pytest.raises(FleetUnavailable, match="timed out"):
                    await quick.topology()
            finally:
                await quick.aclose()
        assert failed.value.status == 500 and failed.value.retryable

    async def test_token(self, start_lab: LabFactory) -> None:
        lab = await start_lab(mode="model", token="tok-123456")
        with pytest.raises(FleetUnauthorized) as denied:
            await lab.fleet(token=None).topology()
        assert denied.value.status == 401
        assert "tok-123456" not in str(denied.value)
        assert (await lab.fleet().topology()).regions


def _fleet_answering(status: int, body: object | None = None) -> HttpFleet:
    def handler(_request: httpx.Request) -> httpx.Response:
        if body is None:
            return httpx.Response(status, text="plain")
        return httpx.Response(status, json=body)

    return HttpFleet("https://fleet.example", transport=httpx.MockTransport(handler))


class TestMapping:
    """Statuses map onto the exception hierarchy, carrying status and server reason."""

    @pytest.mark.parametrize(
        ("status", "expected"),
        [
            (400, FleetRejected),
            (401, FleetUnauthorized),
            (403, FleetUnauthorized),
            (404, FleetNotFound),
            (409, VersionConflict),
            (422, InvalidRequest),
            (428, FleetRejected),
            (500, FleetUnavailable),
            (503, FleetUnavailable),
        ],
    )
    async def test_status(self, status: int, expected: type[Exception]) -> None:
        fleet = _fleet_answering(status, {"error": "X", "reason": "because", "field": "f"})
        with pytest.raises(expected) as caught:
            await fleet.topology()
        await fleet.aclose()
        assert type(caught.value) is expected
        assert caught.value.status == status  # type: ignore[attr-defined]
        assert caught.value.reason == "because (field f)"  # type: ignore[attr-defined]

    async def test_non_json_error_body(self) -> None:
        fleet = _fleet_answering(502)
        with pytest.raises(FleetUnavailable) as caught:
            await fleet.routing()
        await fleet.aclose()
        assert caught.value.status == 502

    async def test_contract_breaking_answer_is_unavailable(self) -> None:
        fleet = _fleet_answering(200, {"not": "a topology"})
        with pytest.raises(FleetUnavailable, match="contract"):
            await fleet.topology()
        await fleet.aclose()

    async def test_connection_refused(self) -> None:
        fleet = HttpFleet(f"http://127.0.0.1:{free_port()}", timeout=1.0)
        with pytest.raises(FleetUnavailable) as caught:
            await fleet.topology()
        await fleet.aclose()
        assert caught.value.status == 0

    async def test_headers_sent(self) -> None:
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(
                200,
                json={"version": 4, "fractions": {"p": {"r": 1.0}}},
            )

        fleet = HttpFleet(
            "https://fleet.example", token="abc", transport=httpx.MockTransport(handler)
        )
        await fleet.write_routing(
            RoutingWrite(fractions={"p": {"r": 1.0}}), if_match=3, idempotency_key="k-1"
        )
        await fleet.aclose()
        request = seen[0]
        assert request.method == "PUT" and request.url.path == "/v1/routing"
        assert request.headers["If-Match"] == "3"
        assert request.headers["Idempotency-Key"] == "k-1"
        assert request.headers["Authorization"] == "Bearer abc"
        assert "abc" not in repr(fleet)

    async def test_empty_key_is_refused_locally(self) -> None:
        fleet = _fleet_answering(200, {})
        with pytest.raises(ValueError, match="idempotency_key"):
            await fleet.batch_job(BatchJobAction(job="j", action="stop"), idempotency_key=" ")
        await fleet.aclose()

    async def test_tls_verification_is_on_by_default(self) -> None:
        fleet = HttpFleet("https://fleet.example")
        pool = fleet._client._transport._pool  # type: ignore[attr-defined]
        await fleet.aclose()
        assert pool._ssl_context.verify_mode.name == "CERT_REQUIRED"


@pytest.mark.server  # a local HTTP server
class TestSecretsStayOutOfErrors:
    """A token HTTP cannot carry is refused without showing it, and a header the HTTP
    library rejects is reported without quoting the header (its value may be a secret)."""

    @pytest.mark.parametrize("token", ["tok-3f9a\n", "tok\x013f9a", "tok-\u00e93f9a"])
    def test_unsendable_token_is_refused_by_name(self, token: str) -> None:
        with pytest.raises(ValueError, match="^token: ") as caught:
            HttpFleet("http://127.0.0.1:1", token=token)
        assert "3f9a" not in str(caught.value)

    async def test_rejected_header_is_not_quoted(self) -> None:
        secret = "hdr-secret-77e1"
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            fleet = HttpFleet(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=5.0)
            with pytest.raises(FleetRejected) as caught:
                await fleet.batch_job(
                    BatchJobAction(job="j", action="stop"), idempotency_key=f"k\n{secret}"
                )
            await fleet.aclose()
        assert "could not be sent" in str(caught.value)
        assert secret not in str(caught.value) and secret not in caught.value.reason


class TestReadRetries:
    """Reads are retried through a flaky API; mutations never are (their activity retries)."""

    @staticmethod
    def flaky(failures: int, calls: list[str]) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            calls.append(request.method)
            if len(calls) <= failures:
                return httpx.Response(500, json={"reason": "injected"})
            if request.method == "GET":
                return httpx.Response(200, json={"ok": True})
            return httpx.Response(200, json={"applied": True, "idempotency_key": "k"})

        return httpx.MockTransport(handler)

    async def test_get_retried_until_it_answers(self) -> None:
        calls: list[str] = []
        fleet = HttpFleet("http://lab", transport=self.flaky(2, calls), read_attempts=3)
        response = await fleet._call("GET", "/topology")
        assert response.json() == {"ok": True} and calls == ["GET"] * 3
        await fleet.aclose()

    async def test_get_gives_up_after_its_attempts(self) -> None:
        calls: list[str] = []
        fleet = HttpFleet("http://lab", transport=self.flaky(5, calls), read_attempts=2)
        with pytest.raises(FleetUnavailable):
            await fleet._call("GET", "/topology")
        assert calls == ["GET", "GET"]
        await fleet.aclose()

    async def test_mutation_tried_once(self) -> None:
        calls: list[str] = []
        fleet = HttpFleet("http://lab", transport=self.flaky(1, calls))
        with pytest.raises(FleetUnavailable):
            await fleet.set_service_weight(
                ServiceWeightChange(region="eu-west", service="web", weight=0.5),
                idempotency_key="once",
            )
        assert calls == ["POST"]
        await fleet.aclose()
