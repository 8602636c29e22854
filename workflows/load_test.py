"""LiveLoadTestWorkflow: Kraken's live load test of one region.

With a rebalancer running, the test never writes routing. It holds a pin on the
target region (an override owned by ``loadtest:<workflow id>``) and raises the
pinned share step by step so the region's load goes where the step policy asks;
after each step it lets the new table settle, judges one window of banded health
and asks the policy again. STOP, BACKOFF, an abort, a refusal or an error all end
the same way (a saga): the pin is released with the routing table read at the
start, which the rebalancer publishes verbatim in the override's urgent epoch,
and the routing is then read back and checked. With no rebalancer running the
test writes the same pins itself and puts back the exact table found; see
:mod:`workflows.load_test_routing` for both, and what "restored" means in each.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.load_test import LoadTestActivities
    from orchestrator.contracts.load_test import (
        AbortInput,
        LoadTestBaseline,
        LoadTestInput,
        LoadTestPhase,
        LoadTestProgress,
        LoadTestResult,
        ObserveInput,
        Outcome,
        PrepareInput,
        StepObservation,
        StepSummary,
        decide,
        load_test_owner,
        outcome_of,
        summarize,
    )
    from orchestrator.contracts.rebalancer import RoutingWriter
    from orchestrator.exceptions import NON_RETRYABLE_ERROR_TYPES
    from orchestrator.policy.health_metrics import HealthMetric
    from orchestrator.policy.loadtest.kraken import StepRecord
    from orchestrator.temporal import OUTCOME, REGION, RUN_KIND
    from workflows import observe
    from workflows.load_test_routing import RoutingMoves

__all__ = ["LiveLoadTestWorkflow"]

RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=8,
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)
#: windows of total demand averaged to turn a load into a share
DEMAND_WINDOWS = 3
#: load tests set the Outcome search attribute when they end
OUTCOME_PATCH = "loadtest-outcome-attribute"


@workflow.defn
class LiveLoadTestWorkflow(RoutingMoves):
    @workflow.init
    def __init__(self, inp: LoadTestInput) -> None:
        self.inp = inp
        self.phase: LoadTestPhase = "preparing"
        self.history: list[StepSummary] = []
        self.records: list[StepRecord] = []
        self.steps = 0
        self.share: float | None = None
        self.aborted: AbortInput | None = None
        self.outcome: Outcome | None = None
        self.reason = ""
        self.baseline: LoadTestBaseline | None = None
        self.demands: list[float] = []
        #: whether a pin of ours may be in place (set before asking, so a retry is covered)
        self.leased = False
        self.writer: RoutingWriter | None = None
        self.waiting = ""
        self.direct_version: int | None = None
        self.restore_note = ""
        self.released_version: int | None = None

    @workflow.run
    async def run(self, inp: LoadTestInput) -> LoadTestResult:
        workflow.upsert_search_attributes(
            [RUN_KIND.value_set("loadtest"), REGION.value_set(inp.region)]
        )
        started = workflow.now()
        metrics = inp.watched_metrics()
        await self._find_writer()
        self.phase = "preparing"
        baseline = self.baseline = await self._activity(
            LoadTestActivities.prepare,
            PrepareInput(region=inp.region, service=inp.service, window_s=inp.window_s),
        )
        try:
            await self._steps(metrics, baseline)
        except BaseException as exc:
            # Whatever ended the test (an error, a cancel), the routing found is put back.
            self.outcome, self.reason = "error", f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                await self._release(baseline)
            self.phase = "failed"
            self._outcome("error")
            raise
        ended = workflow.now()
        await self._release(baseline)
        restore_s = (workflow.now() - ended).total_seconds()
        check = await self._check(baseline)
        self.phase = "done"
        self._outcome(self.outcome or "stopped")
        return summarize(
            workflow_id=workflow.info().workflow_id,
            inp=inp,
            outcome=self.outcome or "stopped",
            reason=self.reason,
            steps=self.steps,
            records=self.records,
            history=self.history,
            baseline=baseline,
            check=check,
            restore_s=restore_s,
            started_at=started,
            finished_at=workflow.now(),
            writer="direct" if self.direct else "rebalancer",
        )

    def _outcome(self, outcome: str) -> None:
        """The Outcome search attribute: how the test ended (stopped, backoff, error, ...)."""
        observe.load_test_ended(self.inp.region, outcome)
        if workflow.patched(OUTCOME_PATCH):
            workflow.upsert_search_attributes([OUTCOME.value_set(outcome)])

    async def _steps(self, metrics: list[HealthMetric], baseline: LoadTestBaseline) -> None:
        inp = self.inp
        owner = load_test_owner(workflow.info().workflow_id)
        holds = await self._holds()
        held = [o for o in holds if o.region == inp.region and o.owner != owner]
        if held:
            # Refused before anything moves; the rebalancer's validator would refuse too.
            raise ApplicationError(
                f"load test refused: region {inp.region} is held by {held[0].owner} "
                f"({held[0].reason})",
                type="OverrideConflict",
                non_retryable=True,
            )
        latest = await self._observe(metrics, None)
        self._record(None, latest)
        config = inp.policy.config(
            reference_load=baseline.theoretical_capacity,
            baseline_load=latest.load,
            max_load=inp.max_pin_share * baseline.total_demand,
        )
        self.phase = "stepping"
        while True:
            if self.aborted is not None:
                self._end("aborted", f"aborted by {self.aborted.by}: {self.aborted.reason}")
                return
            decision = decide(config, self.records)
            self.history[-1].decision = decision
            if decision.terminal:
                self._end(outcome_of(decision), decision.reason)
                return
            if self.steps >= inp.max_steps:
                self._end("max_steps", f"{inp.max_steps} steps taken without reaching NOMORE")
                return
            if decision.moves:
                # Demand over the last few windows: one window's count noise would miss the load.
                recent = self.demands[-DEMAND_WINDOWS:]
                share = min(decision.load * len(recent) / sum(recent), inp.max_pin_share)
                refusal = await self._pin(owner, share, baseline)
                if refusal is not None:
                    self._end("refused", refusal)
                    return
            self.steps += 1
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self.aborted is not None,
                    timeout=timedelta(seconds=inp.settle_s + inp.window_s),
                )
            if self.aborted is not None:
                continue
            self._record(decision.load, await self._observe(metrics, decision.load))

    async def _observe(
        self, metrics: list[HealthMetric], expected: float | None
    ) -> StepObservation:
        return await self._activity(
            LoadTestActivities.observe,
            ObserveInput(
                region=self.inp.region,
                service=self.inp.service,
                window_s=self.inp.window_s,
                metrics=metrics,
                expected_load=expected,
            ),
        )

    async def _activity(self, method, *args, timeout_s: float = 60):  # type: ignore[no-untyped-def]
        return await workflow.execute_activity_method(
            method,
            args=list(args),
            start_to_close_timeout=timedelta(seconds=timeout_s),
            # Every activity here heartbeats: a worker lost mid-attempt costs this, not the
            # start-to-close timeout (120 s for a pin that waits an epoch).
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RETRY,
        )

    def _record(self, target: float | None, obs: StepObservation) -> None:
        self.demands.append(obs.total_demand)
        record = StepRecord(load=obs.load, readings=obs.readings)
        capacity = self.baseline.theoretical_capacity if self.baseline else None
        band = str(getattr(record.band, "value", record.band))
        observe.load_test_step(self.inp.region, band, obs.load, capacity)
        self.records.append(record)
        self.history.append(
            StepSummary(
                index=len(self.history),
                target_load=target,
                pin_share=self.share if target is not None else None,
                load=obs.load,
                band=record.band,
                readings=obs.readings,
                at=workflow.now(),
            )
        )

    def _end(self, outcome: Outcome, reason: str) -> None:
        self.outcome, self.reason = outcome, reason
        workflow.logger.info("load test on %s ends: %s (%s)", self.inp.region, outcome, reason)

    @workflow.update
    async def abort(self, inp: AbortInput) -> LoadTestProgress:
        """End the test now; returns once the routing found at the start is back."""
        self.aborted = inp
        await workflow.wait_condition(lambda: self.phase in ("done", "failed"))
        return self.progress()

    @abort.validator
    def _validate_abort(self, inp: AbortInput) -> None:
        if self.phase in ("done", "failed"):
            raise ApplicationError(f"load test already {self.phase}", type="InvalidRequest")

    @workflow.query
    def progress(self) -> LoadTestProgress:
        last = self.history[-1] if self.history else None
        reason = self.reason
        if not reason and last is not None and last.decision is not None:
            reason = last.decision.reason
        if self.phase == "waiting":
            reason = self.waiting
        return LoadTestProgress(
            workflow_id=workflow.info().workflow_id,
            region=self.inp.region,
            service=self.inp.service,
            phase=self.phase,
            steps=self.steps,
            current_load=last.load if last else None,
            current_share=self.share,
            band=last.band if last else None,
            last_reason=reason,
            theoretical_capacity=self.baseline.theoretical_capacity if self.baseline else None,
            history=self.history,
            aborted_by=self.aborted.by if self.aborted else None,
            outcome=self.outcome,
        )
