"""drain_haproxy's claims: each trial's verdicts, the median and worst over trials, and the
summary rows of the benchmark table (pure: results in, claims out)."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks import drain


def verdicts(out: dict[str, Any]) -> dict[str, bool]:
    paced, naive = out["paced_drain"], out["naive_drain"]
    paced_p99 = paced["window"]["receivers_max_p99_ms"]
    util = paced["receivers_max_utilization"]
    return {
        "paced_drain_completed": paced["outcome"] == "completed",
        "paced_within_1_25x_shortest_safe": paced["ratio_to_shortest_safe"] <= 1.25,
        "paced_no_drain_caused_5xx": paced["drain_caused_5xx"] == 0,
        "paced_receivers_p99_under_slo": paced_p99 is not None and paced_p99 < drain.SLO_P99_MS,
        "paced_receivers_under_80pct": util is not None and util < 0.8,
        "restore_completed": out["paced_restore"]["outcome"] == "completed",
        # rates, as drain.py compares them: the naive window is ~12 s, the paced one 25-60 s
        "naive_worse": (naive["window"]["error_rate_5xx"] or 0.0)
        > (paced["window"]["error_rate_5xx"] or 0.0)
        or (naive["window"]["receivers_max_p99_ms"] or 0.0) >= drain.SLO_P99_MS,
    }


def spread(values: list[float | None], worst: str) -> dict[str, Any]:
    """Median and worst (``max`` or ``min``) of the trials' values; None if any is missing."""
    known = [v for v in values if v is not None]
    if len(known) != len(values) or not known:
        return {"values": values, "median": None, "worst": None}
    return {
        "values": values,
        "median": statistics.median(known),
        "worst": max(known) if worst == "max" else min(known),
    }


def aggregate(trials: list[dict[str, Any]]) -> dict[str, Any]:
    def each(path: str) -> list[Any]:
        values = []
        for t in trials:
            node: Any = t
            for part in path.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            values.append(node)
        return values

    return {
        "served_rps_baseline": spread(each("baseline.cpu.served_rps"), "min"),
        "baseline_5xx": spread(each("baseline.errors_5xx"), "max"),
        "baseline_max_utilization": spread(each("baseline.max_utilization"), "max"),
        "paced_ratio_to_shortest_safe": spread(each("paced_drain.ratio_to_shortest_safe"), "max"),
        "paced_drain_caused_5xx": spread(each("paced_drain.drain_caused_5xx"), "max"),
        "paced_5xx": spread(each("paced_drain.window.errors_5xx"), "max"),
        "paced_error_rate_5xx": spread(each("paced_drain.window.error_rate_5xx"), "max"),
        "paced_receivers_p99_ms": spread(each("paced_drain.window.receivers_max_p99_ms"), "max"),
        "paced_receivers_utilization": spread(each("paced_drain.receivers_max_utilization"), "max"),
        "naive_drain_caused_5xx": spread(each("naive_drain.drain_caused_5xx"), "min"),
        "naive_error_rate_5xx": spread(each("naive_drain.window.error_rate_5xx"), "min"),
        "naive_receivers_p99_ms": spread(each("naive_drain.window.receivers_max_p99_ms"), "min"),
        "baseline_max_web_slot_occupancy": spread(
            each("baseline.haproxy.receivers_max_web_slot_occupancy"), "max"
        ),
        "paced_receivers_web_slot_occupancy": spread(
            each("paced_drain.haproxy.receivers_max_web_slot_occupancy"), "max"
        ),
        "haproxy_cores_per_1000_rps": spread(
            each("baseline.cpu.haproxy_cores_per_1000_rps"), "max"
        ),
        "haproxy_cores_per_1000_rps_during_drain": spread(
            each("paced_drain.cpu.haproxy_cores_per_1000_rps"), "max"
        ),
        "gate_to_decision_median_s": spread(each("paced_drain.gate_to_decision.median_s"), "max"),
        "gate_to_decision_max_s": spread(each("paced_drain.gate_to_decision.max_s"), "max"),
    }


def summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary claims: each over every trial, its worst trial as the value."""
    from benchmarks.summary import Target, claim, dump, flag

    agg, n, offered = result["aggregate"], len(result["trials"]), result["offered_rps"]
    worst = f"worst of {n} trials"
    paced_5xx = agg["paced_drain_caused_5xx"]["worst"]
    paced_rate = 100 * (agg["paced_error_rate_5xx"]["worst"] or 0.0)
    return dump(
        [
            claim(
                f"rps served through HAProxy before the drain ({worst})",
                agg["served_rps_baseline"]["worst"],
                "rps",
                Target.at_least(0.95 * offered, f">= 95% of {offered:g} rps offered"),
            ),
            claim(
                f"5xx before the drain, at the receivers' pre-drain utilization ({worst})",
                agg["baseline_5xx"]["worst"],
                "requests",
                Target.equal(0.0, "0 (in 10 s)"),
            ),
            flag(
                f"paced drains and restores completed ({n} trials)",
                all(t["verdicts"]["paced_drain_completed"] for t in result["trials"])
                and all(t["verdicts"]["restore_completed"] for t in result["trials"]),
            ),
            claim(
                f"paced drain / shortest safe schedule ({worst})",
                agg["paced_ratio_to_shortest_safe"]["worst"],
                "x",
                Target.at_most(1.25, "<= 1.25x"),
            ),
            claim(
                f"drain-caused 5xx during the paced drain ({worst})",
                paced_5xx,
                "requests",
                Target.equal(0.0, "0"),
            ),
            claim(
                f"receivers' p99 during the paced drain ({worst})",
                agg["paced_receivers_p99_ms"]["worst"],
                "ms",
                Target.below(drain.SLO_P99_MS, f"< {drain.SLO_P99_MS:g} ms (SLO)"),
            ),
            claim(
                f"receivers' utilization during the paced drain ({worst})",
                agg["paced_receivers_utilization"]["worst"],
                "",
                Target.below(0.8, "< 80%"),
            ),
            claim(
                f"5xx rate of the naive all-at-once drain (best of {n} trials)",
                100 * (agg["naive_error_rate_5xx"]["worst"] or 0.0),
                "%",
                Target.above(paced_rate, "more than the paced drain's"),
                baseline=paced_rate,
                baseline_name=f"paced drain, same lab (worst of {n} trials)",
            ),
            claim(
                "trials in which the naive drain was worse (more 5xx, or p99 at the SLO)",
                sum(t["verdicts"]["naive_worse"] for t in result["trials"]),
                "trials",
                Target.equal(float(n), f"all {n}"),
            ),
        ]
    )
