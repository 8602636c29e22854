"""PyTorch job checkpoints: ``torch.distributed.checkpoint`` async_save against blocking save.

Both runs train the same DDP job (one torchrun agent per host on loopback, gloo,
an MLP widened to about 1M parameters so each checkpoint, with Adam's state, is
about 13 MB over all shards), checkpointing every 5 steps and committing each
checkpoint with the per-shard sha256 manifest (:mod:`orchestrator.lab.training.sharded`).
Measured on rank 0 by the job itself (``checkpoint-stats.json``):

- stall: how long the training loop was held by a checkpoint (the cost every
  checkpoint charges the job). Blocking: the whole save and the commit. Async:
  staging a copy of the state (and waiting for the previous save, if still running);
- commit latency: from the save's start to the manifest being durable (how far
  the newest *verified* checkpoint trails the loop);
- a training step, for scale.

Target: async_save's stall p50 below the blocking save's (measured in the same
run): it is the mode the job uses by default. Both runs must end on the same
parameters, bit for bit.

    python benchmarks/torch_checkpoint.py [--quick] [--ranks N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.lab.training.torchjob.args import STATS_FILE, parse_args
from orchestrator.lab.training.torchjob.launch import TorchJob

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.summary import Claim, Target, claim, dump, flag  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "torch_checkpoint.json"
HIDDEN = 1024
RUN_TIMEOUT_S = 600.0


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
    }


def _run(root: Path, mode: str, ranks: int, steps: int) -> dict[str, Any]:
    workdir = root / mode
    hosts = ",".join(f"h{i}" for i in range(ranks))
    args = parse_args(
        [
            "--job=bench",
            f"--workdir={workdir}",
            f"--hosts={hosts}",
            f"--total-steps={steps}",
            "--checkpoint-every=5",
            f"--hidden={HIDDEN}",
            f"--save={mode}",
        ]
    )
    started = time.perf_counter()
    job = TorchJob.start(args)
    try:
        codes = job.wait(RUN_TIMEOUT_S)
    finally:
        job.kill()
    if codes != [0] * ranks:
        raise RuntimeError(f"{mode} run failed {codes}: {job.log_tail('h0')}")
    stats = json.loads((workdir / STATS_FILE).read_text())
    progress = job.progress()
    assert progress is not None
    shard_bytes = sum(p.stat().st_size for p in (workdir / f"ckpt-{steps}.dcp").iterdir())
    return {
        "stall_s": _summary(stats["stall_s"]),
        "commit_s": _summary(stats["commit_s"]),
        "step_s": _summary(stats["step_s"]),
        "checkpoint_bytes": shard_bytes,
        "params_digest": progress.params_digest,
        "wall_s": time.perf_counter() - started,
    }


def summary(runs: dict[str, dict[str, Any]]) -> list[Claim]:
    blocking, async_ = runs["blocking"], runs["async"]
    return [
        claim(
            "DCP async_save stall per checkpoint p50",
            1000 * async_["stall_s"]["p50"],
            "ms",
            Target.below(1.0, "< 1x the blocking save", on="ratio"),
            baseline=1000 * blocking["stall_s"]["p50"],
            baseline_name="blocking dcp.save + commit",
        ),
        flag(
            "async and blocking runs end bit-identical",
            async_["params_digest"] == blocking["params_digest"],
        ),
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--ranks", type=int, default=4, help="hosts, one rank each")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    steps = 20 if args.quick else 60
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torch-ckpt-bench-") as tmp:
        runs = {mode: _run(Path(tmp), mode, args.ranks, steps) for mode in ("blocking", "async")}
    claims = summary(runs)
    result = {
        "benchmark": "torch_checkpoint",
        "quick": args.quick,
        "python": platform.python_version(),
        "ranks": args.ranks,
        "steps": steps,
        "hidden": HIDDEN,
        "runs": runs,
        "targets": {"async_stall_below_blocking": {"met": bool(claims[0].met)}},
        "elapsed_s": time.perf_counter() - started,
        "summary": dump(claims),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    for mode, run in runs.items():
        print(
            f"{mode}: stall p50 {run['stall_s']['p50'] * 1e3:.1f} ms, commit p50 "
            f"{run['commit_s']['p50'] * 1e3:.1f} ms, step p50 {run['step_s']['p50'] * 1e3:.1f} ms, "
            f"{run['checkpoint_bytes'] / 1e6:.1f} MB per checkpoint"
        )
    print(f"wrote {args.out} in {result['elapsed_s']:.1f} s")
    return result


if __name__ == "__main__":
    main()
