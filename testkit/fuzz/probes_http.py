"""Probes for the HTTP boundaries: the trigger app (webhooks, manual runs) and the lab's
fleet API, each driven through httpx's ASGI transport (see ``probes`` for the verdicts)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Literal

import httpx
from fastapi import FastAPI

from orchestrator.lab.server import build_app as build_lab
from orchestrator.triggers.auth import SIGNATURE_HEADER, signature_headers
from testkit.fuzz.probes import Verdict, _crash, one_line
from testkit.lab import lab_config
from testkit.trigger_payloads import HMAC_SECRET, TOKEN, alert, notification, runbook
from testkit.triggers import MemoryStarter, make_app

__all__ = [
    "VALID_ALERTS",
    "VALID_MANUAL",
    "AppClient",
    "LabProbe",
    "TriggerProbe",
    "auth_headers",
    "body_bytes",
]


# --- HTTP helpers ----------------------------------------------------------------


class AppClient:
    """A FastAPI app over httpx's ASGI transport, called synchronously on its own loop.

    Hypothesis drives plain functions; one loop per probe keeps the app's state
    (and the in-memory starter) alive across examples.
    """

    def __init__(self, app: FastAPI) -> None:
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://fuzz"
        )

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.loop.run_until_complete(self.http.request(method, path, **kwargs))

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()


def body_bytes(body: Any) -> bytes:
    if isinstance(body, bytes):
        return body
    # allow_nan: a sender may well write NaN; the server must refuse it cleanly.
    return json.dumps(body, allow_nan=True).encode()


def _names_field(status: int, answer: Any) -> bool:
    """A 422's detail names a field (FastAPI/pydantic ``loc``, or the lab's ``field``)."""
    if not isinstance(answer, dict):
        return False
    detail = answer.get("detail")
    if isinstance(detail, list):
        return bool(detail) and all(
            isinstance(d, dict) and len(d.get("loc", [])) >= 1 and d.get("msg") for d in detail
        )
    if "field" in answer:
        return status != 422 or bool(answer.get("field"))
    return isinstance(detail, str) and bool(detail)


# --- Alertmanager webhook and manual runs ---------------------------------------------

AuthKind = Literal["bearer", "hmac", "none", "wrong_bearer", "wrong_hmac", "garbage"]


def auth_headers(kind: AuthKind, body: bytes) -> dict[str, str]:
    return {
        "bearer": {"Authorization": f"Bearer {TOKEN}"},
        "hmac": signature_headers(HMAC_SECRET, body),
        "none": {},
        "wrong_bearer": {"Authorization": f"Bearer {TOKEN}x"},
        "wrong_hmac": signature_headers(HMAC_SECRET, body + b" "),
        "garbage": {"Authorization": "Bearer", SIGNATURE_HEADER: "sha256=zz"},
    }[kind]


VALID_ALERTS = [
    notification(alert(region="eu-west")),
    notification(alert(region="us-east", max_pct="40"), alert("resolved", region="eu-west")),
]
VALID_MANUAL = [
    {"parameters": {"region": "eu-west", "max_pct": 30}},
    {
        "parameters": {"region": "us-east"},
        "mode": "drill",
        "requested_by": "op",
        "idempotency_key": "k1",
    },
]


class TriggerProbe:
    """The trigger app over the in-memory starter (the trigger tests' pattern).

    Judges: bad auth is 401; a malformed body is 422 naming the field; never a
    5xx; and the starter saw exactly the starts the answer reports.
    """

    def __init__(self) -> None:
        self.starter = MemoryStarter()
        self.client = AppClient(make_app([runbook("drain")], self.starter))

    def close(self) -> None:
        self.client.close()

    def __call__(self, path: str, auth: AuthKind, body: Any) -> Verdict:
        raw = body_bytes(body)
        before = len(self.starter.started)
        headers = {"Content-Type": "application/json", **auth_headers(auth, raw)}
        try:
            response = self.client.post(path, content=raw, headers=headers)
        except Exception as exc:
            return _crash(exc)
        started = len(self.starter.started) - before
        status = response.status_code
        if status >= 500:
            return Verdict("crash", f"{status} for {path}: {response.text[:200]}")
        if status == 404 and response.json() == {"detail": "Not Found"}:
            # no such route (a name with a slash): routing answers before any handler
            return Verdict("unclean", "404 but a run started") if started else Verdict("rejected")
        if auth not in ("bearer", "hmac"):
            if status != 401 or started:
                return Verdict("unclean", f"unauthenticated got {status}, started {started}")
            return Verdict("rejected")
        try:
            answer = response.json()
        except ValueError:
            return Verdict("unclean", f"{status} answer is not JSON: {response.text[:100]}")
        if status >= 400:
            if started:
                return Verdict("unclean", f"{status} but {started} run(s) started")
            if not _names_field(status, answer):
                return Verdict("unclean", f"{status} names no field: {answer}")
            return Verdict("rejected")
        reported = (
            sum(r["outcome"] == "started" for r in answer["results"])
            if path.endswith("alertmanager")
            else int(answer["started"])
        )
        if reported != started:
            return Verdict("unclean", f"answer reports {reported} starts, starter saw {started}")
        return Verdict("accepted")


# --- lab fleet API --------------------------------------------------------------------


class LabProbe:
    """The lab's fleet API (model mode, training included) through its ASGI app.

    Every request carries a fresh Idempotency-Key unless the fuzz takes it away.
    A refused request must leave routing, topology, training and the audit log
    exactly as they were.
    """

    def __init__(self) -> None:
        self.client = AppClient(build_lab(lab_config(), mode="model"))
        self.count = 0
        topology = self.client.get("/v1/topology").json()
        self.regions = [r["name"] for r in topology["regions"]]
        self.shards = [s["id"] for s in topology["shards"]]
        routing = self.client.get("/v1/routing").json()
        self.fractions = routing["fractions"]
        cluster = self.client.get("/v1/training/cluster").json()
        self.cluster = cluster

    def close(self) -> None:
        self.client.close()

    def state(self) -> tuple[Any, ...]:
        """What a mutation can change. The training clock and a running job's step move on
        by themselves, so training is compared by quarantine and each job's runs."""
        get = self.client.get
        cluster = get("/v1/training/cluster").json()
        jobs = [(j["spec"]["name"], j["runs"], j["resumed_from"]) for j in cluster["jobs"]]
        return (
            get("/v1/routing", params={"buckets": True}).text,
            get("/v1/topology").text,
            json.dumps(cluster["quarantine"], sort_keys=True),
            jobs,
            get("/v1/audit").text,
        )

    def valid_bodies(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(method, path, body) for every mutation, each valid against the default lab."""
        region = self.regions[0]
        job = self.cluster["jobs"][0]["spec"]["name"]
        hosts = [h["name"] for h in self.cluster["hosts"] if h["state"] == "idle"][:2]
        return [
            ("PUT", "/v1/routing", {"fractions": self.fractions, "reason": "fuzz"}),
            (
                "POST",
                "/v1/actions/service-weight",
                {"region": region, "service": "web", "weight": 0.5},
            ),
            ("POST", "/v1/actions/shard-move", {"shards": [self.shards[0]], "to_region": region}),
            ("POST", "/v1/actions/batch-job", {"job": "index-build", "action": "start"}),
            ("POST", "/v1/actions/config", {"path": "/svc/web", "content": "x", "expected_rev": 0}),
            ("POST", "/v1/actions/training-stop", {"job": job}),
            (
                "POST",
                "/v1/actions/training-start",
                {"job": job, "hosts": hosts},
            ),
            (
                "POST",
                "/v1/actions/host-quarantine",
                {"host": hosts[0], "reason": "fuzz", "until": "2030-01-01T00:00:00Z"},
            ),
            ("POST", "/v1/actions/host-release", {"host": hosts[0]}),
        ]

    def __call__(
        self, method: str, path: str, body: Any, key: str | None = "", if_match: str | None = ""
    ) -> Verdict:
        self.count += 1
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key or f"fuzz-{os.getpid()}-{self.count}"
        if path == "/v1/routing":
            version = self.client.get("/v1/routing").headers["ETag"]
            if if_match is not None:
                headers["If-Match"] = if_match or version
        before = self.state()
        try:
            response = self.client.request(method, path, content=body_bytes(body), headers=headers)
        except Exception as exc:
            return _crash(exc)
        status = response.status_code
        if status >= 500:
            return Verdict("crash", f"{status} for {path}: {response.text[:200]}")
        if status < 400:
            return Verdict("accepted")
        if self.state() != before:
            return Verdict("unclean", f"{status} for {path} but the lab state changed")
        try:
            answer = response.json()
        except ValueError:
            return Verdict("unclean", f"{status} answer is not JSON")
        if not _names_field(status, answer) or not one_line(str(answer.get("reason", "x"))):
            return Verdict("unclean", f"{status} for {path} names no field: {answer}")
        return Verdict("rejected")
