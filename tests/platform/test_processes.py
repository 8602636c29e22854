"""Processes end with their parent: a command stopped by SIGTERM or SIGINT stops what it
started, and a child outlives neither a clean stop nor its parent's sudden death."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.devserver import port_is_free
from tests.fixtures.ports import free_port
from tests.fixtures.processes import kill_group, wait_for_child, wait_gone

ORCHESTRATOR = str(Path(sys.executable).parent / "orchestrator")


@pytest.mark.server  # child processes and a dev server
class TestSpawnedChildDiesWithItsParent:
    """A child started through ``spawn`` gets SIGTERM from the kernel when its parent dies."""

    def test_parent_killed_outright(self) -> None:
        code = (
            "import sys, time\n"
            "from orchestrator.processes import spawn\n"
            "spawn(['sleep', '300'])\n"
            "print('started', flush=True)\n"
            "time.sleep(300)\n"
        )
        parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        child = wait_for_child(parent)  # type: ignore[arg-type]
        try:
            parent.kill()
            parent.wait(timeout=10)
            assert wait_gone(child), "sleep outlived its SIGKILLed parent"
        finally:
            kill_group(child)


@pytest.mark.server  # child processes and a dev server
class TestServerStopsTheDevServer:
    """`orchestrator server` stopped by SIGTERM, or killed outright, leaves no dev server."""

    @pytest.mark.slow
    @pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
    def test_no_dev_server_left(self, tmp_path: Path, how: signal.Signals) -> None:
        port = free_port()
        log = tmp_path / "state" / "temporal-server.log"
        server = subprocess.Popen(
            [ORCHESTRATOR, "server", "--port", str(port), "--ui-port", str(free_port())],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "ORCHESTRATOR_STATE_DIR": str(tmp_path / "state")},
        )
        temporal = wait_for_child(server)
        try:
            deadline = time.monotonic() + 60
            while port_is_free("127.0.0.1", port):
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
            server.send_signal(how)
            server.wait(timeout=60)
            assert wait_gone(temporal), "the Temporal dev server outlived `orchestrator server`"
        finally:
            kill_group(temporal)
            if server.poll() is None:
                server.kill()
        assert log.exists()  # its output went to the state dir's log, not a pipe
