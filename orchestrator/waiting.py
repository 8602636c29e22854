"""Waiting until something is ready: a server answers, a process is up, a state is reached.

One loop for every wait-until-ready in the project (the dev server, the lab, the demo's
children, test and benchmark servers): poll ``ready`` every ``interval_s`` until it holds or
``timeout_s`` passes. ``alive`` runs before each poll and raises when what is awaited can
no longer become ready (a process that exited), so a dead server fails at once instead of
after the timeout. A poll that raises an ``ignore``\\d exception counts as not ready.

The functions return whether it became ready; the caller raises the error that fits it
(``DemoError``, ``TemporalUnreachable``, a test failure), naming what it waited for.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

__all__ = ["exited", "http_ok", "http_ok_async", "wait_until", "wait_until_async"]

#: what a poll may raise and still mean "not yet"
Ignored = tuple[type[BaseException], ...]


def wait_until(
    ready: Callable[[], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.1,
    alive: Callable[[], None] | None = None,
    ignore: Ignored = (),
) -> bool:
    """Poll ``ready`` until it returns True (True) or ``timeout_s`` has passed (False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if alive is not None:
            alive()
        try:
            if ready():
                return True
        except ignore:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


async def wait_until_async(
    ready: Callable[[], Awaitable[bool] | bool],
    *,
    timeout_s: float,
    interval_s: float = 0.1,
    alive: Callable[[], None] | None = None,
    ignore: Ignored = (),
) -> bool:
    """:func:`wait_until` in an event loop; ``ready`` may be a coroutine function."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        if alive is not None:
            alive()
        try:
            answer = ready()
            if inspect.isawaitable(answer):
                answer = await answer
            if answer:
                return True
        except ignore:
            pass
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(interval_s)


def exited(
    process: subprocess.Popen[bytes], what: str, log: Path | None = None
) -> Callable[[], None]:
    """An ``alive`` check: RuntimeError naming ``what`` once ``process`` has exited, with
    the last lines of its ``log`` (why it exited: a port taken, a bad config line)."""

    def check() -> None:
        if process.poll() is not None:
            raise RuntimeError(
                f"{what} exited with status {process.returncode} before it was ready" + _tail(log)
            )

    return check


def _tail(log: Path | None, lines: int = 5) -> str:
    try:
        text = "" if log is None else log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    last = text.strip().splitlines()[-lines:]
    return "".join(f"\n  {line}" for line in last) if last else ""


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    """Whether ``GET url`` answers 200; connection errors and timeouts are a no."""
    import httpx

    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


async def http_ok_async(url: str, timeout_s: float = 1.0) -> bool:
    """:func:`http_ok` without blocking the event loop."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            return (await http.get(url)).status_code == 200
    except httpx.HTTPError:
        return False
