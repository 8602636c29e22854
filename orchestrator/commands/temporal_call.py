"""Running one command's Temporal calls, with every failure turned into one line."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.service import RPCError

from orchestrator.commands.output import fail
from orchestrator.commands.platform import settings_or_exit
from orchestrator.config import Settings
from orchestrator.exceptions import OrchestratorError
from orchestrator.temporal import connect

__all__ = ["with_client"]

T = TypeVar("T")


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
        fail(f"{what} failed: {exc.cause or exc}")
    except WorkflowUpdateFailedError as exc:
        fail(f"refused: {exc.cause}")
    except RPCError as exc:
        fail(f"Temporal refused the request: {exc.message}")
