"""Child processes that end with their parent.

Every process a command starts (the Temporal dev server, Locust, the demo's stack)
goes through :func:`spawn`, which gives it three protections:

- its own session, so it is the leader of a process group: :func:`stop_group`
  reaches whatever it started in turn (Locust's workers, the lab's trainers), and a
  Ctrl-C typed at the terminal reaches only the parent, which decides how its
  children stop;
- on Linux, ``PR_SET_PDEATHSIG``: should the parent die without cleaning up
  (SIGKILL, the OOM killer), the kernel sends the child SIGTERM;
- a command that starts children runs inside :func:`interrupt_on_signals`, so SIGTERM (and
  SIGINT, even when inherited ignored by ``cmd &``) raises ``KeyboardInterrupt``
  and the command's own ``finally`` stops them. Python's default for SIGTERM is to die
  at once, which is how ``lab traffic`` used to leave Locust sending traffic.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

__all__ = ["group_alive", "interrupt_on_signals", "spawn", "stop_group"]

_PR_SET_PDEATHSIG = 1


def _death_signal_setter() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies, or None.

    Resolved before the fork, so the child only makes one libc call. The kernel sends
    the signal when the *thread* that forked exits, so it is only used from the main
    thread: a child started from a short-lived worker thread would be killed with it.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        # The parent may have died between fork and prctl; then nobody would signal us.
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return set_death_signal


def spawn(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``args`` in its own process group, bound to die with this process."""
    return subprocess.Popen(
        list(args),
        env=None if env is None else dict(env),
        stdout=stdout,
        stderr=stderr,
        stdin=stdin,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_death_signal_setter(),
    )


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies waiting to be reaped don't count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            # fields after the ")" closing the command name: state, ppid, pgrp, ...
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def stop_group(process: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    """SIGTERM the child's whole process group, then SIGKILL whatever is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)
    # The leader may be gone while what it started is still finishing.
    deadline = time.monotonic() + min(timeout_s, 5.0)
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5.0)


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise ``KeyboardInterrupt``: one clean path.

    SIGINT explicitly, since a process started in the background (nohup, ``cmd &`` in a
    script) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt for
    it. The previous handlers come back afterwards (a command may run inside a test).
    """
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, _interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
