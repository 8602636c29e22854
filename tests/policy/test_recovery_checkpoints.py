"""Checkpoint choice: newest verified, never partial or corrupt, fall back after failed resumes."""

from __future__ import annotations

import hashlib

import pytest

from orchestrator.contracts.training_supervisor import FailureKind
from orchestrator.exceptions import Infeasible, InvalidInstance
from orchestrator.policy.training.checkpoints import resume_blamed
from orchestrator.policy.training.recovery import (
    CheckpointInfo,
    RejectReason,
    choose_checkpoint,
    verify_checkpoint,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def good(step: int) -> CheckpointInfo:
    digest = sha(f"params at {step}".encode())
    return CheckpointInfo(
        id=f"ckpt-{step}", step=step, digest=digest, manifest_digest=digest, complete=True
    )


def corrupt(step: int) -> CheckpointInfo:
    return CheckpointInfo(
        id=f"ckpt-{step}",
        step=step,
        digest=sha(b"flipped bits"),
        manifest_digest=sha(f"params at {step}".encode()),
        complete=True,
    )


def partial(step: int) -> CheckpointInfo:
    # The writer died before the manifest: data may be there, but nothing vouches for it.
    return CheckpointInfo(id=f"ckpt-{step}", step=step, digest=sha(b"half"), complete=False)


class TestNewestVerified:
    """The newest checkpoint whose computed digest equals its manifest digest is chosen."""

    def test_newest_good_wins_in_any_input_order(self) -> None:
        choice = choose_checkpoint([good(100), good(300), good(200)])
        assert choice.chosen is not None and choice.chosen.step == 300
        assert [(r.step, r.reason) for r in choice.rejected] == [
            (200, RejectReason.SUPERSEDED),
            (100, RejectReason.SUPERSEDED),
        ]

    def test_digest_comparison_ignores_hex_case(self) -> None:
        ckpt = good(5)
        upper = ckpt.model_copy(update={"manifest_digest": ckpt.manifest_digest.upper()})  # type: ignore[union-attr]
        assert verify_checkpoint(upper) is None


class TestCorruptAndPartial:
    """Corrupt, partial and unverified checkpoints are never chosen, and each says why."""

    def test_falls_back_past_corrupt_and_partial_newest(self) -> None:
        choice = choose_checkpoint([good(100), corrupt(200), partial(300)])
        assert choice.chosen is not None and choice.chosen.id == "ckpt-100"
        reasons = {r.step: r.reason for r in choice.rejected}
        assert reasons == {300: RejectReason.PARTIAL, 200: RejectReason.CORRUPT}
        corrupt_detail = next(r.detail for r in choice.rejected if r.step == 200)
        assert "does not match manifest" in corrupt_detail

    def test_unverified_digest_is_not_trusted(self) -> None:
        ckpt = good(400).model_copy(update={"digest": None})
        choice = choose_checkpoint([good(100), ckpt])
        assert choice.step == 100
        assert choice.rejected[0].reason is RejectReason.UNVERIFIED

    def test_none_valid_is_infeasible_and_names_each(self) -> None:
        with pytest.raises(Infeasible) as err:
            choose_checkpoint([corrupt(200), partial(300)])
        assert err.value.constraint == "checkpoint"
        assert "step 300: partial" in str(err.value)
        assert "step 200: corrupt" in str(err.value)

    def test_none_valid_may_restart_from_scratch_when_allowed(self) -> None:
        choice = choose_checkpoint([corrupt(200)], allow_from_scratch=True)
        assert choice.chosen is None and choice.step == 0
        assert len(choice.rejected) == 1

    def test_no_checkpoints_starts_at_step_zero(self) -> None:
        choice = choose_checkpoint([])
        assert choice.chosen is None and choice.step == 0 and choice.rejected == []

    def test_manifest_digest_without_complete_flag_is_refused(self) -> None:
        with pytest.raises(ValueError, match="complete is false"):
            CheckpointInfo(id="x", step=1, digest="a", manifest_digest="a", complete=False)


class TestFallbackAfterFailedResumes:
    """A checkpoint that crashed twice on resume is skipped for the next older one."""

    def test_two_failed_resumes_fall_back(self) -> None:
        ckpts = [good(100), good(200)]
        assert choose_checkpoint(ckpts, failed_resumes={200: 1}).step == 200
        choice = choose_checkpoint(ckpts, failed_resumes={200: 2})
        assert choice.step == 100
        assert choice.rejected[0].reason is RejectReason.FAILED_RESUMES

    def test_duplicate_steps_are_an_invalid_instance(self) -> None:
        dup = good(100).model_copy(update={"id": "other"})
        with pytest.raises(InvalidInstance, match="step 100 listed twice"):
            choose_checkpoint([good(100), dup])

    def test_max_failed_resumes_must_be_positive(self) -> None:
        with pytest.raises(InvalidInstance, match="max_failed_resumes"):
            choose_checkpoint([good(1)], max_failed_resumes=0)


class TestResumeBlame:
    """A run a machine killed says nothing about its checkpoint; a crash or hang may."""

    def test_hardware_failures_are_not_the_checkpoints(self) -> None:
        blamed = {kind.value for kind in FailureKind if resume_blamed(kind.value)}
        assert {"gpu", "host-down", "building"}.isdisjoint(blamed)
        assert {"crash", "hang"} <= blamed
