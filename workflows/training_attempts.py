"""The crash-loop guard's attempt records, kept by the training supervisor.

Pure and deterministic: when a watch ends, the supervisor closes the open attempt
(how far the run it started got, and whether it committed a newer checkpoint), and a
resume that got nowhere counts against the checkpoint it resumed from.
"""

from __future__ import annotations

from orchestrator.contracts.training_supervisor import SupervisorInput

__all__ = ["close_attempt", "count_failed_resume"]


def close_attempt(
    inp: SupervisorInput, step: int, checkpoint: int | None, *, blamed: bool = True
) -> None:
    """The open attempt ends now: how far did the run it started get? ``blamed``: the
    failure that ended it may be its checkpoint's fault (not a machine's)."""
    if not inp.attempts or inp.attempts[-1].reached_step is not None:
        return
    last = inp.attempts[-1]
    # The run's checkpoint_step is the one it resumed from until it commits a newer one.
    committed = (
        checkpoint if checkpoint is not None and checkpoint > last.resumed_from_step else None
    )
    closed = last.model_copy(
        update={
            "reached_step": max(step, last.resumed_from_step),
            "checkpointed_step": committed,
        }
    )
    inp.attempts[-1] = closed
    if (
        blamed
        and committed is None
        and closed.reached_step is not None
        and (closed.reached_step <= closed.failed_at_step)
    ):
        count_failed_resume(inp, closed.resumed_from_step)


def count_failed_resume(inp: SupervisorInput, step: int) -> None:
    inp.failed_resumes[step] = inp.failed_resumes.get(step, 0) + 1
