"""The building-incident benchmark's arithmetic: per-arm medians and worsts over its
trials, its verdicts and its summary claims. Pure (no servers), so it is unit-tested
(tests/benchmarks/test_building_stats.py)."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.summary import Target, claim, dump, flag

#: the shipped lab job's checkpoint interval: an unplanned loss costs at most about this
CHECKPOINT_EVERY = 20
#: building-maintenance's own expected durations: both halves together (1 min each, in
#: parallel), the fence (5 s) and the verification (10 s)
PLANNED_EXPECTED_S = 75.0
#: the runbook arm's MTTR may differ from the supervisor alone's by noise, not by design
MTTR_RATIO_MAX = 1.5
#: building-loss's default p99 gate (ms)
SLO_P99_MS = 800.0


def stats(values: list[float | None]) -> dict[str, float | int | None]:
    """n, median and worst (max) of the numbers present; None where there are none."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return {"n": 0, "median": None, "worst": None}
    return {"n": len(present), "median": statistics.median(present), "worst": max(present)}


def _rate(edge: dict[str, int]) -> float | None:
    return edge["5xx"] / edge["requests"] if edge["requests"] else None


def _region(arm: dict[str, Any]) -> dict[str, Any]:
    """The dark building's region's health over the loss window."""
    return dict((arm.get("regions") or {}).get(arm.get("region", ""), None) or {})


def _arm(trials: list[dict[str, Any]], key: str) -> dict[str, Any]:
    arms = [t[key] for t in trials if key in t]
    return {
        "user_5xx": stats([a["edge"]["5xx"] for a in arms]),
        "user_5xx_rate": stats([_rate(a["edge"]) for a in arms]),
        "mttr_s": stats([a["mttr_s"] for a in arms]),
        "lost_steps": stats([a["lost_steps"] for a in arms]),
        "region_p99_ms": stats([_region(a).get("p99_ms") for a in arms]),
        "region_error_rate": stats([_region(a).get("error_rate") for a in arms]),
        "run_duration_s": stats([a["run"]["duration_s"] for a in arms if "run" in a]),
        "runs_completed": all(a["run"]["outcome"] == "completed" for a in arms if "run" in a),
        "job_left_building": all(a["job_left_building"] for a in arms),
    }


def summarise(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-arm aggregates and the verdicts, from the trials' raw numbers."""
    planned = [t["planned"] for t in trials]
    done = [p["tasks_done_s"] for p in planned]
    aggregate = {
        "trials": len(trials),
        "planned": {
            "lost_steps": stats([p["move"]["lost_steps"] if p["move"] else None for p in planned]),
            "time_to_empty_s": stats([p["duration_s"] for p in planned]),
            "jobs_moved_s": stats([d.get("move-training-jobs") for d in done]),
            "traffic_shifted_s": stats([d.get("shift-building-traffic") for d in done]),
            "user_5xx": stats([p["edge"]["5xx"] for p in planned]),
            "user_requests": stats([p["edge"]["requests"] for p in planned]),
            "runs_completed": all(p["outcome"] == "completed" for p in planned),
            "job_left_building": all(p["job_left_building"] for p in planned),
        },
        "loss_runbook": _arm(trials, "loss_runbook"),
        "loss_supervisor_alone": _arm(trials, "loss_supervisor_alone"),
        "loss_traffic_unmoved": _arm(trials, "loss_traffic_unmoved"),
        "jobs_finished": sum(bool(t.get("job_finished")) for t in trials),
    }
    p, rb, unmoved = (
        aggregate["planned"],
        aggregate["loss_runbook"],
        aggregate["loss_traffic_unmoved"],
    )
    verdicts = {
        "planned_runs_completed": p["runs_completed"] and bool(planned),
        "planned_lost_0_steps": p["lost_steps"]["n"] == len(trials)
        and p["lost_steps"]["worst"] == 0,
        "planned_0_user_5xx": p["user_5xx"]["worst"] == 0,
        "planned_job_left_building": p["job_left_building"],
        "loss_runs_completed": rb["runs_completed"],
        "loss_5xx_no_more_than_traffic_unmoved": _le(
            rb["user_5xx"]["median"], unmoved["user_5xx"]["median"]
        ),
        "every_job_finished": aggregate["jobs_finished"] == len(trials) and bool(trials),
    }
    return {"aggregate": aggregate, "verdicts": verdicts}


def _le(a: float | int | None, b: float | int | None) -> bool:
    return a is not None and b is not None and a <= b


def summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary claims (benchmarks/summary.py), from the same aggregates as the verdicts.
    Traffic claims take the arm where nobody moved the traffic as their baseline, the job's
    the arm with the supervisor alone (the rebalancer running, no runbook)."""
    agg = result["aggregate"]
    n = agg["trials"]
    p, rb = agg["planned"], agg["loss_runbook"]
    alone, unmoved = agg["loss_supervisor_alone"], agg["loss_traffic_unmoved"]
    alone_name = "same power loss, supervisor alone (no runbook)"
    unmoved_name = "same power loss, no runbook, rebalancer paused"
    return dump(
        [
            claim(
                f"planned maintenance: steps lost (worst of {n})",
                p["lost_steps"]["worst"],
                "steps",
                Target.equal(0, "0 (checkpoint on demand)"),
            ),
            claim(
                f"planned maintenance: time to an empty building (median of {n})",
                p["time_to_empty_s"]["median"],
                "s",
                Target.at_most(
                    PLANNED_EXPECTED_S, f"<= {PLANNED_EXPECTED_S:g} s (runbook's expected)"
                ),
            ),
            claim(
                f"planned maintenance: user 5xx (worst of {n})",
                p["user_5xx"]["worst"],
                "requests",
                Target.equal(0, "0"),
            ),
            claim(
                f"power loss + building-loss: user 5xx (median of {n})",
                rb["user_5xx"]["median"],
                "requests",
                Target.at_most(unmoved["user_5xx"]["median"] or 0, "no more than the baseline"),
                baseline=unmoved["user_5xx"]["median"],
                baseline_name=unmoved_name,
            ),
            claim(
                f"power loss + building-loss: p99 of the building's region (median of {n})",
                rb["region_p99_ms"]["median"],
                "ms",
                Target.below(SLO_P99_MS, f"< {SLO_P99_MS:g} ms (the runbook's SLO)"),
                baseline=unmoved["region_p99_ms"]["median"],
                baseline_name=unmoved_name,
            ),
            claim(
                f"power loss + building-loss: job MTTR (median of {n})",
                rb["mttr_s"]["median"],
                "s",
                Target.at_most(
                    MTTR_RATIO_MAX, f"<= {MTTR_RATIO_MAX:g}x supervisor alone", on="ratio"
                ),
                baseline=alone["mttr_s"]["median"],
                baseline_name=alone_name,
            ),
            claim(
                f"power loss + building-loss: steps lost (worst of {n})",
                rb["lost_steps"]["worst"],
                "steps",
                Target.at_most(
                    CHECKPOINT_EVERY, f"<= one checkpoint interval ({CHECKPOINT_EVERY})"
                ),
                baseline=alone["lost_steps"]["worst"],
                baseline_name=alone_name,
            ),
            flag(f"every job finished ({agg['jobs_finished']} of {n})", agg["jobs_finished"] == n),
        ]
    )
