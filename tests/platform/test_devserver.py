"""The dev server's output is drained all the time, so a chatty server never blocks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.devserver import DevServer
from tests.fixtures.ports import free_port

#: 1.5 MiB on stderr, far past a pipe's 64 KiB, then "ready", then it idles like a server
_CHATTY = (
    "import sys, time, pathlib\n"
    "line = 'slow query took 1.2s ' + 'x' * 100 + '\\n'\n"
    "for _ in range(12_500): sys.stderr.write(line)\n"
    "sys.stderr.write('last line before ready\\n'); sys.stderr.flush()\n"
    "pathlib.Path(sys.argv[1]).write_text('ready')\n"
    "time.sleep(120)\n"
)


class _ChattyServer(DevServer):
    """A stand-in that writes like a dev server logging every slow query."""

    ready_file: Path = Path("/nonexistent")

    def command(self) -> list[str]:
        return [sys.executable, "-c", _CHATTY, str(self.ready_file)]

    async def _answers(self) -> bool:
        return self.ready_file.exists()


def _chatty(tmp_path: Path, log_file: Path | None) -> _ChattyServer:
    server = _ChattyServer(port=free_port(), ui=False, log_file=log_file)
    server.ready_file = tmp_path / "ready"
    return server


@pytest.mark.server  # a dev server process
class TestOutputIsDrained:
    """More than 1 MB of output neither blocks the server nor is lost when a file is named."""

    def test_without_a_log_file_the_tail_is_kept(self, tmp_path: Path) -> None:
        server = _chatty(tmp_path, None)
        try:
            server.start(timeout_s=60)  # blocked at 64 KiB before: "not ready within 60s"
            assert server.process is not None and server.process.poll() is None
        finally:
            server.stop(timeout_s=5)
        assert "last line before ready" in server.output_tail()

    def test_with_a_log_file_everything_is_kept(self, tmp_path: Path) -> None:
        log = tmp_path / "logs" / "temporal.log"
        server = _chatty(tmp_path, log)
        try:
            server.start(timeout_s=60)
        finally:
            server.stop(timeout_s=5)
        assert log.stat().st_size > 1_500_000
        assert server.output_tail().endswith("last line before ready")
