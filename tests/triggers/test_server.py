"""The HTTP surface over an in-memory starter: auth, 422s, responses, dedup and cooldown logic."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from orchestrator.triggers.auth import SIGNATURE_HEADER, sign
from orchestrator.triggers.cooldown import utcnow
from tests.triggers.conftest import AUTH, MemoryStarter, asgi_client, make_app
from tests.triggers.payloads import HMAC_SECRET, alert, notification, runbook

URL = "/v1/alerts/alertmanager"


class TestAuthentication:
    """Anything but the right bearer token or body signature gets 401 and starts nothing."""

    async def test_missing_wrong_bearer_and_wrong_hmac_are_401(self) -> None:
        starter = MemoryStarter()
        body = json.dumps(notification(alert(region="eu-west"))).encode()
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            for headers in (
                {},
                {"Authorization": "Bearer wrong-token-0123456789"},
                {"Authorization": "Basic dXNlcjpwYXNz"},
                {SIGNATURE_HEADER: sign(HMAC_SECRET, body + b"\n")},
                {SIGNATURE_HEADER: sign("another-secret-0123456789", body)},
            ):
                response = await http.post(URL, content=body, headers=headers)
                assert response.status_code == 401, headers
            manual = await http.post(
                "/v1/runbooks/drain/runs", json={"parameters": {"region": "x"}}
            )
            assert manual.status_code == 401
        assert starter.started == []

    async def test_unauthenticated_malformed_body_is_401_not_422(self) -> None:
        async with asgi_client(make_app([runbook("drain")], MemoryStarter())) as http:
            response = await http.post(URL, content=b"{not json")
        assert response.status_code == 401

    async def test_signed_body_is_accepted(self) -> None:
        starter = MemoryStarter()
        body = json.dumps(notification(alert(region="eu-west"))).encode()
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            response = await http.post(
                URL, content=body, headers={SIGNATURE_HEADER: sign(HMAC_SECRET, body)}
            )
        assert response.status_code == 200
        assert len(starter.started) == 1


class TestMalformed:
    """A payload that does not fit Alertmanager's format gets 422 naming the field."""

    async def test_422_names_the_field(self) -> None:
        body = notification(alert(region="eu-west"))
        body["alerts"][0]["status"] = "pending"
        async with asgi_client(make_app([runbook("drain")], MemoryStarter())) as http:
            response = await http.post(URL, json=body, headers=AUTH)
            not_json = await http.post(URL, content=b"{", headers=AUTH)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "alerts", 0, "status"]
        assert not_json.status_code == 422


class TestResponse:
    """The answer lists, per alert, what was started, deduplicated or ignored and why."""

    async def test_outcomes_per_alert(self) -> None:
        starter = MemoryStarter()
        body = notification(
            alert(region="eu-west", instance="a"),
            alert(region="eu-west", instance="b"),  # same group, same parameters
            alert(region="eu-west", max_pct="lots"),  # a label that does not fit
            alert(alertname="DiskFull", region="eu-west"),  # no trigger for it
        )
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            response = await http.post(URL, json=body, headers=AUTH)
        assert response.status_code == 200
        results = response.json()["results"]
        assert [r["outcome"] for r in results] == ["started", "deduplicated", "ignored", "ignored"]
        assert results[0]["workflow_id"] == results[1]["workflow_id"]
        assert results[0]["run_id"] == results[1]["run_id"] and results[0]["run_id"]
        assert "max_pct" in results[2]["reason"]
        assert "DiskFull" in results[3]["reason"]
        assert response.json()["counts"] == {"started": 1, "deduplicated": 1, "ignored": 2}
        assert len(starter.started) == 1
        started = starter.started[0]
        assert started.region == "eu-west"
        assert started.input.parameters == {"region": "eu-west", "max_pct": 50}
        assert started.input.trigger is not None and started.input.trigger.key == body["groupKey"]
        assert started.input.requested_by == "alertmanager:orchestrator"

    async def test_temporal_failure_is_503_so_alertmanager_retries(self) -> None:
        starter = MemoryStarter(fail=True)
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            response = await http.post(
                URL, json=notification(alert(region="eu-west")), headers=AUTH
            )
        assert response.status_code == 503
        assert response.json()["results"][0]["outcome"] == "failed"

    async def test_healthz(self) -> None:
        async with asgi_client(make_app([runbook("drain")], MemoryStarter())) as http:
            response = await http.get("/healthz")
        assert response.json() == {"status": "ok", "runbooks": ["drain"]}


class TestCooldown:
    """No second run of a runbook within its cooldown, even under concurrent requests."""

    async def test_concurrent_groups_start_one_run(self) -> None:
        starter = MemoryStarter(delay_s=0.02)  # widen the window a racy check would lose
        app = make_app([runbook("drain", cooldown="10m")], starter)
        async with asgi_client(app) as http:
            responses = await asyncio.gather(
                *(
                    http.post(
                        URL,
                        json=notification(alert(region=f"r{i}"), group_key=f"g{i}"),
                        headers=AUTH,
                    )
                    for i in range(20)
                )
            )
        outcomes = [r.json()["results"][0]["outcome"] for r in responses]
        assert outcomes.count("started") == 1
        assert outcomes.count("ignored") == 19
        ignored = next(
            r.json()["results"][0]
            for r in responses
            if r.json()["results"][0]["outcome"] == "ignored"
        )
        assert ignored["reason"].startswith("cooldown:")
        assert len(starter.started) == 1

    async def test_restart_reads_the_last_start_from_the_starter(self) -> None:
        starter = MemoryStarter()
        starter.history["drain"] = utcnow() - timedelta(minutes=5)
        async with asgi_client(make_app([runbook("drain", cooldown="10m")], starter)) as http:
            held = await http.post(URL, json=notification(alert(region="a")), headers=AUTH)
        assert held.json()["results"][0]["outcome"] == "ignored"
        starter.history["drain"] = utcnow() - timedelta(minutes=11)
        async with asgi_client(make_app([runbook("drain", cooldown="10m")], starter)) as http:
            free = await http.post(URL, json=notification(alert(region="a")), headers=AUTH)
        assert free.json()["results"][0]["outcome"] == "started"

    async def test_open_run_of_the_same_group_reads_as_deduplicated(self) -> None:
        starter = MemoryStarter()
        body = notification(alert(region="a"))
        async with asgi_client(make_app([runbook("drain", cooldown="10m")], starter)) as http:
            first = await http.post(URL, json=body, headers=AUTH)
            again = await http.post(URL, json=body, headers=AUTH)
        assert first.json()["results"][0]["outcome"] == "started"
        second = again.json()["results"][0]
        assert second["outcome"] == "deduplicated"
        assert second["run_id"] == first.json()["results"][0]["run_id"]

    async def test_manual_start_counts_toward_the_cooldown(self) -> None:
        starter = MemoryStarter()
        async with asgi_client(make_app([runbook("drain", cooldown="10m")], starter)) as http:
            manual = await http.post(
                "/v1/runbooks/drain/runs", json={"parameters": {"region": "a"}}, headers=AUTH
            )
            alerted = await http.post(URL, json=notification(alert(region="b")), headers=AUTH)
        assert manual.status_code == 201
        assert alerted.json()["results"][0]["outcome"] == "ignored"


class TestManualStart:
    """POST /v1/runbooks/{name}/runs validates parameters against the runbook's."""

    async def test_bad_parameters_are_422_naming_each(self) -> None:
        starter = MemoryStarter()
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            response = await http.post(
                "/v1/runbooks/drain/runs",
                json={"parameters": {"max_pct": "many", "colour": "red"}},
                headers=AUTH,
            )
            bad_field = await http.post(
                "/v1/runbooks/drain/runs", json={"params": {}}, headers=AUTH
            )
        assert response.status_code == 422
        locs = {tuple(e["loc"]) for e in response.json()["detail"]}
        assert locs == {
            ("body", "parameters", "colour"),
            ("body", "parameters", "max_pct"),
            ("body", "parameters", "region"),
        }
        assert bad_field.status_code == 422
        assert bad_field.json()["detail"][0]["loc"] == ["body", "params"]
        assert starter.started == []

    async def test_unknown_runbook_is_404(self) -> None:
        async with asgi_client(make_app([runbook("drain")], MemoryStarter())) as http:
            response = await http.post("/v1/runbooks/nope/runs", json={}, headers=AUTH)
        assert response.status_code == 404
        assert "drain" in response.json()["detail"]

    async def test_idempotency_key_returns_the_open_run(self) -> None:
        starter = MemoryStarter()
        body = {
            "parameters": {"region": "eu-west"},
            "idempotency_key": "ticket-42",
            "mode": "drill",
        }
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            first = await http.post("/v1/runbooks/drain/runs", json=body, headers=AUTH)
            again = await http.post("/v1/runbooks/drain/runs", json=body, headers=AUTH)
        assert (first.status_code, again.status_code) == (201, 200)
        assert first.json()["workflow_id"] == again.json()["workflow_id"]
        assert first.json()["mode"] == "drill"
        assert first.json()["parameters"] == {"region": "eu-west", "max_pct": 50}
        assert len(starter.started) == 1
