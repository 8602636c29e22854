"""Trainer benchmark: what the real trainer contributes to a recovery's MTTR, and its costs.

Measured on real processes and real files:

- checkpoint write: the atomic, fsynced, manifested write, against the baseline
  measured in the same run, a bare ``np.savez`` to its final name (no fsync, no
  manifest: what a naive trainer does, and what KempnerForge#102 broke on);
- listing and verifying the kept checkpoints (sha256 over every data file);
- restart: process start -> first heartbeat, and -> first step past the checkpoint
  it resumed from (the "restart" share of MTTR the lab will add);
- stop: SIGTERM -> exit 143;
- correctness: a run with SIGKILL/resume cycles ends on the reference digest.

Targets (for a small model on a laptop): restart to progress p50 under 1.5 s, so
the trainer's share leaves room in the issue's 5 s orchestration budget; SIGTERM
stop p50 under 0.25 s; checkpoint write p50 under 50 ms.

    python benchmarks/trainer.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.lab.training.checkpoints import scan_checkpoints, write_checkpoint
from orchestrator.lab.training.process import TrainerProcess
from orchestrator.lab.training.sgd import init_state, params_digest, train, train_uninterrupted
from orchestrator.lab.training.status import Heartbeat, TrainerState
from orchestrator.lab.training.trainer import TrainerArgs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.summary import Claim, Target, claim, dump, flag  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "trainer.json"
SEED = 3
TARGETS = {"restart_to_progress_p50_s": 1.5, "stop_p50_s": 0.25, "checkpoint_write_p50_s": 0.05}


def _args(workdir: Path, **overrides: Any) -> TrainerArgs:
    values: dict[str, Any] = {
        "job": "bench",
        "workdir": workdir,
        "hosts": ("h1",),
        "total_steps": 1_000_000,
        "checkpoint_every": 20,
        "step_ms": 5.0,
        "seed": SEED,
        "resume": "latest",
        "keep": 3,
        "heartbeat_s": 0.05,
        "slow_factor": 1.0,
    }
    values.update(overrides)
    return TrainerArgs(**values)


def _past(step: int) -> Callable[[Heartbeat], bool]:
    return lambda beat: beat.step > step


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "max": ordered[-1],
    }


def _checkpoint_writes(root: Path, n: int) -> dict[str, Any]:
    arrays = train(init_state(SEED), 10).to_arrays()
    atomic, bare = [], []
    for i in range(n):
        started = time.perf_counter()
        write_checkpoint(root / "atomic", i, arrays)
        atomic.append(time.perf_counter() - started)
        (root / "bare").mkdir(exist_ok=True)
        started = time.perf_counter()
        np.savez(root / "bare" / f"ckpt-{i}.npz", allow_pickle=False, **arrays)
        bare.append(time.perf_counter() - started)
    scans = []
    for _ in range(n):
        started = time.perf_counter()
        records = scan_checkpoints(root / "atomic")
        scans.append(time.perf_counter() - started)
    return {
        "bytes": (root / "atomic" / "ckpt-0.npz").stat().st_size,
        "atomic_write_s": _summary(atomic),
        "baseline_bare_savez_s": _summary(bare),
        "overhead_ratio_p50": statistics.median(atomic) / statistics.median(bare),
        "scan_and_verify_s": _summary(scans),
        "checkpoints_scanned": len(records),
    }


def _restarts(root: Path, n: int) -> dict[str, Any]:
    workdir = root / "restart"
    with TrainerProcess.start(_args(workdir)) as first:
        first.wait_for(lambda b: (b.checkpoint_step or 0) >= 20, timeout=30)
        first.kill()
    to_beat, to_progress, stops = [], [], []
    for _ in range(n):
        started = time.monotonic()
        proc = TrainerProcess.start(_args(workdir))
        try:
            beat = proc.wait_for(lambda b: True, timeout=30)
            to_beat.append(time.monotonic() - started)
            resumed = beat.resumed_from
            proc.wait_for(_past(resumed), timeout=30)
            to_progress.append(time.monotonic() - started)
            stop_started = time.monotonic()
            code = proc.stop(grace_s=5.0)
            stops.append(time.monotonic() - stop_started)
            assert code == 143, f"stop exited {code}: {proc.log_tail()}"
        finally:
            proc.kill()
    return {
        "restart_to_first_heartbeat_s": _summary(to_beat),
        "restart_to_progress_past_checkpoint_s": _summary(to_progress),
        "sigterm_stop_s": _summary(stops),
    }


def _kill_cycles(root: Path, cycles: int) -> dict[str, Any]:
    workdir, total = root / "cycles", 300
    for target in np.linspace(40, total - 40, cycles).astype(int):
        with TrainerProcess.start(_args(workdir, total_steps=total, step_ms=2.0)) as proc:
            proc.wait_for(_past(int(target) - 1), timeout=30)
            proc.kill()
    final = TrainerProcess.start(_args(workdir, total_steps=total, step_ms=2.0))
    code = final.wait(60)
    progress = final.progress()
    beat = final.heartbeat()
    return {
        "kills": cycles,
        "exit_code": code,
        "final_state": beat.state.value if beat else None,
        "bit_identical": progress is not None
        and beat is not None
        and beat.state is TrainerState.FINISHED
        and progress.params_digest == params_digest(train_uninterrupted(SEED, total)),
    }


def summary(
    writes: dict[str, Any], restarts: dict[str, Any], cycles: dict[str, Any]
) -> list[Claim]:
    """The summary claims, from the same numbers as the targets."""
    return [
        claim(
            "checkpoint write p50 (atomic, fsynced, manifested)",
            1000 * writes["atomic_write_s"]["p50"],
            "ms",
            Target.below(
                1000 * TARGETS["checkpoint_write_p50_s"],
                f"< {1000 * TARGETS['checkpoint_write_p50_s']:g} ms",
            ),
            baseline=1000 * writes["baseline_bare_savez_s"]["p50"],
            baseline_name="bare np.savez",
        ),
        claim(
            "restart to progress past the checkpoint p50",
            restarts["restart_to_progress_past_checkpoint_s"]["p50"],
            "s",
            Target.below(
                TARGETS["restart_to_progress_p50_s"], f"< {TARGETS['restart_to_progress_p50_s']} s"
            ),
            baseline=restarts["restart_to_first_heartbeat_s"]["p50"],
            baseline_name="process start to first heartbeat",
        ),
        claim(
            "SIGTERM to exit p50",
            restarts["sigterm_stop_s"]["p50"],
            "s",
            Target.below(TARGETS["stop_p50_s"], f"< {TARGETS['stop_p50_s']} s"),
        ),
        flag(
            f"bit-identical to uninterrupted after {cycles['kills']} SIGKILLs",
            cycles["bit_identical"],
        ),
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trainer-bench-") as tmp:
        root = Path(tmp)
        writes = _checkpoint_writes(root, 10 if args.quick else 50)
        restarts = _restarts(root, 3 if args.quick else 10)
        cycles = _kill_cycles(root, 2 if args.quick else 4)
    targets = {
        "restart_to_progress": {
            "met": restarts["restart_to_progress_past_checkpoint_s"]["p50"]
            < TARGETS["restart_to_progress_p50_s"],
            "target_p50_s": TARGETS["restart_to_progress_p50_s"],
        },
        "sigterm_stop": {
            "met": restarts["sigterm_stop_s"]["p50"] < TARGETS["stop_p50_s"],
            "target_p50_s": TARGETS["stop_p50_s"],
        },
        "checkpoint_write": {
            "met": writes["atomic_write_s"]["p50"] < TARGETS["checkpoint_write_p50_s"],
            "target_p50_s": TARGETS["checkpoint_write_p50_s"],
        },
        "bit_identical_after_kills": {"met": cycles["bit_identical"]},
    }
    result = {
        "benchmark": "trainer",
        "quick": args.quick,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "targets": targets,
        "checkpoints": writes,
        "restarts": restarts,
        "kill_cycles": cycles,
        "elapsed_s": time.perf_counter() - started,
        "summary": dump(summary(writes, restarts, cycles)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    w, r = writes, restarts
    print(
        f"checkpoint write p50 {w['atomic_write_s']['p50'] * 1e3:.2f} ms "
        f"(bare savez {w['baseline_bare_savez_s']['p50'] * 1e3:.2f} ms, "
        f"x{w['overhead_ratio_p50']:.1f}); scan+verify {w['checkpoints_scanned']} "
        f"p50 {w['scan_and_verify_s']['p50'] * 1e3:.2f} ms"
    )
    print(
        f"restart -> heartbeat p50 {r['restart_to_first_heartbeat_s']['p50']:.3f} s, "
        f"-> progress p50 {r['restart_to_progress_past_checkpoint_s']['p50']:.3f} s; "
        f"SIGTERM stop p50 {r['sigterm_stop_s']['p50']:.3f} s"
    )
    for name, t in targets.items():
        print(f"{name}: {'met' if t['met'] else 'NOT MET'}")
    print(f"wrote {args.out} in {result['elapsed_s']:.1f} s")
    return result


if __name__ == "__main__":
    main()
