"""The Taiji solver at 5,000 PoPs x 100 regions: stage 2 by column generation vs the full LP.

Part of ``benchmarks/taiji.py`` (issue 24, item 3). One generated instance
(``taiji.generate``, same shape as the smaller sizes), solved in-process by
``solve(instance)`` (column generation, today's method) and by
``solve(instance, full_lp=True)`` (the LP over all 500,000 pairs, the method it
replaced), alternating, each solve in its own forked process so that one's
memory is not the other's peak:

- **time**: ``solve`` end to end, median of the repeats (wall and process CPU time), with and without the
  1,024 buckets per PoP (the bucket mapping is pure Python and costs the same
  in both);
- **peak RSS**: the forked process's high-water mark, reset (``/proc/self/clear_refs``)
  just before the solve; both the absolute peak and its rise over the RSS at the start;
- **objective**: the undamped optimum's latency cost (stage 2's objective) and
  max utilization (stage 1's), which must agree to 1e-6 relative.

Target (issue 24): under 3 s in-process at 5,000 x 100 with the same optimality,
judged on process CPU time: the machine this runs on is shared, and its wall time
at a load average of ~10 on 2 cores measures the contention (both are recorded).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.summary import Claim, Target, claim
from orchestrator.policy.rebalance.taiji import SolverInstance, solve

SIZE = (5000, 100)
TARGET_SECONDS = 3.0
OBJECTIVE_RTOL = 1e-6


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _measure(instance: SolverInstance, full_lp: bool, queue: Any) -> None:
    """In the forked child: reset the high-water mark, solve, report."""
    with contextlib.suppress(OSError):  # without it the peak includes the parent's
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    start_kb = _rss_kb("VmRSS")
    started, cpu = time.perf_counter(), time.process_time()
    result = solve(instance, full_lp=full_lp)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    queue.put(
        {
            "seconds": seconds,
            "cpu_seconds": cpu,
            "peak_rss_mb": _rss_kb("VmHWM") / 1024,
            "peak_rss_rise_mb": (_rss_kb("VmHWM") - start_kb) / 1024,
            "max_utilization": result.optimal_max_utilization,
            "latency_cost": result.latency_cost,
        }
    )


def _run(instance: SolverInstance, full_lp: bool) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_measure, args=(instance, full_lp, queue))
    proc.start()
    out: dict[str, Any] = queue.get()
    proc.join()
    return out


def compare(generate: Any, undamped: Any, repeats: int) -> dict[str, Any]:
    """Old (full LP) vs new (column generation) at ``SIZE``, measured in this run."""
    n_pops, n_regions = SIZE
    instance = generate(n_pops, n_regions, seed=n_pops * 100 + n_regions)
    bare = instance.model_copy(
        update={"pops": [p.model_copy(update={"buckets": None}) for p in instance.pops]}
    )
    methods = {"column_generation": False, "full_lp": True}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    for _ in range(repeats):
        for name, full in methods.items():
            runs[name].append(_run(bare, full))
    out: dict[str, Any] = {"pops": n_pops, "regions": n_regions, "repeats": repeats}
    for name, full in methods.items():
        with_buckets = _run(instance, full)
        optimum = _run(undamped(bare), full)
        out[name] = {
            "seconds_median_without_buckets": statistics.median(r["seconds"] for r in runs[name]),
            "seconds_all_without_buckets": [r["seconds"] for r in runs[name]],
            # the machine is shared: CPU time says what the wall time would be on an idle one
            "cpu_seconds_median_without_buckets": statistics.median(
                r["cpu_seconds"] for r in runs[name]
            ),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs[name]),
            "peak_rss_rise_mb": max(r["peak_rss_rise_mb"] for r in runs[name]),
            "seconds_with_buckets": with_buckets["seconds"],
            "peak_rss_mb_with_buckets": with_buckets["peak_rss_mb"],
            "optimal_max_utilization": optimum["max_utilization"],
            "optimal_latency_cost": optimum["latency_cost"],
        }
    new, old = out["column_generation"], out["full_lp"]
    rel = abs(new["optimal_latency_cost"] / old["optimal_latency_cost"] - 1)
    rel_u = abs(new["optimal_max_utilization"] / old["optimal_max_utilization"] - 1)
    out["objective_relative_difference"] = rel
    out["max_utilization_relative_difference"] = rel_u
    out["speedup_without_buckets"] = (
        old["seconds_median_without_buckets"] / new["seconds_median_without_buckets"]
    )
    # The target is judged on process CPU time (all threads): this 2-core machine is
    # shared, and wall time at a load average of ~10 measures the contention, not the solver.
    cpu = new["cpu_seconds_median_without_buckets"]
    same = rel <= OBJECTIVE_RTOL and rel_u <= OBJECTIVE_RTOL
    out["load_average_1m"] = os.getloadavg()[0]
    out["target"] = {
        "cpu_seconds": cpu,
        "wall_seconds": new["seconds_median_without_buckets"],
        "under_3s": cpu < TARGET_SECONDS,
        "same_optimum": same,
        "met": cpu < TARGET_SECONDS and same,
        "note": "CPU time of solve() without the bucket mapping (pure Python, the same in "
        "both methods); wall time and seconds_with_buckets are recorded alongside",
    }
    return out


def scale_claims(scale: dict[str, Any] | None) -> list[Claim]:
    if scale is None:
        return []
    new, old = scale["column_generation"], scale["full_lp"]
    return [
        claim(
            "solve CPU time at 5000x100 (median, without the bucket mapping)",
            new["cpu_seconds_median_without_buckets"],
            "s",
            Target.below(3.0, "< 3 s in-process"),
            baseline=old["cpu_seconds_median_without_buckets"],
            baseline_name="stage 2 as one full LP (before column generation)",
        ),
        claim(
            "latency objective at 5000x100 vs the full LP (relative difference)",
            scale["objective_relative_difference"],
            "ratio",
            Target.at_most(1e-6, "same optimum (within 1e-6)"),
        ),
        claim(
            "peak RSS of a solve at 5000x100",
            new["peak_rss_mb"],
            "MB",
            Target.below(old["peak_rss_mb"], "below the full LP's"),
            baseline=old["peak_rss_mb"],
            baseline_name="stage 2 as one full LP",
        ),
    ]
