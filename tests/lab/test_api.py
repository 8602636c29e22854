"""The lab's fleet API (v1) over real HTTP: idempotency, versions, validation, faults, auth."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.lab.config import load_config
from orchestrator.policy.rebalance.buckets import churn, min_churn
from tests.fixtures.lab import LabFactory, RunningLab


def _even(lab_pops: list[str], regions: list[str]) -> dict[str, dict[str, float]]:
    return {p: {r: 1.0 / len(regions) for r in regions} for p in lab_pops}


async def _current(client) -> tuple[int, dict]:  # type: ignore[no-untyped-def]
    response = await client.get("/v1/routing")
    assert response.status_code == 200
    return int(response.headers["ETag"]), response.json()


class TestIdempotency:
    """The same Idempotency-Key applies once, returns the first answer, and is logged once."""

    async def test_replayed_action_applies_once_with_the_same_answer(
        self, lab_server: RunningLab
    ) -> None:
        async with lab_server.http() as client:
            before = len((await client.get("/v1/audit")).json())
            body = {"job": "index-build", "action": "start"}
            headers = {"Idempotency-Key": "idem-batch-1"}
            first = await client.post("/v1/actions/batch-job", json=body, headers=headers)
            second = await client.post("/v1/actions/batch-job", json=body, headers=headers)
            audit = (await client.get("/v1/audit", params={"since_seq": before})).json()
            await client.post(
                "/v1/actions/batch-job",
                json={"job": "index-build", "action": "stop"},
                headers={"Idempotency-Key": "idem-batch-1-undo"},
            )
        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()
        assert second.headers.get("Idempotent-Replayed") == "true"
        keys = [e["idempotency_key"] for e in audit]
        assert keys.count("idem-batch-1") == 1
        assert first.json()["audit_seq"] == audit[0]["seq"]

    async def test_replayed_routing_write_returns_the_first_table(
        self, lab_server: RunningLab
    ) -> None:
        async with lab_server.http() as client:
            version, table = await _current(client)
            write = {"fractions": table["fractions"], "reason": "idempotency check"}
            headers = {"If-Match": str(version), "Idempotency-Key": "idem-routing-1"}
            first = await client.put("/v1/routing", json=write, headers=headers)
            second = await client.put("/v1/routing", json=write, headers=headers)
            after, _ = await _current(client)
        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()
        assert after == version + 1, "a replay must not bump the version again"

    async def test_same_key_with_a_different_body_is_refused(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            headers = {"Idempotency-Key": "idem-config-1"}
            ok = await client.post(
                "/v1/actions/config", json={"path": "a.conf", "content": "x"}, headers=headers
            )
            clash = await client.post(
                "/v1/actions/config", json={"path": "a.conf", "content": "y"}, headers=headers
            )
        assert ok.status_code == 200
        assert clash.status_code == 422
        assert clash.json()["field"] == "Idempotency-Key"

    async def test_mutation_without_a_key_is_rejected(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            response = await client.post(
                "/v1/actions/service-weight",
                json={"region": "us-east", "service": "web", "weight": 0.5},
            )
            version, table = await _current(client)
            put = await client.put(
                "/v1/routing",
                json={"fractions": table["fractions"]},
                headers={"If-Match": str(version)},
            )
        assert response.status_code == 400
        assert response.json() == {
            "error": "FleetRejected",
            "reason": response.json()["reason"],
            "field": "Idempotency-Key",
        }
        assert put.status_code == 400


class TestRoutingVersions:
    """Routing writes carry If-Match: a stale version gets 409, a missing one 428."""

    async def test_stale_version_conflicts(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            version, table = await _current(client)
            write = {"fractions": table["fractions"]}
            ok = await client.put(
                "/v1/routing",
                json=write,
                headers={"If-Match": str(version), "Idempotency-Key": "v-1"},
            )
            stale = await client.put(
                "/v1/routing",
                json=write,
                headers={"If-Match": str(version), "Idempotency-Key": "v-2"},
            )
        assert ok.status_code == 200
        assert ok.headers["ETag"] == str(version + 1)
        assert stale.status_code == 409
        assert stale.json()["error"] == "VersionConflict"
        assert str(version + 1) in stale.json()["reason"]

    async def test_missing_if_match_is_428(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            _, table = await _current(client)
            response = await client.put(
                "/v1/routing",
                json={"fractions": table["fractions"]},
                headers={"Idempotency-Key": "v-428"},
            )
        assert response.status_code == 428
        assert response.json()["field"] == "If-Match"

    async def test_server_derives_buckets_with_minimal_churn(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            version, table = await _current(client)
            pops = list(table["fractions"])
            target = {p: {"us-east": 0.5, "us-west": 0.3, "eu-west": 0.2} for p in pops}
            response = await client.put(
                "/v1/routing",
                json={"fractions": target},
                headers={"If-Match": str(version), "Idempotency-Key": "churn-1"},
            )
        assert response.status_code == 200
        after = response.json()["buckets"]
        for pop in pops:
            buckets = after[pop]
            assert len(buckets) == 1024
            assert buckets.count("us-east") == 512
            assert churn(table["buckets"][pop], buckets) == min_churn(
                table["buckets"][pop], target[pop]
            )


class TestValidation:
    """A bad body gets 422 naming the field and the reason."""

    @pytest.mark.parametrize(
        ("path", "body", "field"),
        [
            (
                "/v1/actions/service-weight",
                {"region": "us-east", "service": "web", "weight": 1.5},
                "weight",
            ),
            (
                "/v1/actions/service-weight",
                {"region": "mars", "service": "web", "weight": 0.5},
                "region",
            ),
            ("/v1/actions/service-weight", {"region": "us-east", "service": "web"}, "weight"),
            ("/v1/actions/shard-move", {"shards": [], "to_region": "us-east"}, "shards"),
            ("/v1/actions/shard-move", {"shards": ["nope"], "to_region": "us-east"}, "shards"),
            ("/v1/actions/batch-job", {"job": "index-build", "action": "pause"}, "action"),
            ("/v1/actions/config", {"path": "x", "content": "y", "extra": 1}, "extra"),
        ],
    )
    async def test_bad_action_bodies_name_the_field(
        self, lab_server: RunningLab, path: str, body: dict, field: str
    ) -> None:
        async with lab_server.http() as client:
            response = await client.post(
                path, json=body, headers={"Idempotency-Key": f"bad-{path}-{body}"}
            )
        assert response.status_code == 422
        error = response.json()
        assert error["error"] == "InvalidRequest"
        assert error["field"] == field
        assert error["reason"]

    async def test_routing_fractions_are_checked(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            version, table = await _current(client)
            pops = list(table["fractions"])
            headers = {"If-Match": str(version)}
            bad_sum = {p: {"us-east": 0.5} for p in pops}
            unknown_region = {p: {"atlantis": 1.0} for p in pops}
            unknown_pop = {**table["fractions"], "moon": {"us-east": 1.0}}
            answers = [
                await client.put(
                    "/v1/routing",
                    json={"fractions": fractions},
                    headers={**headers, "Idempotency-Key": f"frac-{i}"},
                )
                for i, fractions in enumerate([bad_sum, unknown_region, unknown_pop])
            ]
            after, _ = await _current(client)
        fields = [a.json()["field"] for a in answers]
        assert [a.status_code for a in answers] == [422, 422, 422]
        assert fields[0].startswith("fractions.")
        assert fields[1] == f"fractions.{pops[0]}.atlantis"
        assert fields[2] == "fractions.moon"
        assert after == version, "a refused write changes nothing"

    async def test_health_window_beyond_retention_is_refused(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            response = await client.get("/v1/health", params={"window_s": 3600})
        assert response.status_code == 422
        assert response.json()["field"] == "window_s"


class TestLabEndpoints:
    """The OpenAPI document, /metrics and /healthz are served; /metrics matches /v1/health."""

    async def test_openapi_lists_the_contract(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            doc = (await client.get("/openapi.json")).json()
        for path in (
            "/v1/topology",
            "/v1/routing",
            "/v1/health",
            "/v1/audit",
            "/v1/actions/shard-move",
        ):
            assert path in doc["paths"]

    async def test_metrics_carry_the_health_numbers(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            for i in range(5):
                await client.get("/edge/nyc", params={"user": f"m-{i}"})
            health = (await client.get("/v1/health")).json()
            text = (await client.get("/metrics")).text
        served = [r for r in health["regions"] if r["samples"] > 0]
        assert served
        scraped = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        for region in served:
            key = ("lab_region_samples", (("region", region["region"]),))
            assert scraped[key] == region["samples"]
        assert ("lab_routing_version", ()) in scraped


class TestFaultRoutes:
    """/lab routes exist only with --faults."""

    async def test_absent_without_faults(self, start_lab: LabFactory) -> None:
        lab = await start_lab(mode="model", faults=False)
        async with lab.http() as client:
            codes = [
                (await client.get("/lab/truth")).status_code,
                (await client.post("/lab/faults", json={})).status_code,
                (await client.delete("/lab/faults")).status_code,
            ]
            health = await client.get("/v1/health")
        assert codes == [404, 404, 404]
        assert health.status_code == 200

    async def test_present_with_faults(self, lab_server: RunningLab) -> None:
        async with lab_server.http() as client:
            truth = (await client.get("/lab/truth")).json()
            set_ = await client.post("/lab/faults", json={"region_outage": ["eu-west"]})
            bad = await client.post("/lab/faults", json={"region_outage": ["atlantis"]})
            cleared = await client.delete("/lab/faults")
        assert truth["capacity_rps"]["us-east"]["web"] == pytest.approx(100.0)
        assert set_.status_code == 200 and set_.json()["region_outage"] == ["eu-west"]
        assert bad.status_code == 422
        assert cleared.json()["region_outage"] == []

    async def test_api_error_faults_answer_500_but_lab_routes_stay_usable(
        self, lab_server: RunningLab
    ) -> None:
        async with lab_server.http() as client:
            await client.post("/lab/faults", json={"api_error_rate": 1.0})
            topology = await client.get("/v1/topology")
            cleared = await client.delete("/lab/faults")
            after = await client.get("/v1/topology")
        assert topology.status_code == 500
        assert topology.json()["error"] == "FleetUnavailable"
        assert cleared.status_code == 200
        assert after.status_code == 200


class TestTokenAuth:
    """With a token every /v1 and /lab call needs it; the data plane and /healthz do not."""

    async def test_token_required(self, start_lab: LabFactory) -> None:
        lab = await start_lab(load_config(), mode="model", faults=True, token="s3cret-token")
        async with lab.http() as authed, lab.http() as anonymous:
            anonymous.headers.pop("Authorization", None)
            no_token = await anonymous.get("/v1/topology")
            wrong = await anonymous.get("/v1/topology", headers={"Authorization": "Bearer nope"})
            lab_route = await anonymous.get("/lab/truth")
            ok = await authed.get("/v1/topology")
            edge = await anonymous.get("/edge/nyc", params={"user": "u"})
            healthz = await anonymous.get("/healthz")
        assert no_token.status_code == wrong.status_code == lab_route.status_code == 401
        assert no_token.json()["error"] == "FleetUnauthorized"
        assert "s3cret-token" not in no_token.text
        assert ok.status_code == edge.status_code == healthz.status_code == 200
