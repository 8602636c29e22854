from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
import structlog
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from orchestrator.logging import REDACTED, configure_logging, get_logger, register_secret


@pytest.fixture
def json_logs(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    configure_logging("DEBUG", json=True)
    yield capsys
    structlog.reset_defaults()


def lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]


class TestJsonLines:
    """Off a terminal, every log line is one JSON object with level and timestamp."""

    def test_json_line(self, json_logs: pytest.CaptureFixture[str]) -> None:
        get_logger("t").info("drain started", region="r1")
        [line] = lines(json_logs)
        assert line["event"] == "drain started"
        assert line["region"] == "r1"
        assert line["level"] == "info"
        assert "timestamp" in line


class TestSecretsNeverLogged:
    """Secret-looking keys and registered secret values never reach the output."""

    def test_secret_keys_are_redacted(self, json_logs: pytest.CaptureFixture[str]) -> None:
        get_logger().info(
            "connect",
            api_key="k-123456",
            fleet_token="t-123456",
            headers={"Authorization": "Bearer zz-99999"},
        )
        out = json_logs.readouterr().err
        for secret in ("k-123456", "t-123456", "zz-99999"):
            assert secret not in out
        assert REDACTED in out

    def test_registered_value_is_scrubbed_anywhere(
        self, json_logs: pytest.CaptureFixture[str]
    ) -> None:
        register_secret("value-from-config-xyz")
        get_logger().info(
            "calling",
            url="https://fleet/?auth=value-from-config-xyz",
            note=["value-from-config-xyz"],
        )
        out = json_logs.readouterr().err
        assert "value-from-config-xyz" not in out
        assert out.count(REDACTED) == 2


class TestEveryRecordIsScrubbed:
    """A registered secret is scrubbed from stdlib records (the SDK's, uvicorn's), from
    formatted tracebacks and from uncaught-exception output, not only from structlog."""

    SECRET = "stdlib-secret-4b1d"

    def test_stdlib_message_and_traceback(
        self, json_logs: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
    ) -> None:
        register_secret(self.SECRET)
        caplog.set_level(logging.DEBUG)
        try:
            raise ValueError(f"Illegal header value b'Bearer {self.SECRET}\\n'")
        except ValueError:
            logging.getLogger("temporalio.activity").warning(
                "Completing activity as failed (%s)", self.SECRET, exc_info=True
            )
        logging.getLogger("uvicorn.error").error("client sent %r", f"Bearer {self.SECRET}")
        out = json_logs.readouterr().err + caplog.text
        assert "Completing activity as failed" in out and "ValueError" in out
        assert self.SECRET not in out
        assert REDACTED in out

    def test_console_traceback(self, capsys: pytest.CaptureFixture[str]) -> None:
        register_secret(self.SECRET)
        configure_logging("INFO", json=False)
        try:
            try:
                raise RuntimeError(f"token {self.SECRET} refused")
            except RuntimeError:
                get_logger().exception("call failed")
        finally:
            structlog.reset_defaults()
        err = capsys.readouterr().err
        assert "RuntimeError" in err and self.SECRET not in err

    @pytest.mark.server  # a Python process
    def test_uncaught_exception(self) -> None:
        code = (
            "from orchestrator.logging import register_secret\n"
            f"register_secret({self.SECRET!r})\n"
            f"raise RuntimeError('boom ' + {self.SECRET!r})\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 1
        assert "RuntimeError: boom [redacted]" in done.stderr
        assert self.SECRET not in done.stderr


class TestActivityContext:
    """Inside an activity, workflow id, run id and activity name are bound automatically."""

    async def test_bound_in_activity(self, json_logs: pytest.CaptureFixture[str]) -> None:
        @activity.defn(name="probe_activity")
        async def probe() -> None:
            get_logger().info("inside")

        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            env.info, activity_type="probe_activity", workflow_id="drain-r1"
        )
        await env.run(probe)
        [line] = lines(json_logs)
        assert line["activity"] == "probe_activity"
        assert line["workflow_id"] == "drain-r1"
        assert "run_id" in line

    def test_not_bound_outside(self, json_logs: pytest.CaptureFixture[str]) -> None:
        get_logger().info("outside")
        [line] = lines(json_logs)
        assert "workflow_id" not in line
