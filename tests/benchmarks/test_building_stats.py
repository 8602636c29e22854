"""The building-incident benchmark's arithmetic: medians and worsts per arm, verdicts that
follow from them, and claims the summary model accepts (no servers, no timings)."""

from __future__ import annotations

from typing import Any

from benchmarks._building_stats import stats, summarise, summary
from benchmarks.summary import load


def arm(errors: int, mttr: float, lost: int, runbook: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "building": "use-a",
        "region": "us-east",
        "regions": {
            "us-east": {"p99_ms": 900.0 if not runbook else 400.0, "error_rate": 0.0},
            "us-west": {"p99_ms": 5000.0, "error_rate": 0.5},
        },
        "edge": {"requests": 1000, "5xx": errors},
        "mttr_s": mttr,
        "lost_steps": lost,
        "job_left_building": True,
    }
    if runbook:
        out["run"] = {"outcome": "completed", "duration_s": 20.0}
    return out


def trial(planned_lost: int = 0, planned_5xx: int = 0, finished: bool = True) -> dict[str, Any]:
    return {
        "planned": {
            "outcome": "completed",
            "duration_s": 40.0,
            "tasks_done_s": {"move-training-jobs": 6.0, "shift-building-traffic": 30.0},
            "edge": {"requests": 4000, "5xx": planned_5xx},
            "move": {"lost_steps": planned_lost},
            "job_left_building": True,
        },
        "loss_runbook": arm(3, 4.0, 12, runbook=True),
        "loss_supervisor_alone": arm(3, 5.0, 15, runbook=False),
        "loss_traffic_unmoved": arm(30, 5.0, 15, runbook=False),
        "job_finished": finished,
    }


class TestStats:
    def test_median_and_worst_of_what_is_present(self) -> None:
        assert stats([3, None, 1, 10]) == {"n": 3, "median": 3.0, "worst": 10.0}

    def test_nothing_measured_is_none_not_zero(self) -> None:
        assert stats([None]) == {"n": 0, "median": None, "worst": None}


class TestSummarise:
    def test_clean_trials_meet_every_verdict(self) -> None:
        result = summarise([trial(), trial(), trial()])
        assert all(result["verdicts"].values()), result["verdicts"]
        agg = result["aggregate"]
        assert agg["planned"]["jobs_moved_s"]["median"] == 6.0
        assert agg["loss_runbook"]["user_5xx_rate"]["worst"] == 0.003
        assert agg["loss_supervisor_alone"]["run_duration_s"]["n"] == 0
        # the dark building's own region, not the worst of all regions
        assert agg["loss_runbook"]["region_p99_ms"]["worst"] == 400.0
        assert agg["loss_traffic_unmoved"]["region_p99_ms"]["median"] == 900.0

    def test_one_lost_step_or_one_5xx_in_one_trial_fails_the_planned_targets(self) -> None:
        verdicts = summarise([trial(), trial(planned_lost=1, planned_5xx=2)])["verdicts"]
        assert not verdicts["planned_lost_0_steps"]
        assert not verdicts["planned_0_user_5xx"]

    def test_a_move_not_recorded_is_not_counted_as_zero_lost(self) -> None:
        missing = trial()
        missing["planned"]["move"] = None
        assert not summarise([missing])["verdicts"]["planned_lost_0_steps"]

    def test_a_job_that_did_not_finish_is_reported(self) -> None:
        result = summarise([trial(), trial(finished=False)])
        assert result["aggregate"]["jobs_finished"] == 1
        assert not result["verdicts"]["every_job_finished"]


class TestClaims:
    def test_claims_load_and_carry_the_baseline_arm(self) -> None:
        result = summarise([trial(), trial()])
        claims = {c.claim: c for c in load({"summary": summary(result)})}
        five = claims["power loss + building-loss: user 5xx (median of 2)"]
        assert (five.value, five.baseline, five.met) == (3, 30, True)
        mttr = claims["power loss + building-loss: job MTTR (median of 2)"]
        assert mttr.baseline == 5.0 and mttr.met
        p99 = claims["power loss + building-loss: p99 of the building's region (median of 2)"]
        assert (p99.value, p99.baseline, p99.met) == (400.0, 900.0, True)
        assert claims["planned maintenance: steps lost (worst of 2)"].met

    def test_more_5xx_than_the_supervisor_alone_is_not_met(self) -> None:
        worse = trial()
        worse["loss_runbook"]["edge"]["5xx"] = 31
        claims = {c.claim: c for c in load({"summary": summary(summarise([worse]))})}
        assert not claims["power loss + building-loss: user 5xx (median of 1)"].met
