"""TrainingRecoveryWorkflow: one recovery of a training job, as a child of its supervisor.

Stop the job, quarantine the hosts whose GPUs failed, pick the newest checkpoint
that verifies, place the job on healthy hosts (another building, or region, when its
own is dark), restart it, and wait until it steps past the checkpoint. Every fleet
mutation's key is ``<supervisor id>/failure-<n>/<step>``, so a retried activity or a
replay on another worker applies each change once. With ``watch_mode=retry`` the
progress check polls once per attempt and Temporal's retry timer waits between polls.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from orchestrator.activities.heartbeat import HEARTBEAT_TIMEOUT
    from orchestrator.activities.training import (
        MutationInput,
        ProgressInput,
        ProgressResult,
        QuarantineInput,
        StartInput,
        TrainingActivities,
    )
    from orchestrator.contracts.training import QuarantineRequest, StartJobRequest
    from orchestrator.contracts.training_supervisor import (
        RecoveryInput,
        RecoveryResult,
        WatchMode,
    )
    from orchestrator.exceptions import NON_RETRYABLE_ERROR_TYPES, PolicyError
    from orchestrator.policy.training.recovery import choose_checkpoint, place_job, quarantine_host

__all__ = ["CALL_HEARTBEAT_PATCH", "MUTATION_RETRY", "TrainingRecoveryWorkflow", "poll_retry"]

MUTATION_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
)
_CALL = timedelta(seconds=30)


def poll_retry(poll_s: float) -> RetryPolicy:
    """The retry policy that is the poller in ``watch_mode=retry``: every ``poll_s``."""
    every = timedelta(seconds=poll_s)
    return RetryPolicy(
        initial_interval=every,
        backoff_coefficient=1.0,
        maximum_interval=every,
        non_retryable_error_types=NON_RETRYABLE_ERROR_TYPES,
    )


_BEAT = timedelta(seconds=5)
#: Stop, quarantine, read and start heartbeat (``reported``) and carry a heartbeat timeout,
#: so an attempt lost with its worker is retried within seconds, not after ``_CALL``. Without
#: it the chaos harness's worker SIGKILLed 0.6 s after a building power loss, inside the
#: recovery's first calls, held that recovery 30 s (decided 34.6 s after the onset instead
#: of ~1 s). Histories recorded before it replay without the timeout.
CALL_HEARTBEAT_PATCH = "recovery-call-heartbeat"


@workflow.defn
class TrainingRecoveryWorkflow:
    @workflow.run
    async def run(self, inp: RecoveryInput) -> RecoveryResult:
        failure = inp.failure.model_copy(deep=True)
        job, key = inp.job, inp.key_prefix
        beat = HEARTBEAT_TIMEOUT if workflow.patched(CALL_HEARTBEAT_PATCH) else None

        await workflow.execute_activity_method(
            TrainingActivities.stop,
            MutationInput(job=job, idempotency_key=f"{key}/stop"),
            start_to_close_timeout=_CALL,
            heartbeat_timeout=beat,
            retry_policy=MUTATION_RETRY,
        )

        records = list(inp.quarantine)
        new_records = []
        for host in inp.bad_hosts:
            record = quarantine_host(
                records, host, f"{failure.kind.value}: {failure.detail}", workflow.now()
            )
            await workflow.execute_activity_method(
                TrainingActivities.quarantine,
                QuarantineInput(
                    request=QuarantineRequest(host=host, reason=record.reason, until=record.until),
                    idempotency_key=f"{key}/quarantine/{host}",
                ),
                start_to_close_timeout=_CALL,
                heartbeat_timeout=beat,
                retry_policy=MUTATION_RETRY,
            )
            records.append(record)
            new_records.append(record)
        failure.quarantined = list(inp.bad_hosts)

        view = await workflow.execute_activity_method(
            TrainingActivities.read,
            job,
            start_to_close_timeout=_CALL,
            heartbeat_timeout=beat,
            retry_policy=MUTATION_RETRY,
        )
        spec = next(j.spec for j in view.cluster.jobs if j.spec.name == job)
        try:
            choice = choose_checkpoint(
                view.checkpoints.checkpoints,
                failed_resumes=inp.failed_resumes,
                max_failed_resumes=inp.max_failed_resumes,
            )
            placement = place_job(
                spec,
                view.cluster.hosts,
                now=view.cluster.now,
                quarantine=[*view.cluster.quarantine, *records],
                incidents=view.cluster.incidents,
            )
        except PolicyError as exc:
            raise ApplicationError(str(exc), type=exc.type_name(), non_retryable=True) from exc
        failure.rejected_checkpoints = [r for r in choice.rejected if r.reason != "superseded"]
        failure.resumed_from_step = choice.step
        failure.hosts_after = placement.hosts
        failure.decided_at = workflow.now()

        started = await workflow.execute_activity_method(
            TrainingActivities.start,
            StartInput(
                request=StartJobRequest(
                    job=job,
                    hosts=placement.hosts,
                    checkpoint_step=None if choice.chosen is None else choice.step,
                ),
                idempotency_key=f"{key}/start",
            ),
            start_to_close_timeout=_CALL,
            heartbeat_timeout=beat,
            retry_policy=MUTATION_RETRY,
        )
        failure.restarted_at = started.at

        progress = await self._await_progress(inp, choice.step)
        failure.confirmed = progress.ok
        if progress.ok:
            failure.recovered_at = progress.at
        else:
            failure.detail = f"{failure.detail}; restart not confirmed: {progress.reason}"
        return RecoveryResult(
            failure=failure,
            new_quarantine=new_records,
            reached_step=None if progress.ok else max(progress.step, choice.step),
        )

    @staticmethod
    async def _await_progress(inp: RecoveryInput, past_step: int) -> ProgressResult:
        if inp.watch_mode is WatchMode.RETRY:
            # The poll's own check ends it after confirm_timeout_s; the schedule-to-close
            # limit is only a backstop for a fleet that stops answering.
            return await workflow.execute_activity_method(
                TrainingActivities.await_progress,
                ProgressInput(
                    job=inp.job,
                    past_step=past_step,
                    timeout_s=inp.confirm_timeout_s,
                    hang_after_s=inp.hang_after_s,
                    poll_s=inp.poll_s,
                    once=True,
                ),
                start_to_close_timeout=_CALL,
                schedule_to_close_timeout=timedelta(seconds=2 * inp.confirm_timeout_s + 60),
                retry_policy=poll_retry(inp.poll_s),
            )
        return await workflow.execute_activity_method(
            TrainingActivities.await_progress,
            ProgressInput(
                job=inp.job,
                past_step=past_step,
                timeout_s=inp.confirm_timeout_s,
                hang_after_s=inp.hang_after_s,
                poll_s=inp.poll_s,
            ),
            start_to_close_timeout=timedelta(seconds=inp.confirm_timeout_s + 60),
            heartbeat_timeout=_BEAT,
            retry_policy=MUTATION_RETRY,
        )
