from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.devserver import port_is_free
from orchestrator.temporal import binary_path
from orchestrator.waiting import wait_until
from tests.fixtures.ports import free_port

ORCHESTRATOR = str(Path(sys.executable).parent / "orchestrator")


def run(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ORCHESTRATOR, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HOME": "/nonexistent", **(env or {})},
    )


@pytest.mark.server  # runs the CLI as a process
class TestWorkerWithoutTemporal:
    """A worker that cannot reach Temporal prints one line naming the address and exits 2."""

    def test_unreachable(self) -> None:
        done = run("worker", env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("error: cannot reach Temporal at 127.0.0.1:1:")
        assert "Traceback" not in done.stdout + done.stderr

    def test_invalid_setting(self) -> None:
        done = run("worker", env={"ORCHESTRATOR_FLEET_TIMEOUT_S": "zero"})
        assert done.returncode == 2
        assert done.stderr.strip() == (
            "error: invalid setting ORCHESTRATOR_FLEET_TIMEOUT_S: "
            "Input should be a valid number, unable to parse string as a number"
        )


@pytest.mark.server  # runs the CLI as a process
class TestVersion:
    """`version --json` is machine-readable."""

    def test_json(self) -> None:
        done = run("version", "--json")
        assert done.returncode == 0
        info = json.loads(done.stdout)
        assert set(info) == {"orchestrator", "temporalio", "python"}


@pytest.mark.server  # runs the CLI as a process
class TestServer:
    """`orchestrator server` runs the dev server with the project's search attributes, and
    Ctrl-C stops it even when it was started in the background (SIGINT inherited ignored, as
    under nohup or `cmd &` in a script: an earlier server then never stopped)."""

    def test_starts_registers_attributes_and_stops_cleanly(self, tmp_path: Path) -> None:
        port, ui_port = free_port(), free_port()
        db = tmp_path / "temporal.db"
        server = subprocess.Popen(
            [
                ORCHESTRATOR,
                "server",
                "--port",
                str(port),
                "--ui-port",
                str(ui_port),
                "--db-file",
                str(db),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
            start_new_session=True,  # its own group, so a failed stop can kill the dev server too
        )
        try:
            listing = _wait_for_attributes(port)
            for name in ("Region", "Runbook", "JobId", "RunKind"):
                assert name in listing
            # The same ports again: one clear line, exit 2.
            again = run("server", "--port", str(port), "--ui-port", str(ui_port))
            assert again.returncode == 2
            assert f"port {port} on 127.0.0.1 is already in use" in again.stderr
            assert len(again.stderr.strip().splitlines()) == 1
        finally:
            server.send_signal(signal.SIGINT)
            try:
                # stop() allows the dev server 15 s before SIGKILL; a loaded machine needs slack
                out, err = server.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(os.getpgid(server.pid), signal.SIGKILL)
                raise
        assert server.returncode == 0, err
        assert "Traceback" not in err
        assert db.exists()
        assert port_is_free("127.0.0.1", port)


def _wait_for_attributes(port: int) -> str:
    listing: list[str] = []

    def listed() -> bool:
        done = subprocess.run(
            [
                binary_path("temporal"),
                "operator",
                "search-attribute",
                "list",
                "--address",
                f"127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
        listing.append(done.stdout)
        return done.returncode == 0

    if not wait_until(listed, timeout_s=30, interval_s=0.3):
        pytest.fail("dev server did not answer within 30 s")
    return listing[-1]


class TestEntryPoint:
    """The console script keeps every command's exit code; a process that connected to
    Temporal leaves through ``os._exit`` (its output flushed first), one that did not, through
    ``sys.exit``."""

    @staticmethod
    def _exits(monkeypatch: pytest.MonkeyPatch, connected: bool, *argv: str) -> tuple[str, object]:
        import orchestrator.cli as cli
        from orchestrator import temporal

        class Left(Exception):
            pass

        def hard_exit(code: int) -> None:
            raise Left(code)

        monkeypatch.setattr(temporal, "connected_in_this_process", connected)
        monkeypatch.setattr(os, "_exit", hard_exit)
        monkeypatch.setattr(sys, "argv", ["orchestrator", *argv])
        try:
            cli.main()
        except Left as left:
            return "os._exit", left.args[0]
        except SystemExit as exc:
            return "sys.exit", exc.code
        raise AssertionError("main() returned without exiting")

    def test_connected_process_exits_hard_with_the_code(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        assert self._exits(monkeypatch, True, "version") == ("os._exit", 0)
        assert self._exits(monkeypatch, True, "no-such-command") == ("os._exit", 2)

    def test_unconnected_process_exits_normally(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert self._exits(monkeypatch, False, "version") == ("sys.exit", 0)
