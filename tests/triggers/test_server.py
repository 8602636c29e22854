"""The HTTP surface over an in-memory starter: auth, 422s, responses, dedup and cooldown logic."""

from __future__ import annotations

import asyncio
import json
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from orchestrator.triggers.auth import SIGNATURE_HEADER, signature_headers
from orchestrator.triggers.cooldown import utcnow
from orchestrator.triggers.rules import parameters_key
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
                signature_headers(HMAC_SECRET, body + b"\n"),
                signature_headers("another-secret-0123456789", body),
                {SIGNATURE_HEADER: signature_headers(HMAC_SECRET, body)[SIGNATURE_HEADER]},
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
                URL, content=body, headers=signature_headers(HMAC_SECRET, body)
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

    async def test_healthz_names_runbooks_only_to_the_authenticated(self) -> None:
        async with asgi_client(make_app([runbook("drain")], MemoryStarter())) as http:
            anonymous = await http.get("/healthz")
            wrong = await http.get("/healthz", headers={"Authorization": "Bearer nope"})
            known = await http.get("/healthz", headers=AUTH)
        assert anonymous.status_code == wrong.status_code == 200
        assert anonymous.json() == wrong.json() == {"status": "ok"}
        assert known.json() == {"status": "ok", "runbooks": ["drain"]}


class TestCooldown:
    """No second run of a runbook with the same parameters within its cooldown, even under
    concurrent requests; other parameters (another region) are not held back."""

    async def test_concurrent_groups_start_one_run(self) -> None:
        starter = MemoryStarter(delay_s=0.02)  # widen the window a racy check would lose
        app = make_app([runbook("drain", cooldown="10m")], starter)
        async with asgi_client(app) as http:
            responses = await asyncio.gather(
                *(
                    http.post(
                        URL,
                        json=notification(alert(region="eu-west", pod=f"p{i}"), group_key=f"g{i}"),
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
        assert ignored["code"] == "cooldown"
        assert len(starter.started) == 1

    async def test_another_region_is_not_held_back(self) -> None:
        starter = MemoryStarter()
        app = make_app([runbook("drain", cooldown="10m")], starter)
        async with asgi_client(app) as http:
            eu = await http.post(
                URL, json=notification(alert(region="eu-west"), group_key="a"), headers=AUTH
            )
            us = await http.post(
                URL, json=notification(alert(region="us-west"), group_key="b"), headers=AUTH
            )
            eu_again = await http.post(
                URL, json=notification(alert(region="eu-west"), group_key="c"), headers=AUTH
            )
        outcomes = [r.json()["results"][0]["outcome"] for r in (eu, us, eu_again)]
        assert outcomes == ["started", "started", "ignored"]
        assert [s.region for s in starter.started] == ["eu-west", "us-west"]

    async def test_restart_reads_the_last_start_from_the_starter(self) -> None:
        starter = MemoryStarter()
        key = ("drain", parameters_key({"region": "a", "max_pct": 50}))
        starter.history[key] = utcnow() - timedelta(minutes=5)
        async with asgi_client(make_app([runbook("drain", cooldown="10m")], starter)) as http:
            held = await http.post(URL, json=notification(alert(region="a")), headers=AUTH)
            other = await http.post(
                URL, json=notification(alert(region="b"), group_key="b"), headers=AUTH
            )
        assert held.json()["results"][0]["outcome"] == "ignored"
        assert other.json()["results"][0]["outcome"] == "started"
        starter.history[key] = utcnow() - timedelta(minutes=11)
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
            same = await http.post(URL, json=notification(alert(region="a")), headers=AUTH)
            other = await http.post(
                URL, json=notification(alert(region="b"), group_key="b"), headers=AUTH
            )
        assert manual.status_code == 201
        assert same.json()["results"][0]["outcome"] == "ignored"
        assert other.json()["results"][0]["outcome"] == "started"


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


class TestOneRunPerEpisode:
    """A still-firing group re-sent by Alertmanager never starts a second run, even after
    the first closed; a group that resolved and fires again starts a new one."""

    async def test_repeats_after_the_run_closed_start_nothing(self) -> None:
        starter = MemoryStarter()
        firing = notification(alert(region="eu-west"))
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            first = (await http.post(URL, json=firing, headers=AUTH)).json()["results"][0]
            starter.close(first["workflow_id"])
            repeats = [
                (await http.post(URL, json=firing, headers=AUTH)).json()["results"][0]
                for _ in range(3)
            ]
        assert first["outcome"] == "started"
        assert [r["outcome"] for r in repeats] == ["deduplicated"] * 3
        assert all(r["code"] == "duplicate" for r in repeats)
        assert {r["run_id"] for r in repeats} == {first["run_id"]}
        assert len(starter.started) == 1

    async def test_a_restarted_server_does_not_start_a_closed_episode_again(self) -> None:
        starter = MemoryStarter()
        firing = notification(alert(region="eu-west"))
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            first = (await http.post(URL, json=firing, headers=AUTH)).json()["results"][0]
        starter.close(first["workflow_id"])
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            again = (await http.post(URL, json=firing, headers=AUTH)).json()["results"][0]
        assert again["outcome"] == "deduplicated"
        assert starter.started[0].once
        assert len(starter.started) == 1

    async def test_resolved_then_firing_again_starts_a_second_run(self) -> None:
        starter = MemoryStarter()
        later = "2024-05-01T11:00:00.000Z"
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            first = await http.post(URL, json=notification(alert(region="a")), headers=AUTH)
            resolved = alert("resolved", region="a", ends_at="2024-05-01T10:30:00Z")
            signalled = await http.post(URL, json=notification(resolved), headers=AUTH)
            refired = notification(alert(region="a", starts_at=later))
            second = await http.post(URL, json=refired, headers=AUTH)
            repeat = await http.post(URL, json=refired, headers=AUTH)
        outcomes = [r.json()["results"][0]["outcome"] for r in (first, signalled, second, repeat)]
        assert outcomes == ["started", "signalled", "started", "deduplicated"]
        ids = [r.json()["results"][0]["workflow_id"] for r in (first, second)]
        assert ids[0] != ids[1] and ids[1].endswith("-20240501T110000.000Z")
        assert len(starter.started) == 2

    async def test_a_group_whose_first_alert_resolved_keeps_its_run(self) -> None:
        starter = MemoryStarter()
        a = alert(region="a", pod="1")
        b = alert(region="a", pod="2", starts_at="2024-05-01T10:05:00.000Z")
        a_resolved = alert("resolved", region="a", pod="1", ends_at="2024-05-01T10:07:00Z")
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            for body in (notification(a), notification(a, b), notification(a_resolved, b)):
                await http.post(URL, json=body, headers=AUTH)
            starter.close(starter.started[0].workflow_id)
            only_b = await http.post(URL, json=notification(b), headers=AUTH)
        assert only_b.json()["results"][0]["outcome"] == "deduplicated"
        assert len(starter.started) == 1


class TestAccounting:
    """Every alert is counted by outcome and reason on /metrics, and every one that starts
    nothing is logged with its reason."""

    async def test_metrics_count_each_outcome(self) -> None:
        starter = MemoryStarter()
        body = notification(
            alert(region="eu-west"),
            alert(alertname="DiskFull", region="eu-west"),
            alert(region="eu-west", max_pct="lots"),
        )
        app = make_app([runbook("drain")], starter)
        async with asgi_client(app) as http:
            await http.post(URL, json=body, headers=AUTH)
            await http.post(URL, json=body, headers=AUTH)
            anonymous = await http.get("/metrics")
            scraped = await http.get("/metrics", headers=AUTH)
        assert anonymous.status_code == 401
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain")
        samples = {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in scraped.text.splitlines()
            if line.startswith("orchestrator_alerts_total")
        }
        assert samples == {
            'orchestrator_alerts_total{outcome="started",reason="",runbook="drain"}': 1,
            'orchestrator_alerts_total{outcome="deduplicated",reason="duplicate",runbook="drain"}': 1,
            'orchestrator_alerts_total{outcome="ignored",reason="no_rule",runbook=""}': 2,
            'orchestrator_alerts_total{outcome="ignored",reason="bad_label",runbook="drain"}': 2,
        }
        assert 'orchestrator_trigger_requests_refused_total{reason="unauthenticated"} 1.0' in (
            scraped.text
        )

    @pytest.mark.server  # promtool, a process
    async def test_metrics_pass_promtool(self) -> None:
        app = make_app([runbook("drain", cooldown="1h")], MemoryStarter())
        async with asgi_client(app) as http:
            for region in ("a", "a", "b"):
                body = notification(alert(region=region), group_key=region)
                await http.post(URL, json=body, headers=AUTH)
            text = (await http.get("/metrics", headers=AUTH)).text
        returncode, output = await asyncio.to_thread(_promtool_check, text)
        assert returncode == 0 and output == "", output

    async def test_every_alert_that_starts_nothing_is_logged_with_its_reason(self) -> None:
        starter = MemoryStarter()
        app = make_app([runbook("drain", cooldown="1h")], starter)
        async with asgi_client(app) as http:
            with capture_logs() as logs:
                await http.post(URL, json=notification(alert(region="a")), headers=AUTH)
                await http.post(URL, json=notification(alert(region="a")), headers=AUTH)
                held = notification(alert(region="a", pod="2"), group_key="other")
                await http.post(URL, json=held, headers=AUTH)
                await http.post(URL, json=notification(alert(alertname="X")), headers=AUTH)
                gone = alert("resolved", region="z", ends_at="2024-05-01T10:01:00Z")
                await http.post(URL, json=notification(gone, group_key="z"), headers=AUTH)
        nothing = [e for e in logs if e["event"] == "alert started nothing"]
        assert [e["code"] for e in nothing] == ["duplicate", "cooldown", "no_rule", "no_open_run"]
        assert all(e["reason"] for e in nothing)
        assert nothing[1]["reason"].startswith("cooldown: drain")


class TestLabelLimits:
    """Labels Temporal could never accept are refused with a 4xx naming the field, and
    logged; alerts that fit in the same notification still start."""

    async def test_a_huge_label_is_422_not_503(self) -> None:
        starter = MemoryStarter()
        body = notification(alert(region="eu-west", blob="x" * 100_000))
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            with capture_logs() as logs:
                response = await http.post(URL, json=body, headers=AUTH)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "alerts", 0, "labels", "blob"]
        assert "100000 bytes" in response.json()["detail"][0]["msg"]
        assert response.json()["results"][0]["outcome"] == "refused"
        assert starter.started == []
        assert [e["code"] for e in logs if e["event"] == "alert started nothing"] == ["oversize"]

    async def test_a_region_label_past_a_search_attribute_is_refused(self) -> None:
        starter = MemoryStarter()
        body = notification(alert(region="r" * 3000))
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            response = await http.post(URL, json=body, headers=AUTH)
        assert response.status_code == 422
        assert starter.started == []

    async def test_a_huge_label_of_one_alert_does_not_hold_back_the_others(self) -> None:
        starter = MemoryStarter()
        body = notification(
            alert(region="eu-west", blob="x" * 1_500_000), alert(region="us-west"), group_key="g"
        )
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            response = await http.post(URL, json=body, headers=AUTH)
        assert response.status_code == 200
        assert [r["outcome"] for r in response.json()["results"]] == ["refused", "started"]
        assert [s.region for s in starter.started] == ["us-west"]


class TestRegionNames:
    """A region that is not a region name (``..``) starts nothing, by alert or by hand."""

    async def test_dot_dot_is_refused(self) -> None:
        starter = MemoryStarter()
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            alerted = await http.post(URL, json=notification(alert(region="..")), headers=AUTH)
            manual = await http.post(
                "/v1/runbooks/drain/runs", json={"parameters": {"region": ".."}}, headers=AUTH
            )
        result = alerted.json()["results"][0]
        assert result["outcome"] == "ignored" and "not a region name" in result["reason"]
        assert manual.status_code == 422
        assert manual.json()["detail"][0]["loc"] == ["body", "parameters", "region"]
        assert starter.started == []


PROMTOOL = Path("/usr/bin/promtool")


def _promtool_check(exposition: str) -> tuple[int, str]:
    assert PROMTOOL.is_file(), "run scripts/install-system-deps.sh (make test does)"
    checked = subprocess.run(
        [str(PROMTOOL), "check", "metrics"], input=exposition, capture_output=True, text=True
    )
    return checked.returncode, checked.stdout + checked.stderr
