"""One wait-until-ready loop: it returns as soon as the thing is ready, says no after the
timeout, and fails at once when what it waits for has died."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from orchestrator.waiting import exited, wait_until, wait_until_async


class TestWaitUntil:
    """Polls until ready or the timeout; ``alive`` raising stops the wait at once; an
    ignored exception from a poll means not ready yet."""

    def test_ready_on_the_third_poll(self) -> None:
        polls = itertools.count(1)
        assert wait_until(lambda: next(polls) >= 3, timeout_s=5, interval_s=0.001)
        assert next(polls) == 4

    def test_never_ready(self) -> None:
        assert not wait_until(lambda: False, timeout_s=0.01, interval_s=0.001)

    def test_dead_before_ready(self) -> None:
        def dead() -> None:
            raise RuntimeError("the server exited with status 1")

        with pytest.raises(RuntimeError, match="exited"):
            wait_until(lambda: False, timeout_s=5, alive=dead)

    def test_ignored_errors_are_not_ready(self) -> None:
        polls = itertools.count(1)

        def refused_twice() -> bool:
            if next(polls) < 3:
                raise ConnectionError("refused")
            return True

        assert wait_until(refused_twice, timeout_s=5, interval_s=0.001, ignore=(ConnectionError,))

    def test_other_errors_propagate(self) -> None:
        def broken() -> bool:
            raise ValueError("a bug, not a server that is starting")

        with pytest.raises(ValueError):
            wait_until(broken, timeout_s=5, interval_s=0.001, ignore=(ConnectionError,))


class TestWaitUntilAsync:
    """The same in an event loop, with a coroutine or a plain function as the poll."""

    async def test_coroutine_poll(self) -> None:
        polls = itertools.count(1)

        async def ready() -> bool:
            return next(polls) >= 2

        assert await wait_until_async(ready, timeout_s=5, interval_s=0.001)

    async def test_timeout(self) -> None:
        assert not await wait_until_async(lambda: False, timeout_s=0.01, interval_s=0.001)


def ended(status: int) -> subprocess.Popen[bytes]:
    """A process handle that has exited with ``status`` (no process needed)."""
    process = cast("subprocess.Popen[bytes]", SimpleNamespace(returncode=status))
    process.poll = lambda: status  # type: ignore[method-assign]
    return process


class TestExited:
    """A process that exits before it is ready is named with its status and, when it has a
    log, the log's last lines: why it exited, not only that it did."""

    def test_the_logs_tail_is_in_the_error(self, tmp_path: Path) -> None:
        log = tmp_path / "server.log"
        log.write_text("starting\n" + "".join(f"line {i}\n" for i in range(10)) + "cannot bind\n")
        with pytest.raises(RuntimeError) as raised:
            wait_until(lambda: False, timeout_s=5, alive=exited(ended(3), "the server", log))
        message = str(raised.value)
        assert "the server exited with status 3" in message
        assert message.endswith("cannot bind") and "line 6" in message and "line 5" not in message

    def test_no_log_no_tail(self, tmp_path: Path) -> None:
        check = exited(ended(1), "the server", tmp_path / "missing.log")
        with pytest.raises(RuntimeError, match=r"status 1 before it was ready$"):
            check()
