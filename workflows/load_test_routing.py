"""How LiveLoadTestWorkflow moves routing: through the rebalancer, or, with none, itself.

A test first asks who writes routing (:data:`WRITER_PATCH`):

- a rebalancer runs and trusts its view of the fleet: the test's pins are overrides,
  released at the end with the table found, which the rebalancer puts back verbatim;
- a rebalancer runs but has no trusted view yet (its first epochs): the test waits,
  phase ``waiting`` with the reason in its progress, polling every few seconds;
- no rebalancer runs (never started, or its run ended): nothing to pause and nobody to
  ask, so the test writes routing itself, with If-Match on the version it last read or
  wrote (anyone else's write since ends the test instead of being overwritten), and puts
  back the exact table found. A region that a dead rebalancer's last run held (a drain)
  is refused, as the rebalancer would.

"Restored" then means: the exact table found (no rebalancer), or the hold released and
the region's share within the rebalancer's ramp of the share found, per table it
published since (see :func:`orchestrator.activities.load_test.judge_restore`).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.load_test import LoadTestActivities
    from orchestrator.activities.overrides import OverrideActivities
    from orchestrator.contracts.load_test import (
        AbortInput,
        DirectWriteInput,
        LoadTestBaseline,
        LoadTestInput,
        LoadTestPhase,
        RoutingCheck,
        RoutingCheckInput,
        load_test_owner,
    )
    from orchestrator.contracts.rebalancer import (
        ClearOverrideInput,
        RoutingWriter,
        SetOverrideInput,
    )
    from orchestrator.policy.rebalance.inputs import Override

__all__ = ["REFUSALS", "RESTORE_TOLERANCE", "WRITER_PATCH", "RoutingMoves"]

#: the routing read back must match the recorded table this closely (it is put back verbatim)
RESTORE_TOLERANCE = 1e-9
#: a refusal of the next pin ends the test (capacity found so far stands); others fail it
REFUSALS = ("Infeasible", "UnsafeRequest")
#: ask who writes routing (and wait for a trusted view) before the baseline is read
WRITER_PATCH = "loadtest-any-routing-writer"
#: seconds between looks at a rebalancer that has no trusted view yet
WAIT_POLL_S = (1.0, 10.0)


class RoutingMoves:
    """Mixed into LiveLoadTestWorkflow: find the writer, pin, put back, check."""

    inp: LoadTestInput
    phase: LoadTestPhase
    steps: int
    share: float | None
    leased: bool
    aborted: AbortInput | None
    #: None: recorded before WRITER_PATCH (the rebalancer was assumed)
    writer: RoutingWriter | None
    waiting: str
    #: the routing version the test last wrote (direct mode)
    direct_version: int | None
    restore_note: str
    released_version: int | None

    async def _activity(self, method: Any, *args: Any, timeout_s: float = 60) -> Any:
        raise NotImplementedError

    @property
    def direct(self) -> bool:
        return self.writer is not None and not self.writer.running

    def _key(self, what: str) -> str:
        info = workflow.info()
        return f"{info.workflow_id}/{info.run_id}/{what}"

    async def _find_writer(self) -> None:
        if not workflow.patched(WRITER_PATCH):
            return
        while True:
            writer: RoutingWriter = await self._activity(OverrideActivities.writer)
            self.writer = writer
            if not writer.running or self.aborted is not None:
                return
            status = writer.status
            if status is None or status.trusted_view:
                self.waiting = ""
                return
            last = status.epochs[-1] if status.epochs else None
            seen = f"; its epoch {last.epoch}: {last.outcome} {last.reason}" if last else ""
            self.phase = "waiting"
            self.waiting = f"waiting for the rebalancer's first trusted view of the fleet{seen}"
            poll = min(max(self.inp.window_s, WAIT_POLL_S[0]), WAIT_POLL_S[1])
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self.aborted is not None, timeout=timedelta(seconds=poll)
                )

    async def _holds(self) -> list[Override]:
        if self.writer is None:
            status = await self._activity(OverrideActivities.status)
            return list(status.overrides)
        if self.writer.status is not None:
            return list(self.writer.status.overrides)
        return list(self.writer.holds)

    async def _pin(self, owner: str, share: float, baseline: LoadTestBaseline) -> str | None:
        """Pin the region at ``share``; the refusal reason when it cannot be."""
        if self.direct:
            return await self._pin_directly(share, baseline)
        inp = self.inp
        self.leased = True
        try:
            await self._activity(
                OverrideActivities.request,
                SetOverrideInput(
                    region=inp.region,
                    owner=owner,
                    reason=inp.reason or f"load test step {self.steps + 1}",
                    pin_share=share,
                    wait_applied=True,
                ),
                timeout_s=120,
            )
        except ActivityError as exc:
            kind = exc.cause.type if isinstance(exc.cause, ApplicationError) else None
            if kind == "OverrideConflict":
                # Another owner (a drain) holds the region: nothing of ours to release.
                self.leased = self.steps > 0
                raise ApplicationError(
                    f"load test refused: {exc.cause}", type="OverrideConflict", non_retryable=True
                ) from None
            if kind in REFUSALS and self.steps > 0:
                return f"rebalancer refused a pin of {share:.1%}: {exc.cause}"
            raise
        self.share = share
        return None

    async def _pin_directly(self, share: float, baseline: LoadTestBaseline) -> str | None:
        self.leased = True
        written = await self._activity(
            LoadTestActivities.write_directly,
            DirectWriteInput(
                region=self.inp.region,
                share=share,
                base=baseline.fractions,
                if_match=self.direct_version or baseline.routing_version,
                idempotency_key=self._key(f"pin-{self.steps + 1}"),
                reason=f"load test {workflow.info().workflow_id} step {self.steps + 1}",
            ),
        )
        if written.conflict:
            return (
                f"routing changed under the test (now v{written.version}): another writer "
                "(a rebalancer started?) owns it; the test stops"
            )
        self.direct_version, self.share = written.version, share
        return None

    async def _release(self, baseline: LoadTestBaseline) -> None:
        self.phase = "restoring"
        if not self.leased:
            return
        if self.direct:
            written = await self._activity(
                LoadTestActivities.write_directly,
                DirectWriteInput(
                    region=self.inp.region,
                    base=baseline.fractions,
                    if_match=self.direct_version or baseline.routing_version,
                    idempotency_key=self._key("restore"),
                    reason=f"load test {workflow.info().workflow_id}: the table found, put back",
                ),
            )
            if written.conflict:
                self.restore_note = (
                    f"routing changed by another writer (v{written.version}) after the test's "
                    "last write; not overwritten"
                )
            self.released_version = written.version
            self.leased, self.share = False, None
            return
        released = await self._activity(
            OverrideActivities.release,
            ClearOverrideInput(
                region=self.inp.region,
                owner=load_test_owner(workflow.info().workflow_id),
                wait_applied=True,
                restore_fractions=baseline.fractions,
            ),
            timeout_s=120,
        )
        self.released_version = released.version
        self.leased, self.share = False, None

    async def _check(self, baseline: LoadTestBaseline) -> RoutingCheck:
        inp = RoutingCheckInput(fractions=baseline.fractions, tolerance=RESTORE_TOLERANCE)
        if self.writer is not None:
            status = self.writer.status
            inp = inp.model_copy(
                update={
                    "region": self.inp.region,
                    "service": self.inp.service,
                    "baseline_share": baseline.region_share,
                    "total_demand": baseline.total_demand,
                    "released_version": self.released_version,
                    "ramp": status.max_utilization_increase if status is not None else None,
                }
            )
        check: RoutingCheck = await self._activity(LoadTestActivities.check_routing, inp)
        if self.restore_note:
            check = check.model_copy(update={"restored": False, "how": self.restore_note})
        return check
