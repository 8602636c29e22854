"""A runbook run that moved training jobs draws them on the traffic's time axis, and lists
only what happened during the run (a power loss just before it counts, older moves do not)."""

from __future__ import annotations

from orchestrator.contracts.training_moves import MoveJobResult, MoveOutcome, MoveRecord
from orchestrator.reports.models import TrainingReport
from tests.reports import samples
from tests.reports.samples import at
from tests.reports.test_render import rendered


def job_with_an_old_move_and_a_loss() -> TrainingReport:
    job = samples.training()
    old = MoveRecord(
        request_id="an-earlier-run/move/llm", requested_at=at(-300), finished_at=at(-295),
        result=MoveJobResult(job="llm", outcome=MoveOutcome.MOVED, request_id="x", lost_steps=0),
    )  # fmt: skip
    this = MoveRecord(
        request_id="this-run/move/llm", requested_at=at(40), finished_at=at(41),
        result=MoveJobResult(job="llm", outcome=MoveOutcome.NOT_NEEDED, request_id="y",
                             detail="no host there; recovered from building: 20 steps lost"),
    )  # fmt: skip
    status = job.status.model_copy(update={"moves": [old, this]})
    return job.model_copy(update={"status": status})


class TestTrainingBesideTraffic:
    """Runs with training tasks get a side-by-side section; others do not."""

    def test_a_run_without_jobs_has_no_training_section(self) -> None:
        html, _ = rendered(samples.runbook())
        assert "Traffic and training, side by side" not in html

    def test_the_jobs_events_during_the_run_are_charted_and_listed(self) -> None:
        view = samples.runbook().model_copy(
            update={"training": [job_with_an_old_move_and_a_loss()]}
        )
        html, charts = rendered(view)
        assert "Traffic and training, side by side" in html
        assert "Traffic and training on one time axis" in charts
        # the run lasted 0-46 s: the gpu failure (20-27 s) is in it, the building loss
        # (from 50 s) is not; the move this run asked for is listed, the earlier run's is not
        assert html.count("<td>failure: ") == 1 and "<td>failure: gpu</td>" in html
        assert html.count("<td>move: ") == 1 and "<td>move: not_needed</td>" in html
        assert "20 steps lost" in html
