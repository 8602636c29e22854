"""Turning the project's errors into Temporal failures with the right retry behaviour."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from temporalio.exceptions import ApplicationError

from orchestrator.activities.heartbeat import heartbeating
from orchestrator.exceptions import FleetError, OrchestratorError
from orchestrator.logging import redact

__all__ = ["as_application_error", "reported"]

P = ParamSpec("P")
T = TypeVar("T")


def as_application_error(exc: OrchestratorError) -> ApplicationError:
    """The ``ApplicationError`` for ``exc``: type = class name, retryable as the class says."""
    details = []
    if isinstance(exc, FleetError):
        # Details are payloads, not text the failure converter scrubs: scrub them here.
        details.append({"status": exc.status, "reason": redact(exc.reason)})
    return ApplicationError(
        str(exc), *details, type=exc.type_name(), non_retryable=not exc.retryable
    )


def reported(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Re-raise the project's errors as typed ``ApplicationError`` s.

    Without this an ``OrchestratorError`` reaches Temporal as a generic error
    and is retried even when a retry cannot help (a 422, a version conflict).
    The activity heartbeats while it runs (see :mod:`orchestrator.activities.heartbeat`).
    """

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await heartbeating(fn(*args, **kwargs))
        except OrchestratorError as exc:
            raise as_application_error(exc) from exc

    return wrapper
