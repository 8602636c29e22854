"""The trigger server's HTTP boundary, over real sockets to the real uvicorn setup.

Raw sockets, because what matters is what the server does before the client has
finished sending: an HTTP client library would send the whole body first.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from structlog.testing import capture_logs

from orchestrator.triggers.auth import load_credentials, signature_headers
from orchestrator.triggers.boundary import MAX_BODY_BYTES
from orchestrator.triggers.server import create_app
from tests.triggers.conftest import AUTH, MemoryStarter, asgi_client, make_app
from tests.triggers.payloads import HMAC_SECRET, TOKEN, alert, notification, runbook
from tests.triggers.servers import serve_app

URL = "/v1/alerts/alertmanager"
HUGE = 400 * 1024 * 1024


async def _open(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = base.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


def _head(length: int | None, headers: dict[str, str]) -> bytes:
    lines = [f"POST {URL} HTTP/1.1", "Host: triggers", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _status(reader: asyncio.StreamReader, timeout_s: float = 10.0) -> int:
    line = await asyncio.wait_for(reader.readline(), timeout_s)
    return int(line.split()[1])


async def _closed(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    """Whether the server closes the connection within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


@pytest.mark.server  # a uvicorn server on a socket
class TestRefusedBeforeReading:
    """A request that cannot be served is answered from its headers: no valid credentials
    (401) or a declared body over the cap (413), before a byte of the body is sent."""

    @pytest.mark.parametrize(
        ("headers", "status"),
        # signed when the test runs, not when it is collected (minutes earlier in a full run)
        [
            (dict, 401),
            (lambda: {"Authorization": "Bearer wrong-token-0123456789"}, 401),
            (lambda: signature_headers(HMAC_SECRET, b"{}", now=time.time() - 3600), 401),
            (lambda: AUTH, 413),
            (lambda: signature_headers(HMAC_SECRET, b"{}"), 413),
        ],
        ids=["none", "wrong-bearer", "replayed-signature", "bearer", "fresh-signature"],
    )
    async def test_answered_before_the_body(
        self, headers: Callable[[], dict[str, str]], status: int
    ) -> None:
        starter = MemoryStarter()
        async with serve_app(make_app([runbook("drain")], starter)) as base:
            reader, writer = await _open(base)
            writer.write(_head(HUGE, headers()))
            await writer.drain()
            assert await _status(reader) == status  # not one byte of the 400 MB was sent
            writer.close()
        assert starter.started == []

    async def test_a_client_that_sends_anyway_is_cut_off(self) -> None:
        """The server stops reading a refused body: a client pushing 400 MB gets the answer
        and then a closed connection, after a small fraction of it."""
        async with serve_app(make_app([runbook("drain")], MemoryStarter())) as base:
            reader, writer = await _open(base)
            writer.write(_head(HUGE, {}))
            assert await _status(reader) == 401
            chunk = b" " * (1 << 20)
            sent = 0
            with pytest.raises(ConnectionError):
                while sent < HUGE:
                    writer.write(chunk)
                    await asyncio.wait_for(writer.drain(), 10)
                    sent += len(chunk)
            # what the kernel's socket buffers hold, plus the server's 256 KiB drain
            assert sent < 64 * (1 << 20), f"{sent >> 20} MiB were taken in"
            writer.close()


class TestStreamedCap:
    """A body with no declared length is read as a stream and refused once past the cap:
    the rest is never asked for."""

    async def test_chunked_body_stops_at_the_cap(self) -> None:
        asked = 0

        async def endless() -> AsyncIterator[bytes]:
            nonlocal asked
            while asked < HUGE // 65536:
                asked += 1
                yield b" " * 65536

        starter = MemoryStarter()
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            response = await http.post(URL, content=endless(), headers=AUTH)
        assert response.status_code == 413
        assert asked <= MAX_BODY_BYTES // 65536 + 2
        assert starter.started == []

    async def test_a_body_within_the_cap_is_served(self) -> None:
        body = json.dumps(notification(alert(region="eu-west"))).encode()

        async def trickle() -> AsyncIterator[bytes]:
            for i in range(0, len(body), 100):
                yield body[i : i + 100]

        starter = MemoryStarter()
        async with asgi_client(make_app([runbook("drain")], starter)) as http:
            response = await http.post(URL, content=trickle(), headers=AUTH)
        assert response.status_code == 200
        assert len(starter.started) == 1


@pytest.mark.slow
@pytest.mark.server  # a uvicorn server on a socket
class TestSlowClients:
    """Slow or vanished clients are let go: headers and bodies have deadlines, and a client
    that drops mid-body is one log line, not a traceback."""

    async def test_slowloris_connections_are_closed(self) -> None:
        app = make_app([runbook("drain")], MemoryStarter())
        async with serve_app(app, header_timeout_s=0.5) as base:
            conns = [await _open(base) for _ in range(20)]
            for i, (_, writer) in enumerate(conns):
                if i % 2:  # half send part of the headers, half nothing at all
                    writer.write(b"POST /v1/alerts/alertmanager HTTP/1.1\r\nHost: x\r\n")
                    await writer.drain()
            closed = await asyncio.gather(*(_closed(reader, 5.0) for reader, _ in conns))
            async with httpx.AsyncClient(base_url=base) as http:
                healthy = await http.get("/healthz")
            scraped = await http_get_metrics(base)
        assert all(closed)
        assert healthy.status_code == 200
        assert 'orchestrator_trigger_requests_refused_total{reason="slow_client"} 20.0' in scraped

    async def test_a_body_that_does_not_arrive_in_time_is_408(self) -> None:
        creds = load_credentials(token=TOKEN)
        app = create_app([runbook("drain")], MemoryStarter(), creds, body_timeout_s=0.5)
        async with serve_app(app) as base:
            reader, writer = await _open(base)
            writer.write(_head(1000, AUTH) + b'{"version": ')
            await writer.drain()
            assert await _status(reader) == 408
            writer.close()

    async def test_a_client_gone_mid_body_is_one_line(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        app = make_app([runbook("drain")], MemoryStarter())
        with capture_logs() as logs, caplog.at_level(logging.INFO):
            async with serve_app(app) as base:
                reader, writer = await _open(base)
                writer.write(_head(100_000, AUTH) + b'{"version": "4", ')
                await writer.drain()
                await asyncio.sleep(0.2)
                writer.close()
                await writer.wait_closed()
                for _ in range(50):
                    if any(e["event"] == "client went away mid-body" for e in logs):
                        break
                    await asyncio.sleep(0.05)
        gone = [e for e in logs if e["event"] == "client went away mid-body"]
        assert len(gone) == 1 and gone[0]["read"] > 0
        assert not [r for r in caplog.records if r.exc_info or "Exception" in r.getMessage()]


async def http_get_metrics(base: str) -> str:
    async with httpx.AsyncClient(base_url=base) as http:
        return (await http.get("/metrics", headers=AUTH)).text
