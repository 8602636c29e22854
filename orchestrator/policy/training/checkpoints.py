"""Which checkpoint to resume from: the newest one whose digest verifies.

Wrong-checkpoint resumes are the classic recovery bug: a corrupt replica resumed
44 times (Megatron-LM#5281), ``latest`` advanced before the data was durable
(KempnerForge#102). So nothing is trusted by name or recency alone: a checkpoint
is eligible only when its manifest exists (the trainer writes it last) and the
digest computed over the data now equals the digest the manifest recorded. A
checkpoint that already failed to resume ``max_failed_resumes`` times is skipped
so the job falls back to an older one instead of looping; a resume counts as failed
only when the failure that ended it could be the checkpoint's fault (a GPU, a host or a
building lost says nothing about it: at 65,536 GPUs, a failure every 46 minutes, two
unrelated hardware failures in a row once condemned the only checkpoint and halted the job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.exceptions import Infeasible, InvalidInstance
from orchestrator.policy.training.models import (
    CheckpointChoice,
    CheckpointInfo,
    CheckpointRejection,
    RejectReason,
)

__all__ = ["HARDWARE_FAILURES", "choose_checkpoint", "resume_blamed", "verify_checkpoint"]

#: failure kinds (``FailureKind`` values) that come from the machines, not from the job's
#: own state: they never count against the checkpoint a run resumed from
HARDWARE_FAILURES = frozenset({"gpu", "host-down", "building"})


def resume_blamed(failure_kind: str) -> bool:
    """Whether a run that died by ``failure_kind`` before passing its predecessor counts
    as a failed resume of its checkpoint (a crash or a hang may be the checkpoint's)."""
    return failure_kind not in HARDWARE_FAILURES


def verify_checkpoint(ckpt: CheckpointInfo) -> tuple[RejectReason, str] | None:
    """None when ``ckpt`` can be resumed from, else why not."""
    if not ckpt.complete or ckpt.manifest_digest is None:
        return RejectReason.PARTIAL, "no manifest: the writer did not finish"
    if ckpt.digest is None:
        return RejectReason.UNVERIFIED, "digest not computed, so it cannot be verified"
    if ckpt.digest.lower() != ckpt.manifest_digest.lower():
        return (
            RejectReason.CORRUPT,
            f"digest {ckpt.digest[:12]} does not match manifest {ckpt.manifest_digest[:12]}",
        )
    return None


def choose_checkpoint(
    checkpoints: Sequence[CheckpointInfo],
    *,
    failed_resumes: Mapping[int, int] | None = None,
    max_failed_resumes: int = 2,
    allow_from_scratch: bool = False,
) -> CheckpointChoice:
    """The newest verified checkpoint, and why every other one was not chosen.

    ``failed_resumes`` maps a checkpoint step to how many resumes from it crashed
    before making progress. With no checkpoints at all the job starts from step 0.
    When checkpoints exist but none verifies, :class:`Infeasible` names each
    rejection, unless ``allow_from_scratch`` says restarting at step 0 is acceptable.
    """
    if max_failed_resumes < 1:
        raise InvalidInstance(f"max_failed_resumes must be at least 1, got {max_failed_resumes}")
    seen: dict[int, str] = {}
    for ckpt in checkpoints:
        if ckpt.step in seen:
            raise InvalidInstance(
                f"checkpoints: step {ckpt.step} listed twice ({seen[ckpt.step]}, {ckpt.id})"
            )
        seen[ckpt.step] = ckpt.id
    failures = failed_resumes or {}

    chosen: CheckpointInfo | None = None
    rejected: list[CheckpointRejection] = []
    for ckpt in sorted(checkpoints, key=lambda c: c.step, reverse=True):
        problem = verify_checkpoint(ckpt)
        if problem is None and failures.get(ckpt.step, 0) >= max_failed_resumes:
            problem = (
                RejectReason.FAILED_RESUMES,
                f"{failures[ckpt.step]} resumes from it crashed without progress",
            )
        if problem is None and chosen is not None:
            problem = RejectReason.SUPERSEDED, f"step {chosen.step} is newer and verifies"
        if problem is None:
            chosen = ckpt
            continue
        reason, detail = problem
        rejected.append(
            CheckpointRejection(id=ckpt.id, step=ckpt.step, reason=reason, detail=detail)
        )

    if chosen is None and checkpoints and not allow_from_scratch:
        summary = "; ".join(f"step {r.step}: {r.reason.value} ({r.detail})" for r in rejected)
        raise Infeasible("checkpoint", f"no checkpoint verifies: {summary}")
    return CheckpointChoice(chosen=chosen, rejected=rejected)
