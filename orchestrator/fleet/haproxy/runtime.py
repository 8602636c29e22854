"""HAProxy's runtime API (the ``stats socket``), over a unix socket or TCP, with asyncio.

One connection per call, in HAProxy's non-interactive mode: send one line, read until
HAProxy closes. Several commands go in one line separated by ``;`` (HAProxy runs them in
order and answers each in turn), in chunks that fit HAProxy's default 16 kB buffer, so a
routing write of thousands of entries takes a handful of round trips, not thousands.
A successful write command answers an empty line; any other text is its error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from orchestrator.exceptions import FleetRejected, FleetUnauthorized, FleetUnavailable

__all__ = ["MAX_LINE_BYTES", "RuntimeApi", "parse_address"]

#: bytes per request line: HAProxy reads a command line into one buffer (tune.bufsize,
#: 16384 by default); well under it, whatever the build
MAX_LINE_BYTES = 8000


def parse_address(address: str) -> tuple[str, str | int]:
    """``unix:/path``, ``/path`` -> ("unix", path); ``tcp:host:port``, ``host:port`` ->
    ("host", port). ValueError on anything else."""
    if address.startswith("unix:"):
        address = address.removeprefix("unix:")
        if not address:
            raise ValueError("unix: needs a socket path")
        return ("unix", address)
    if address.startswith("/"):
        return ("unix", address)
    address = address.removeprefix("tcp:")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is neither a socket path nor host:port")
    return (host, int(port))


class RuntimeApi:
    """Commands to one HAProxy's runtime API. Errors are the fleet's exceptions."""

    def __init__(self, address: str, *, timeout_s: float = 10.0) -> None:
        self.address = address
        self._where = parse_address(address)
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"RuntimeApi({self.address!r})"

    async def command(self, line: str) -> str:
        """The answer to one command line (one or more ``;``-separated commands)."""
        if "\n" in line:
            raise ValueError("a runtime API command is one line")
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow the caller's
        # cancellation when the exchange finishes at the same moment, and a sampler loop
        # that calls this then never stops (``lab serve`` once outlived its SIGTERM).
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._exchange(line)
        except TimeoutError:
            raise FleetUnavailable(
                f"HAProxy runtime API at {self.address}: no answer in {self._timeout_s} s",
                reason="timeout",
            ) from None
        except OSError as exc:
            raise FleetUnavailable(
                f"HAProxy runtime API at {self.address}: {exc.strerror or exc}",
                reason=type(exc).__name__,
            ) from None

    async def _exchange(self, line: str) -> str:
        kind, where = self._where
        if kind == "unix":
            reader, writer = await asyncio.open_unix_connection(str(where))
        else:
            reader, writer = await asyncio.open_connection(kind, int(where))
        try:
            writer.write(line.encode() + b"\n")
            await writer.drain()
            answer = await reader.read()
        finally:
            writer.close()
        text = answer.decode(errors="replace")
        if text.startswith("Permission denied"):
            raise FleetUnauthorized(
                f"HAProxy runtime API at {self.address}: permission denied; the orchestrator "
                "needs `stats socket ... level admin`",
                reason="permission denied",
            )
        if text.startswith("Unknown command"):
            raise FleetRejected(
                f"HAProxy runtime API at {self.address}: unknown command {line[:80]!r}",
                reason="unknown command",
            )
        return text

    async def stats(self) -> list[dict[str, str]]:
        """``show stat``: one row per frontend, backend and server, column name -> value
        (``pxname``, ``svname``, counters such as ``stot``, ``econ``, ``hrsp_5xx``)."""
        lines = (await self.command("show stat")).splitlines()
        if not lines or not lines[0].startswith("# "):
            raise FleetUnavailable(
                f"HAProxy runtime API at {self.address}: `show stat` answered no CSV header",
                reason="no stat header",
            )
        header = lines[0].removeprefix("# ").split(",")
        return [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]

    async def writes(self, commands: Sequence[str]) -> None:
        """Run write commands in order, in as few lines as fit; raise on the first error.

        Each chunk is a separate connection; a failure leaves the earlier chunks applied
        (the caller's protocol makes that safe to resume).
        """
        for chunk in _chunks(commands):
            answer = await self.command(";".join(chunk))
            errors = [line for line in answer.splitlines() if line.strip()]
            if errors:
                raise FleetRejected(
                    f"HAProxy runtime API at {self.address}: {errors[0]} "
                    f"(in a batch of {len(chunk)} commands starting {chunk[0]!r})",
                    reason=errors[0],
                )


def _chunks(commands: Sequence[str]) -> list[list[str]]:
    chunks: list[list[str]] = []
    current: list[str] = []
    size = 0
    for command in commands:
        if ";" in command or "\n" in command:
            raise ValueError(f"a command may hold neither ';' nor a newline: {command!r}")
        if current and size + len(command) + 1 > MAX_LINE_BYTES:
            chunks.append(current)
            current, size = [], 0
        current.append(command)
        size += len(command) + 1
    if current:
        chunks.append(current)
    return chunks
