"""A region backend's HTTP surface, in process: what HAProxy forwards is served with the
lab's physics, and a malformed stamp is a 422 that names the problem, not a 500."""

from __future__ import annotations

import httpx

from orchestrator.lab.config import load_config
from orchestrator.lab.haproxy.backend import RegionBackend, create_backend_app


def client() -> httpx.AsyncClient:
    app = create_backend_app(RegionBackend(load_config(None), "us-east", {("nyc", 3)}))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://backend")


HEADERS = {"x-lab-pop": "nyc", "x-lab-bucket": "3", "x-lab-routed": "us-east"}


class TestEdge:
    """Any path is a request of the data plane; the headers HAProxy sets say whose."""

    async def test_a_forwarded_request_is_served_and_counted(self) -> None:
        async with client() as http:
            answer = await http.get("/edge/nyc", params={"service": "sessions"}, headers=HEADERS)
            served = (await http.get("/lab/served")).json()
        assert answer.status_code == 200
        assert answer.json() == {
            "region": "us-east",
            "routed": "us-east",
            "pop": "nyc",
            "bucket": 3,
            "service": "sessions",
            "cold": False,  # routed here at boot
        }
        assert served == [{"service": "sessions", "routed": "us-east", "status": 200, "count": 1}]

    async def test_a_malformed_stamp_is_a_422_naming_it(self) -> None:
        async with client() as http:
            answer = await http.get("/edge/nyc", headers={**HEADERS, "x-lab-accept-us": "soon"})
            served = (await http.get("/lab/served")).json()
        assert answer.status_code == 422
        assert answer.json() == {
            "error": "InvalidRequest",
            "field": "x-lab-accept-us",
            "reason": "must be an integer, got 'soon'",
        }
        assert served == []
