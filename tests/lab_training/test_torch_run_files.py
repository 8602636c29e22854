"""What the lab reads of a PyTorch run from the files rank 0 writes (no processes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from orchestrator.lab.training.status import Heartbeat, Progress, TrainerState
from orchestrator.lab.training.torchjob.run import TorchRun

TOTAL = 60


@dataclass
class Files:
    """Rank 0's heartbeat and progress as a run's job would read them."""

    beat: Heartbeat | None = None
    final: Progress | None = None
    args: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(total_steps=TOTAL))

    def heartbeat(self) -> Heartbeat | None:
        return self.beat

    def progress(self) -> Progress | None:
        return self.final

    def returncodes(self) -> list[int | None]:
        return [None, None]  # the agents wait at torchrun's exit barrier


def run(files: Files, resumed_from: int = 11) -> TorchRun:
    torch_run = TorchRun.__new__(TorchRun)  # no processes: only the files are read
    torch_run.job = files  # type: ignore[assignment]
    torch_run.resumed_from = resumed_from
    return torch_run


def beat(step: int, checkpoint_step: int) -> Heartbeat:
    return Heartbeat(
        job="j",
        pid=1,
        step=step,
        total_steps=TOTAL,
        time=0.0,
        state=TrainerState.RUNNING,
        seed=0,
        hosts=["h"],
        resumed_from=11,
        checkpoint_step=checkpoint_step,
    )


def progress(step: int, resumed_from: int = 11) -> Progress:
    return Progress(
        job="j",
        step=step,
        total_steps=TOTAL,
        seed=0,
        params_digest="d",
        resumed_from=resumed_from,
        elapsed_s=1.0,
        steps_run=step - resumed_from,
        finished_at=0.0,
    )


class TestFinalProgress:
    """Rank 0 writes its final progress before its last heartbeat: in between, the run is
    finished at the final step and checkpoint, not at the heartbeat's older ones."""

    def test_finished_between_the_progress_and_the_last_heartbeat(self) -> None:
        r = run(Files(beat=beat(51, 11), final=progress(TOTAL)))
        assert r.exited() and r.finished()
        assert (r.step(), r.checkpoint_step()) == (TOTAL, TOTAL)

    def test_running_reads_the_heartbeat(self) -> None:
        r = run(Files(beat=beat(51, 40)))
        assert not r.exited()
        assert (r.step(), r.checkpoint_step()) == (51, 40)

    def test_another_run_s_progress_is_not_this_one_s(self) -> None:
        r = run(Files(beat=beat(51, 40), final=progress(TOTAL, resumed_from=0)))
        assert not r.exited()
        assert (r.step(), r.checkpoint_step()) == (51, 40)
