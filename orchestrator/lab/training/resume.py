"""Where a trainer starts: the checkpoint ``--resume`` asks for, verified, or a refusal.

``latest`` takes the newest checkpoint that verifies and loads, falling back to older
ones. It restarts from step 0 only when nothing was ever committed: with committed
checkpoints present but none usable it refuses (the recovery policy's default too),
and so it does when checkpoint data survives whose manifests are gone. A writer
leaves at most one step's data without a manifest (it died between the two renames,
and a later write of that step replaces it); data at several steps with no manifest
at all, or with the last heartbeat naming a committed checkpoint, means the manifests
were lost, and starting over would silently throw the training away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.lab.training.checkpoints import (
    CheckpointError,
    CheckpointStatus,
    load_checkpoint,
    scan_checkpoints,
)
from orchestrator.lab.training.sgd import TrainState, init_state
from orchestrator.lab.training.status import read_heartbeat

if TYPE_CHECKING:
    from orchestrator.lab.training.trainer import TrainerArgs

__all__ = ["ManifestsLost", "ResumeRefused", "resolve_resume"]


class ResumeRefused(Exception):
    """The requested checkpoint cannot be used; the trainer exits 3."""


class ManifestsLost(ResumeRefused):
    """Checkpoint data without any manifest to vouch for it; the trainer exits 6."""


def _load_state(args: TrainerArgs, step: int) -> TrainState:
    try:
        loaded = load_checkpoint(args.workdir, step)
        state = TrainState.from_arrays(step, loaded.arrays)
    except (CheckpointError, ValueError) as exc:
        raise ResumeRefused(str(exc)) from None
    if state.seed != args.seed:
        raise ResumeRefused(
            f"checkpoint step {step} was trained with seed {state.seed}, not {args.seed}"
        )
    if step > args.total_steps:
        raise ResumeRefused(f"checkpoint step {step} is beyond --total-steps {args.total_steps}")
    return state


def _check_manifests_not_lost(args: TrainerArgs, orphans: list[int]) -> None:
    """Refuse to start from scratch over data whose manifests are gone (see the module doc)."""
    if not orphans:
        return
    beat = read_heartbeat(args.workdir)
    committed = beat.checkpoint_step if beat is not None else None
    if len(orphans) > 1:
        why = f"data at {len(orphans)} steps ({', '.join(map(str, orphans))}) has no manifest"
    elif committed:
        why = (
            f"data at step {orphans[0]} has no manifest, and the last run had committed "
            f"step {committed}"
        )
    else:
        return  # one write the writer never finished: nothing was committed
    raise ManifestsLost(
        f"checkpoint manifests are missing: {why}; refusing to restart from step 0 and "
        "lose that training (restore the manifests, or start over with --resume none)"
    )


def resolve_resume(args: TrainerArgs) -> tuple[TrainState, list[str]]:
    """The state to start from, and why any newer checkpoint was passed over."""
    if args.resume == "none":
        return init_state(args.seed), []
    if isinstance(args.resume, int):
        return _load_state(args, args.resume), []
    skipped: list[str] = []
    committed = False
    records = scan_checkpoints(args.workdir)
    for record in reversed(records):
        committed = committed or record.manifest is not None
        if not record.verified:
            skipped.append(f"step {record.step}: {record.status.value} ({record.detail})")
            continue
        try:
            return _load_state(args, record.step), skipped
        except ResumeRefused as exc:
            skipped.append(f"step {record.step}: {exc}")
    if committed:
        raise ResumeRefused("no checkpoint verifies: " + "; ".join(skipped))
    _check_manifests_not_lost(
        args,
        [r.step for r in records if r.status is CheckpointStatus.PARTIAL and r.digest is not None],
    )
    return init_state(args.seed), skipped
