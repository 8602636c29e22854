"""The trigger server's HTTP boundary: bounded reads, deadlines, and how to serve it.

uvicorn alone reads a request's headers for as long as a client cares to dribble
them, and keeps discarding an unread body for as long as the client sends it. The
trigger server is reachable by whoever can reach its port, so:

- :func:`read_body` reads a body as a stream, stops past the cap (413) or past a
  deadline (408), and turns a client that went away into one log line;
- :func:`bounded_h11` is uvicorn's h11 protocol with a deadline on the request
  headers (from the connection, or from the first byte of the next request on a
  kept-alive one) and a lingering close after an answer given before the body was
  read: it half-closes, discards what is in flight for a moment (at most 2 s and
  256 KiB), then closes, so the client can read the answer instead of a reset and
  the rest of the body is never received;
- :func:`uvicorn_config` serves an app with both.

uvicorn itself buffers at most 64 KiB of a body the app has not asked for (it
pauses reading), so a refusal before reading costs no memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from fastapi import Request
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

from orchestrator.logging import get_logger
from orchestrator.triggers.metrics import BoundaryReason

__all__ = [
    "BODY_TIMEOUT_S",
    "HEADER_TIMEOUT_S",
    "MAX_BODY_BYTES",
    "BodyRefused",
    "bounded_h11",
    "read_body",
    "uvicorn_config",
]

log = get_logger(__name__)

#: Alertmanager groups rarely exceed a few hundred alerts; this bounds a hostile body.
MAX_BODY_BYTES = 4 * 1024 * 1024
#: time for a request's headers to arrive, from the connection or the first byte
HEADER_TIMEOUT_S = 10.0
#: time for a whole body to arrive once the headers are in (4 MiB at ~140 KB/s)
BODY_TIMEOUT_S = 30.0
#: how long, and how much of, an unread body is drained after the answer, before the
#: connection closes
LINGER_S = 2.0
LINGER_BYTES = 256 * 1024


@dataclass(frozen=True)
class BodyRefused:
    """A body that was not read whole: ``status`` None when the client is gone."""

    status: int | None
    reason: BoundaryReason
    detail: str


def _client(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "?"


def declared_too_large(request: Request, limit: int = MAX_BODY_BYTES) -> BodyRefused | None:
    """A ``Content-Length`` over ``limit``, refused before a byte of the body is read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return BodyRefused(413, "too_large", f"body of {declared} bytes; at most {limit}")
    return None


async def read_body(
    request: Request, limit: int = MAX_BODY_BYTES, timeout_s: float = BODY_TIMEOUT_S
) -> bytes | BodyRefused:
    """The body, read as a stream up to ``limit`` bytes within ``timeout_s``."""
    too_large = declared_too_large(request, limit)
    if too_large is not None:
        return too_large
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    return BodyRefused(413, "too_large", f"body larger than {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        log.info("slow client: body not sent in time", client=_client(request), read=size)
        return BodyRefused(408, "slow_client", f"body not received within {timeout_s:g}s")
    except ClientDisconnect:
        log.info("client went away mid-body", client=_client(request), read=size)
        return BodyRefused(None, "client_gone", "client disconnected")
    return b"".join(chunks)


def bounded_h11(
    header_timeout_s: float = HEADER_TIMEOUT_S,
    linger_s: float = LINGER_S,
    linger_bytes: int = LINGER_BYTES,
    on_timeout: Callable[[], None] = lambda: None,
) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a header deadline and a lingering close."""

    class BoundedH11(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _linger_timer: asyncio.TimerHandle | None = None
        _drained = 0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm_header_deadline()

        def data_received(self, data: bytes) -> None:
            if self._linger_timer is not None:
                # Draining a refused body: only so much, then the connection goes.
                self._drained += len(data)
                if self._drained > linger_bytes:
                    self.transport.close()
                    return
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                self._arm_header_deadline()  # a request has begun; its headers have not
            else:
                self._disarm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
                # Answered before the body was read (a refusal): read no more of it.
                self._unset_keepalive_if_required()
                if self.transport.can_write_eof():
                    self.transport.write_eof()
                self._linger_timer = self.loop.call_later(linger_s, self.transport.close)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_deadline()
            if self._linger_timer is not None:
                self._linger_timer.cancel()
                self._linger_timer = None
            super().connection_lost(exc)

        def _arm_header_deadline(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm_header_deadline(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                client = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
                log.info("slow client: request headers not sent in time", client=client)
                on_timeout()
                self.transport.close()

    return BoundedH11


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    **options: Any,
) -> uvicorn.Config:
    """uvicorn's config for the trigger app, with the bounded protocol."""
    metrics = getattr(getattr(app, "state", None), "metrics", None)
    on_timeout = (lambda: metrics.refused("slow_client")) if metrics is not None else (lambda: None)
    options.setdefault("log_level", "warning")
    options.setdefault("access_log", False)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=bounded_h11(header_timeout_s, on_timeout=on_timeout),
        **options,
    )
