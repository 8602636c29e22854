"""Running one command's Temporal calls, with every failure turned into one line."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.service import RPCError

from orchestrator.commands.output import fail
from orchestrator.commands.platform import settings_or_exit
from orchestrator.config import Settings
from orchestrator.exceptions import OrchestratorError
from orchestrator.temporal import connect

__all__ = ["real_cause", "with_client"]

T = TypeVar("T")


def real_cause(exc: BaseException) -> str:
    """What actually went wrong, from the innermost cause: the fleet's or the workflow's own
    message, with the activity or child that failed, never "Activity task failed"."""
    where: list[str] = []
    cause: BaseException | None = exc
    inner: BaseException = exc
    while cause is not None:
        if isinstance(cause, ActivityError):
            where.append(f"activity {cause.activity_type}")
        elif isinstance(cause, ChildWorkflowError):
            where.append(f"child {cause.workflow_type} {cause.workflow_id}")
        inner = cause
        cause = getattr(cause, "cause", None) or cause.__cause__
    if isinstance(inner, ApplicationError) and inner.type:
        text = f"{inner.type}: {inner.message}"
    else:
        text = str(getattr(inner, "message", "") or inner)
    return f"{text} (in {', '.join(where)})" if where else text


def with_client(body: Callable[[Client, Settings], Awaitable[T]], what: str = "workflow") -> T:
    """Connect with the configured settings and run ``body``; failures exit with one line."""
    settings = settings_or_exit()

    async def main() -> T:
        return await body(await connect(settings), settings)

    try:
        return asyncio.run(main())
    except OrchestratorError as exc:
        fail(str(exc), code=2)
    except WorkflowFailureError as exc:
        fail(f"{what} failed: {real_cause(exc)}")
    except WorkflowUpdateFailedError as exc:
        fail(f"refused: {real_cause(exc)}")
    except RPCError as exc:
        fail(f"Temporal refused the request: {exc.message}")
