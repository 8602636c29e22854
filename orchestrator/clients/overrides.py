"""Asking the rebalancer for an override and waiting for an epoch to settle it.

The request goes as a signal naming a ticket; its outcome is read with the
``override_ticket`` query, polled with jittered backoff (see
:mod:`workflows.rebalancer_intake` for why not an Update held open). The ticket
makes the request idempotent: sending it again (a retry, a lost signal, a
rebalancer that continued as new) never applies it twice. A refused or
infeasible request raises the named error the rebalancer recorded, non-retryable.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import timedelta

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from orchestrator.contracts.rebalancer import (
    REBALANCER_ID,
    ClearOverrideInput,
    OverrideApplied,
    OverrideTicket,
    RebalancerStatus,
    SetOverrideInput,
)
from orchestrator.logging import get_logger
from orchestrator.policy.rebalance.inputs import Override

__all__ = ["POLL", "Poll", "rebalancer_holds", "release_override", "request_override"]

log = get_logger(__name__)

#: a query that takes longer than this counts as unanswered (polled again)
QUERY_TIMEOUT = timedelta(seconds=10)


class Poll:
    """How often to read a ticket: from ``first_s``, times ``factor``, at most ``max_s``, each
    wait jittered by +-50% (40 owners polling in step would arrive at the same moment);
    a ticket still unknown ``resend_s`` after its signal is sent again.

    A drain step's wait starts when its override is seen applied, so the time from the
    epoch applying it to the next read is added to every step: with the first read
    0.25-0.75 s after the signal, an override in force within that was seen up to 0.5 s
    late. From 0.1 s a read comes at most about half the elapsed time after the epoch,
    for a few more queries (about 8 rather than 4 in the first 3 s);
    benchmarks/drain_haproxy.py's paced drain went from 1.27-1.29x its shortest safe
    schedule to 1.24-1.27x with this alone."""

    def __init__(
        self, first_s: float = 0.1, factor: float = 1.5, max_s: float = 3.0, resend_s: float = 15.0
    ) -> None:
        self.first_s, self.factor, self.max_s, self.resend_s = first_s, factor, max_s, resend_s


POLL = Poll()


async def request_override(
    handle: WorkflowHandle, inp: SetOverrideInput, *, ticket: str | None = None, poll: Poll = POLL
) -> OverrideApplied:
    """Set (or change) a hold; returns once a table honouring it is in force."""
    inp = inp.model_copy(update={"ticket": ticket or inp.ticket or uuid.uuid4().hex})
    return await _settled(handle, "request_override", inp, inp.ticket or "", poll)


async def release_override(
    handle: WorkflowHandle, inp: ClearOverrideInput, *, ticket: str | None = None, poll: Poll = POLL
) -> OverrideApplied:
    """Lift a hold; returns once a table without it is in force."""
    inp = inp.model_copy(update={"ticket": ticket or inp.ticket or uuid.uuid4().hex})
    return await _settled(handle, "release_override", inp, inp.ticket or "", poll)


async def _settled(
    handle: WorkflowHandle,
    signal: str,
    inp: SetOverrideInput | ClearOverrideInput,
    ticket: str,
    poll: Poll,
) -> OverrideApplied:
    loop = asyncio.get_running_loop()
    await handle.signal(signal, inp)
    sent_at, wait_s = loop.time(), poll.first_s
    while True:
        await asyncio.sleep(wait_s * random.uniform(0.5, 1.5))  # noqa: S311 (jitter, not crypto)
        wait_s = min(wait_s * poll.factor, poll.max_s)
        found = await _read(handle, ticket)
        if found is None or found.outcome == "pending":
            continue
        if found.outcome == "applied":
            return OverrideApplied(
                epoch=found.epoch or 0, version=found.version, region_share=found.region_share
            )
        if found.outcome == "failed":
            raise ApplicationError(found.error, type=found.error_type, non_retryable=True)
        if loop.time() - sent_at >= poll.resend_s:
            # Unknown: not handled yet, or sent to a run that ended before taking it.
            log.info("override ticket unknown; sending again", ticket=ticket, signal=signal)
            await handle.signal(signal, inp)
            sent_at = loop.time()


async def _read(handle: WorkflowHandle, ticket: str) -> OverrideTicket | None:
    """The ticket, or None when the rebalancer did not answer this time (a full query
    buffer while its workflow task runs, a worker too busy): the caller polls again."""
    try:
        return await handle.query(
            "override_ticket", ticket, result_type=OverrideTicket, rpc_timeout=QUERY_TIMEOUT
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise  # no rebalancer: the caller's retry policy decides
        log.info("override ticket not read", ticket=ticket, error=str(exc))
        return None


async def rebalancer_holds(
    client: Client, rpc_timeout: timedelta = QUERY_TIMEOUT
) -> list[Override]:
    """The holds the rebalancer enforces: none when it never started or its run closed."""
    handle = client.get_workflow_handle(REBALANCER_ID)
    try:
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            return []  # a closed rebalancer enforces no hold
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return []  # never started
        raise
    status = await handle.query("status", result_type=RebalancerStatus, rpc_timeout=rpc_timeout)
    return list(status.overrides)
