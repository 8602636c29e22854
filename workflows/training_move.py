"""A planned move of a training job, run by its supervisor for the ``move_job`` Update.

Read the cluster; if none of the job's hosts is in the avoided set there is nothing
to do (``not_needed``). A job that has already failed there (its building lost power
before the watch loop noticed) is the watch loop's to recover, so that the failure, its
MTTR and its lost steps are recorded; the move waits for that recovery and looks again.
Else place the job on healthy hosts outside it (the recovery's
placement policy, the avoided hosts left out of the candidates, so spares come first);
with no room the job stays where it runs (``waiting``, saying what is short). Then
checkpoint the job on demand at its current step, restart it on the new hosts from
that checkpoint, and wait until it steps past it: a planned move loses no step.
Every fleet change's key is ``<supervisor id>/move-<request id>/<change>``, so a
retried activity or a replay applies each once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.training import (
        MutationInput,
        ProgressInput,
        ProgressResult,
        StartInput,
        TrainingActivities,
    )
    from orchestrator.activities.training_detect import classify
    from orchestrator.contracts.training import JobState, StartJobRequest
    from orchestrator.contracts.training_moves import (
        MOVE_JOB_UPDATE,
        MoveJobRequest,
        MoveJobResult,
        MoveOutcome,
        MoveRecord,
        move_request_problem,
    )
    from orchestrator.contracts.training_supervisor import (
        FailureKind,
        SupervisorInput,
        SupervisorState,
        WatchMode,
    )
    from orchestrator.exceptions import InvalidRequest, PolicyError
    from orchestrator.policy.training.placement import place_job
    from workflows.training_recovery import MUTATION_RETRY, poll_retry

__all__ = ["MOVE_DEFERS_TO_RECOVERY_PATCH", "PlannedMoves", "planned_move"]

_CALL = timedelta(seconds=30)
#: a move that finds the job failed waits for the watch loop's recovery instead of
#: restarting the job itself (which left the failure unrecorded)
MOVE_DEFERS_TO_RECOVERY_PATCH = "training-move-defers-to-recovery"


class PlannedMoves:
    """The ``move_job`` Update of TrainingJobSupervisorWorkflow (a mixin).

    The supervisor stays its job's single writer: a move waits for a recovery in
    progress to end, moves run one at a time, and ``move_epoch`` tells the watch loop
    that a stop it saw was planned (not a failure). A request id seen before answers
    the first move's result and changes nothing, across continue-as-new too.
    """

    _inp: SupervisorInput | None
    _state: SupervisorState

    def _init_moves(self) -> None:
        self._move_lock = asyncio.Lock()
        self.moving = False
        #: moves begun in this run: a watch result from across one is stale
        self.move_epoch = 0
        #: move_job Updates being handled (continue-as-new waits for none)
        self.move_calls = 0
        #: recoveries the watch loop finished in this run (a deferred move waits for one)
        self.recoveries_done = 0
        #: moves waiting for the watch loop to recover their failed job: continue-as-new,
        #: which waits for every move to end, must not wait for these
        self.deferred_moves = 0

    def _move_done(self, request_id: str) -> MoveJobResult | None:
        moves = [] if self._inp is None else self._inp.moves
        return next((m.result for m in moves if m.request_id == request_id), None)

    @workflow.update(name=MOVE_JOB_UPDATE)
    async def move_job(self, req: MoveJobRequest) -> MoveJobResult:
        self.move_calls += 1
        try:
            return await self._move_job(req)
        finally:
            self.move_calls -= 1

    async def _move_job(self, req: MoveJobRequest) -> MoveJobResult:
        await workflow.wait_condition(lambda: self._inp is not None)
        async with self._move_lock:
            done = self._move_done(req.request_id)
            if done is not None:
                return done
            await workflow.wait_condition(lambda: self._state is not SupervisorState.RECOVERING)
            inp = self._inp
            assert inp is not None
            requested = workflow.now()
            while True:
                if self._state in (SupervisorState.FINISHED, SupervisorState.HALTED):
                    result = MoveJobResult(
                        job=inp.job,
                        outcome=MoveOutcome.NOT_NEEDED
                        if self._state is SupervisorState.FINISHED
                        else MoveOutcome.WAITING,
                        request_id=req.request_id,
                        detail=f"the supervisor has {self._state.value}",
                    )
                    break
                recovered = self.recoveries_done
                self.moving, self.move_epoch = True, self.move_epoch + 1
                self._state = SupervisorState.MOVING
                try:
                    moved = await planned_move(inp, req)
                finally:
                    self.moving = False
                    self._state = SupervisorState.WATCHING
                if moved is not None:
                    result = moved
                    break
                await self._await_recovery(recovered, inp.poll_s)
            inp.moves.append(
                MoveRecord(
                    request_id=req.request_id,
                    reason=req.reason,
                    avoid_buildings=req.avoid_buildings,
                    avoid_hosts=req.avoid_hosts,
                    requested_at=requested,
                    finished_at=workflow.now(),
                    result=result,
                )
            )
            return result

    async def _await_recovery(self, recovered: int, poll_s: float) -> None:
        """Until the watch loop has recovered the failed job (or ended), or a while has
        passed: a failure the move saw that the watch does not confirm (a hang that
        resolved) is looked at again rather than waited on forever."""
        ended = (SupervisorState.FINISHED, SupervisorState.HALTED)
        self.deferred_moves += 1
        try:
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(
                    lambda: self.recoveries_done > recovered or self._state in ended,
                    timeout=timedelta(seconds=max(30.0, 10 * poll_s)),
                )
        finally:
            self.deferred_moves -= 1
        await workflow.wait_condition(lambda: self._state is not SupervisorState.RECOVERING)

    @move_job.validator
    def _validate_move(self, req: MoveJobRequest) -> None:
        problem = move_request_problem(req)
        if problem is not None:
            field, reason = problem
            raise ApplicationError(
                f"move_job: {field}: {reason}", type=InvalidRequest.type_name(), non_retryable=True
            )


async def planned_move(inp: SupervisorInput, req: MoveJobRequest) -> MoveJobResult | None:
    """The move's result, or None when the job has failed on avoided hosts: a failure
    for the watch loop to record and recover, not a planned stop."""
    started = workflow.now()
    key = f"{workflow.info().workflow_id}/move-{req.request_id}"
    job = inp.job

    def answer(outcome: MoveOutcome, **fields: object) -> MoveJobResult:
        took = (workflow.now() - started).total_seconds()
        return MoveJobResult.model_validate(
            {"job": job, "outcome": outcome, "request_id": req.request_id, "duration_s": took}
            | fields
        )

    view = await workflow.execute_activity_method(
        TrainingActivities.read,
        job,
        start_to_close_timeout=_CALL,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=MUTATION_RETRY,
    )
    cluster = view.cluster
    current = next(j for j in cluster.jobs if j.spec.name == job)
    building = {h.name: h.building for h in cluster.hosts}
    avoid_b, avoid_h = set(req.avoid_buildings), set(req.avoid_hosts)

    def avoided(name: str) -> bool:
        return name in avoid_h or building.get(name) in avoid_b

    there = [n for n in current.hosts if avoided(n)]
    if current.state is JobState.FINISHED or not there:
        why = "the job has finished" if current.state is JobState.FINISHED else "no host there"
        return answer(
            MoveOutcome.NOT_NEEDED, from_hosts=current.hosts, detail=why + _lost_there(inp, avoided)
        )
    failing = classify(cluster, current, inp.hang_after_s)
    if (
        failing is not None
        and failing[0] is not FailureKind.LAUNCH
        and workflow.patched(MOVE_DEFERS_TO_RECOVERY_PATCH)
    ):
        return None
    try:
        placement = place_job(
            current.spec,
            [h for h in cluster.hosts if not avoided(h.name)],
            now=cluster.now,
            quarantine=[*cluster.quarantine, *inp.quarantine],
            incidents=cluster.incidents,
        )
    except PolicyError as exc:
        return answer(MoveOutcome.WAITING, from_hosts=current.hosts, detail=str(exc))

    stopped = await workflow.execute_activity_method(
        TrainingActivities.checkpoint_stop,
        MutationInput(job=job, idempotency_key=f"{key}/checkpoint"),
        start_to_close_timeout=timedelta(seconds=90),
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=MUTATION_RETRY,
    )
    detail = stopped.result.detail
    step = int(detail.get("step", 0))
    ckpt = detail.get("checkpoint_step")
    await workflow.execute_activity_method(
        TrainingActivities.start,
        StartInput(
            request=StartJobRequest(job=job, hosts=placement.hosts, checkpoint_step=ckpt),
            idempotency_key=f"{key}/start",
        ),
        start_to_close_timeout=_CALL,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=MUTATION_RETRY,
    )
    resumed = int(ckpt or 0)
    progress = await _await_progress(inp, resumed)
    note = (
        f"{req.reason}; stepping again on {len(placement.hosts)} hosts"
        if progress.ok
        else f"{req.reason}; restart not confirmed: {progress.reason}"
    )
    return answer(
        MoveOutcome.MOVED,
        from_hosts=current.hosts,
        to_hosts=placement.hosts,
        checkpoint_step=ckpt,
        stopped_at_step=step,
        lost_steps=max(step - resumed, 0),
        detail=note,
    )


async def _await_progress(inp: SupervisorInput, past_step: int) -> ProgressResult:
    timeout_s = inp.confirm_timeout_s
    poll_s = inp.confirm_poll_s or inp.poll_s
    if inp.watch_mode is WatchMode.RETRY:
        return await workflow.execute_activity_method(
            TrainingActivities.await_progress,
            ProgressInput(
                job=inp.job,
                past_step=past_step,
                timeout_s=timeout_s,
                hang_after_s=inp.hang_after_s,
                poll_s=poll_s,
                once=True,
            ),
            start_to_close_timeout=_CALL,
            schedule_to_close_timeout=timedelta(seconds=2 * timeout_s + 60),
            retry_policy=poll_retry(poll_s),
        )
    return await workflow.execute_activity_method(
        TrainingActivities.await_progress,
        ProgressInput(
            job=inp.job,
            past_step=past_step,
            timeout_s=timeout_s,
            hang_after_s=inp.hang_after_s,
            poll_s=poll_s,
        ),
        start_to_close_timeout=timedelta(seconds=timeout_s + 60),
        heartbeat_timeout=timedelta(seconds=5),
        retry_policy=MUTATION_RETRY,
    )


def _lost_there(inp: SupervisorInput, avoided: Callable[[str], bool]) -> str:
    """What the newest failure that took the job off those hosts cost, for a move that
    finds the job already gone from them (after a power loss: the recovery moved it)."""
    for failure in reversed(inp.failures):
        left = failure.hosts_out if failure.hosts_compacted else failure.hosts_before
        if failure.kind != "launch" and any(avoided(h) for h in left):
            mttr = "not yet recovered" if failure.mttr_s is None else f"MTTR {failure.mttr_s:.1f}s"
            lost = "?" if failure.lost_steps is None else str(failure.lost_steps)
            return (
                f"; the supervisor recovered it from {failure.kind} (failure "
                f"{failure.number}): {lost} steps lost, {mttr}"
            )
    return ""
