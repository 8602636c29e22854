"""Stopping the rebalancer between epochs: the client side of its ``request_stop`` signal.

A terminate closes the run at once, but not the activity it is running: an epoch's publish
in flight still lands after it. A stop lets the run end at its next epoch boundary, so
once :func:`stop_rebalancer` returns True nothing the run started can write the routing.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.contracts.rebalancer import StopInput

__all__ = ["stop_rebalancer"]


async def stop_rebalancer(
    handle: WorkflowHandle[Any, Any], stop: StopInput, timeout_s: float
) -> bool:
    """True once the run ended after its epoch in progress. False when it did not within
    ``timeout_s`` (no worker polling, a publish retrying against an unreachable fleet): it
    is then terminated, and a publish in flight may still land."""
    await handle.signal("request_stop", stop)
    try:
        await asyncio.wait_for(handle.result(), timeout=timeout_s)
    except TimeoutError:
        reason = f"{stop.reason or 'stopped'} (not stopped within {timeout_s:g} s)"
        try:
            await handle.terminate(reason=reason)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            return True  # it closed by itself between the wait and the terminate
        return False
    return True
