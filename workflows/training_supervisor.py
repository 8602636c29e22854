"""TrainingJobSupervisorWorkflow: one per job (``training-<job>``), long-lived.

It watches the job through an activity that heartbeats to Temporal, and on each
failure runs a :class:`~workflows.training_recovery.TrainingRecoveryWorkflow` child.
Before every recovery the crash-loop guard looks at the attempts so far: three in a
row without progress halt the job and alert a human instead of restarting forever.
Everything it knows travels through continue-as-new, so history stays short over a
54-day run. The ``status`` query answers state, failures with MTTD, MTTR and lost
steps, and ETTR so far.

With ``watch_mode=retry`` each poll is one short activity attempt and the wait
between polls is Temporal's retry timer, not a sleep inside a running activity; a
time-skipping server can then drive a 54-day trace in minutes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.training import (
        AlertInput,
        TrainingActivities,
        WatchInput,
        WatchResult,
    )
    from orchestrator.contracts.failure_totals import totals_of
    from orchestrator.contracts.training_supervisor import (
        FailureKind,
        FailureRecord,
        RecoveryInput,
        SupervisorInput,
        SupervisorState,
        SupervisorStatus,
        WatchMode,
    )
    from orchestrator.policy.training.checkpoints import resume_blamed
    from orchestrator.policy.training.recovery import (
        CrashLoopAction,
        RecoveryAttempt,
        crash_loop_decision,
    )
    from orchestrator.temporal import OUTCOME
    from workflows import observe
    from workflows.training_attempts import close_attempt, count_failed_resume
    from workflows.training_carry import carry, observed_ettr_carried
    from workflows.training_move import PlannedMoves
    from workflows.training_recovery import (
        MUTATION_RETRY,
        TrainingRecoveryWorkflow,
        poll_retry,
    )

__all__ = [
    "BOUNDED_CARRY_PATCH",
    "FATAL_HALT_PATCH",
    "HARDWARE_RESUME_PATCH",
    "OUTAGE_ETTR_PATCH",
    "TrainingJobSupervisorWorkflow",
    "ettr_so_far",
]

#: ETTR from merged outages (an unrecovered one ends at the next failure's onset)
OUTAGE_ETTR_PATCH = "training-ettr-outages"
#: a failure the fleet reports as not retryable (disk full) halts at once: no recovery,
#: since every restart would die at the same write
FATAL_HALT_PATCH = "training-fatal-halt"
#: a supervisor sets the Outcome search attribute when it ends (finished or halted)
OUTCOME_PATCH = "training-outcome-attribute"
#: continue-as-new carries the newest failure records and totals over the rest
BOUNDED_CARRY_PATCH = "training-bounded-carry"
#: a run a GPU, host or building failure ended early is no failed resume of its checkpoint
HARDWARE_RESUME_PATCH = "training-hardware-not-resume"


def ettr_so_far(
    failures: list[FailureRecord], started: datetime, now: datetime, step_s: float
) -> float | None:
    """Productive time over wall time: each failure costs its MTTR plus its lost steps."""
    wall = (now - started).total_seconds()
    if wall <= 0:
        return None
    lost = 0.0
    for f in failures:
        if f.kind is FailureKind.LAUNCH:
            continue
        end = f.recovered_at or now
        lost += max((end - f.onset_at).total_seconds(), 0.0)
        lost += (f.lost_steps or 0) * step_s
    return max(wall - lost, 0.0) / wall


@workflow.defn
class TrainingJobSupervisorWorkflow(PlannedMoves):
    def __init__(self) -> None:
        self._init_moves()
        self._inp: SupervisorInput | None = None
        self._state = SupervisorState.WATCHING
        self._step = 0
        self._total: int | None = None
        self._step_s = 0.0
        self._alert: str | None = None
        self._outage_ettr = False
        self._bounded = False

    @workflow.query
    def status(self) -> SupervisorStatus:
        inp = self._inp
        failures = [] if inp is None else [f for f in inp.failures if f.kind != "launch"]
        ettr = None
        if inp is not None and inp.started_at is not None and self._outage_ettr:
            ettr = observed_ettr_carried(inp, workflow.now(), self._step_s)
        elif inp is not None and inp.started_at is not None:
            ettr = ettr_so_far(inp.failures, inp.started_at, workflow.now(), self._step_s)
        return SupervisorStatus(
            job="" if inp is None else inp.job,
            state=self._state,
            failures=failures,
            step=self._step,
            total_steps=self._total,
            ettr=ettr,
            alert=self._alert,
            mttd_s=[f.mttd_s for f in failures],
            mttr_s=[f.mttr_s for f in failures],
            lost_steps=[f.lost_steps for f in failures],
            totals=totals_of(None, []) if inp is None else totals_of(inp.totals, inp.failures),
            dropped=0 if inp is None or inp.totals is None else inp.totals.records,
            moves=[] if inp is None else list(inp.moves),
        )

    @workflow.run
    async def run(self, inp: SupervisorInput) -> SupervisorStatus:
        self._outage_ettr = workflow.patched(OUTAGE_ETTR_PATCH)
        self._bounded = workflow.patched(BOUNDED_CARRY_PATCH)
        if inp.started_at is None:
            inp = inp.model_copy(update={"started_at": workflow.now()})
        self._inp = inp
        recoveries_this_run = 0
        while True:
            if (
                recoveries_this_run >= inp.failures_per_run
                or workflow.info().is_continue_as_new_suggested()
            ):
                # A move asked for (or under way) finishes in this run: its Update would
                # otherwise be left unanswered by continue-as-new. One that found its job
                # failed waits for this loop's recovery (deferred_moves): watch first.
                if self._state is SupervisorState.RECOVERING:
                    self._state = SupervisorState.WATCHING
                await workflow.wait_condition(
                    lambda: self.move_calls == 0 or self.deferred_moves > 0
                )
                if not self.deferred_moves:
                    if self._bounded:
                        inp = carry(inp, workflow.now())
                    workflow.continue_as_new(inp)
            self._state = SupervisorState.WATCHING
            epoch = self.move_epoch
            watch = await self._watch(inp)
            if self.moving or epoch != self.move_epoch:
                # A planned move (move_job) stopped and restarted the job meanwhile: what
                # this watch saw is the move's doing, not a failure. Watch the new run.
                await workflow.wait_condition(lambda: not self.moving)
                continue
            job = watch.job
            self._step, self._total, self._step_s = job.step, job.total_steps, job.step_s
            blamed = watch.kind is None or resume_blamed(watch.kind.value)
            if not blamed and not workflow.patched(HARDWARE_RESUME_PATCH):
                blamed = True  # histories from before the patch counted every failure
            close_attempt(inp, job.step, job.checkpoint_step, blamed=blamed)
            if watch.kind is None:
                self._state = SupervisorState.FINISHED
                self._outcome("finished")
                return self.status()
            decision = crash_loop_decision(inp.attempts, limit=inp.crash_loop_limit)
            number = len(inp.failures) + 1 + (inp.totals.records if inp.totals else 0)
            failure = FailureRecord(
                number=number,
                kind=watch.kind,
                onset_at=watch.onset_at,
                detected_at=watch.detected_at,
                failed_at_step=job.step,
                hosts_before=job.hosts,
                detail=watch.detail,
            )
            if watch.kind is not FailureKind.LAUNCH:  # a launch is no failure (see status)
                observe.training_failure(inp.job, watch.kind.value)
                observe.recovery(inp.job, failure.mttd_s, None, None)
            if watch.kind is FailureKind.FATAL and workflow.patched(FATAL_HALT_PATCH):
                inp.failures.append(failure)
                return await self._halt(
                    inp,
                    f"job {inp.job}: {watch.detail}; not restarting: every restart would "
                    "fail the same way until someone fixes it",
                )
            if decision.action is CrashLoopAction.HALT:
                inp.failures.append(failure)
                return await self._halt(inp, decision.reason)
            self._state = SupervisorState.RECOVERING
            try:
                result = await workflow.execute_child_workflow(
                    TrainingRecoveryWorkflow.run,
                    RecoveryInput(
                        job=inp.job,
                        failure=failure,
                        bad_hosts=watch.bad_hosts,
                        quarantine=inp.quarantine,
                        failed_resumes=inp.failed_resumes,
                        max_failed_resumes=inp.max_failed_resumes,
                        key_prefix=f"{workflow.info().workflow_id}/failure-{number}",
                        confirm_timeout_s=inp.confirm_timeout_s,
                        hang_after_s=inp.hang_after_s,
                        poll_s=inp.confirm_poll_s or inp.poll_s,
                        watch_mode=inp.watch_mode,
                    ),
                    id=f"{workflow.info().workflow_id}-recovery-{number}",
                )
            except ChildWorkflowError as exc:
                inp.failures.append(failure)
                cause = exc.cause if exc.cause is not None else exc
                return await self._halt(inp, f"recovery {number} failed: {cause}")
            recoveries_this_run += 1
            self.recoveries_done += 1
            if self._bounded and inp.failures:
                # only the newest record keeps its full host lists (a status stays small)
                inp.failures[-1] = inp.failures[-1].compacted()
            inp.failures.append(result.failure)
            inp.quarantine.extend(result.new_quarantine)
            if result.failure.kind is not FailureKind.LAUNCH:
                observe.recovery(inp.job, None, result.failure.mttr_s, self.status().ettr)
            resumed = result.failure.resumed_from_step or 0
            inp.attempts.append(
                RecoveryAttempt(
                    failed_at_step=max(job.step, resumed),
                    resumed_from_step=resumed,
                    reached_step=result.reached_step,
                )
            )
            if result.reached_step is not None:
                count_failed_resume(inp, resumed)

    async def _watch(self, inp: SupervisorInput) -> WatchResult:
        if inp.watch_mode is WatchMode.RETRY:
            return await workflow.execute_activity_method(
                TrainingActivities.watch,
                WatchInput(
                    job=inp.job, hang_after_s=inp.hang_after_s, poll_s=inp.poll_s, once=True
                ),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=poll_retry(inp.poll_s),
            )
        return await workflow.execute_activity_method(
            TrainingActivities.watch,
            WatchInput(job=inp.job, hang_after_s=inp.hang_after_s, poll_s=inp.poll_s),
            start_to_close_timeout=timedelta(days=365),
            heartbeat_timeout=timedelta(seconds=5),
            retry_policy=MUTATION_RETRY,
        )

    def _outcome(self, outcome: str) -> None:
        """The Outcome search attribute: finished, or halted for an operator."""
        if workflow.patched(OUTCOME_PATCH):
            workflow.upsert_search_attributes([OUTCOME.value_set(outcome)])

    async def _halt(self, inp: SupervisorInput, reason: str) -> SupervisorStatus:
        self._state = SupervisorState.HALTED
        self._alert = reason
        self._outcome("halted")
        await workflow.execute_activity_method(
            TrainingActivities.alert,
            AlertInput(job=inp.job, message=reason),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=MUTATION_RETRY,
        )
        return self.status()
