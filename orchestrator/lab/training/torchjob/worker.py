"""One rank of the PyTorch job, started by ``torchrun`` (one agent per lab host).

``torchrun --nnodes=N --node-rank=I --nproc-per-node=1 ... -m
orchestrator.lab.training.torchjob.worker --job J --workdir D ...``

Every rank trains the :mod:`.model` MLP under DistributedDataParallel over gloo.
Training is deterministic: seeded init and data, one thread,
``torch.use_deterministic_algorithms(True)``, a fixed rank order (static
rendezvous, rank = host index), and the data cursor saved in each checkpoint. So a
run resumed from a checkpoint ends with the same parameters, bit for bit, as one
that was never interrupted.

Every ``--checkpoint-every`` steps all ranks save with ``torch.distributed.checkpoint``
(each writes its shard) into a staging directory; rank 0 then commits it through
:mod:`..sharded` (shards hashed, directory renamed, manifest last) and prunes. With
``--save async`` the save runs in the background on its own gloo group and rank 0
commits when it completes; the benchmark ``benchmarks/torch_checkpoint.py``
measured both. Rank 0 also writes the heartbeat and, at the end, the progress file
(:mod:`..status`) that the lab's supervisor side already reads.

Exit codes: 0 finished; 2 bad arguments; 3 the requested checkpoint cannot be used.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.futures import Future as TorchFuture
from torch.nn.parallel import DistributedDataParallel

from orchestrator.lab.training.atomic import TMP_SUFFIX, atomic_write_bytes
from orchestrator.lab.training.checkpoints import CheckpointError, CheckpointStatus
from orchestrator.lab.training.sharded import (
    commit_sharded,
    prune_sharded,
    scan_sharded,
    staging_dir,
    verify_sharded,
)
from orchestrator.lab.training.status import (
    PROGRESS_FILE,
    Heartbeat,
    Progress,
    TrainerState,
    write_status,
)
from orchestrator.lab.training.torchjob.args import (
    CHECKPOINT_STOP_FILE,
    EXIT_BAD_CHECKPOINT,
    EXIT_CHECKPOINT_STOP,
    EXIT_OK,
    STATS_FILE,
    WorkerArgs,
    parse_args,
    rank_pid_file,
)
from orchestrator.lab.training.torchjob.model import DataSet, build_model, params_digest
from orchestrator.lab.training.torchjob.ranks import (
    RankTiming,
    StepWindow,
    read_slow_factor,
    write_rank_timing,
)

__all__ = ["main"]


def _choose_resume(args: WorkerArgs) -> int:
    """Rank 0's choice: the step to resume from (0: from scratch); -1: refused."""
    if args.resume == "none":
        return 0
    records = scan_sharded(args.workdir)
    if args.resume == "latest":
        verified = [r.step for r in records if r.verified]
        for record in records:
            if not record.verified:
                print(f"skipping ckpt {record.step}: {record.status}: {record.detail}", flush=True)
        return verified[-1] if verified else 0
    try:
        verify_sharded(args.workdir, int(args.resume))
    except CheckpointError as exc:
        print(f"cannot resume {args.job}: {exc}", file=sys.stderr, flush=True)
        return -1
    return int(args.resume)


class Rank:
    def __init__(self, args: WorkerArgs) -> None:
        self.args = args
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.net = build_model(args.seed, args.hidden)
        self.ddp = DistributedDataParallel(self.net)
        self.ddp.register_comm_hook(None, _ordered_allreduce)
        self.optim = torch.optim.Adam(self.ddp.parameters(), lr=args.lr)
        self.data = DataSet(args.seed)
        self.step = 0
        self.cursor = 0
        self.resumed_from = 0
        self.checkpoint_step: int | None = None
        self.pending: tuple[int, float, Future[Any]] | None = None
        #: seconds the loop was held by each checkpoint, and from save start to commit
        self.stalls: list[float] = []
        self.commits: list[float] = []
        self.step_s: list[float] = []
        #: own compute of the last few steps, reported after every step (ranks.py)
        self.own = StepWindow()
        self.host = args.hosts[self.rank]
        # async_save runs its collectives in a background thread: they get their own
        # group so they never interleave with DDP's all-reduce on the default one.
        self.ckpt_group = dist.new_group(backend="gloo") if args.save == "async" else None
        self._next_beat = 0.0

    def _state(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.ddp, self.optim)
        progress = {"step": self.step, "cursor": self.cursor, "seed": self.args.seed}
        return {"model": model_sd, "optim": optim_sd, "progress": progress}

    def load(self, step: int) -> None:
        state = self._state()
        dcp.load(state, checkpoint_id=str(verify_sharded(self.args.workdir, step)))
        set_state_dict(
            self.ddp, self.optim, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        progress = state["progress"]
        if progress["step"] != step or progress["seed"] != self.args.seed:
            raise CheckpointError(
                self.args.workdir, step, CheckpointStatus.CORRUPT, f"holds {progress}"
            )
        self.step = self.resumed_from = self.checkpoint_step = step
        self.cursor = int(progress["cursor"])

    def report_timing(self) -> None:
        """This rank's own compute per step, its recent median (every rank writes).

        After every step, not every heartbeat: a host that turns slow shows at its
        second slow step, not at a report seconds later (ranks.py).
        """
        own_ms = self.own.own_ms()
        if own_ms is None:
            return
        write_rank_timing(
            self.args.workdir,
            RankTiming(
                rank=self.rank, host=self.host, step=self.step, own_ms=own_ms, time=time.time()
            ),
        )

    def beat(self, state: TrainerState) -> None:
        self._next_beat = time.monotonic() + self.args.heartbeat_s
        if self.rank != 0:
            return
        write_status(
            self.args.workdir,
            Heartbeat(
                job=self.args.job,
                pid=os.getpid(),
                step=self.step,
                total_steps=self.args.total_steps,
                time=time.time(),
                state=state,
                seed=self.args.seed,
                hosts=list(self.args.hosts),
                resumed_from=self.resumed_from,
                checkpoint_step=self.checkpoint_step,
                params_digest=None,
            ),
        )

    def train_step(self) -> None:
        begun = time.monotonic()
        if self.args.step_ms > 0:
            # The stand-in for this rank's GPU compute, before it joins the all-reduce;
            # a straggler's host stretches it (ranks.py).
            time.sleep(self.args.step_ms / 1000 * read_slow_factor(self.args.workdir, self.host))
        x, y = self.data.batch(self.cursor, self.rank, self.args.batch)
        self.optim.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(self.ddp(x), y)
        # own compute: everything before backward, where the wait for peers happens
        self.own.add(time.monotonic() - begun)
        loss.backward()
        self.optim.step()
        self.step += 1
        self.cursor += self.world * self.args.batch

    def _commit(self, step: int, began: float) -> None:
        if self.rank == 0:
            commit_sharded(
                self.args.workdir, step, meta={"job": self.args.job, "world": self.world}
            )
            prune_sharded(self.args.workdir, self.args.keep)
            self.checkpoint_step = step
            self.commits.append(time.monotonic() - began)
            print(f"checkpoint {step} committed", flush=True)

    def finish_pending(self, wait: bool) -> None:
        if self.pending is None:
            return
        step, began, future = self.pending
        if not wait and not future.done():
            return
        future.result()
        self.pending = None
        self._commit(step, began)

    def checkpoint(self) -> None:
        began = time.monotonic()
        self.finish_pending(wait=True)
        target = staging_dir(self.args.workdir, self.step)
        if self.args.save == "async":
            future = dcp.async_save(
                self._state(), checkpoint_id=str(target), process_group=self.ckpt_group
            )
            assert isinstance(future, Future)
            self.pending = (self.step, began, future)
        else:
            dcp.save(self._state(), checkpoint_id=str(target))
            self._commit(self.step, began)
        self.stalls.append(time.monotonic() - began)

    def _stop_requested(self) -> bool:
        """Rank 0 looks for the lab's request and tells every rank, so all stop together."""
        asked = self.rank == 0 and (self.args.workdir / CHECKPOINT_STOP_FILE).exists()
        flag = torch.tensor([1 if asked else 0])
        dist.broadcast(flag, src=0)
        return bool(flag.item())

    def _checkpoint_and_stop(self) -> int:
        """A planned move: commit a checkpoint at this step (unless one is), then stop."""
        if self.checkpoint_step != self.step and (
            self.pending is None or self.pending[0] != self.step
        ):
            self.checkpoint()
        self.finish_pending(wait=True)
        self.beat(TrainerState.STOPPED)
        print(f"stopped at step {self.step}, checkpointed on demand", flush=True)
        return EXIT_CHECKPOINT_STOP

    def run(self) -> int:
        args = self.args
        self.beat(TrainerState.RUNNING)
        started, first = time.monotonic(), self.step
        while self.step < args.total_steps:
            begun = time.monotonic()
            self.train_step()
            self.step_s.append(time.monotonic() - begun)
            self.report_timing()
            if self.step % args.checkpoint_every == 0 or self.step == args.total_steps:
                self.checkpoint()
            self.finish_pending(wait=False)
            if time.monotonic() >= self._next_beat:
                self.beat(TrainerState.RUNNING)
            if self.step < args.total_steps and self._stop_requested():
                return self._checkpoint_and_stop()
        self.finish_pending(wait=True)
        if self.rank == 0:
            write_status(
                args.workdir,
                Progress(
                    job=args.job,
                    step=self.step,
                    total_steps=args.total_steps,
                    seed=args.seed,
                    params_digest=params_digest(self.net),
                    resumed_from=self.resumed_from,
                    elapsed_s=time.monotonic() - started,
                    steps_run=self.step - first,
                    finished_at=time.time(),
                ),
            )
            stats = {
                "save": args.save,
                "world": self.world,
                "hidden": args.hidden,
                "stall_s": self.stalls,
                "commit_s": self.commits,
                "step_s": self.step_s,
            }
            atomic_write_bytes(args.workdir / STATS_FILE, json.dumps(stats).encode())
        self.beat(TrainerState.FINISHED)
        return EXIT_OK


def _ordered_allreduce(_state: object, bucket: dist.GradBucket) -> TorchFuture[torch.Tensor]:
    """DDP's gradient all-reduce, summed in rank order so the bits never depend on buckets.

    Gloo's ring all-reduce adds each element in an order set by where it falls in the
    bucket, and DDP rebuilds its buckets after the first step of every run: a resumed
    run's first step would sum in another order than the uninterrupted run's and
    drift by an ulp. Gathering the buckets and adding rank 0 + rank 1 + ... costs
    little at this size and makes resume bit-identical.
    """
    tensor = bucket.buffer()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    gathered = dist.all_gather(parts, tensor, async_op=True)
    assert gathered is not None

    def reduce(_done: TorchFuture[Any]) -> torch.Tensor:
        total = parts[0].clone()
        for part in parts[1:]:
            total += part
        return total / len(parts)

    return gathered.get_future().then(reduce)


# DDP checks the hook's annotations against the real classes, which postponed
# annotations (``from __future__ import annotations``) turn into strings.
_ordered_allreduce.__annotations__.update(
    bucket=dist.GradBucket, **{"return": TorchFuture[torch.Tensor]}
)


def _setup() -> None:
    # Same numbers on every run: one thread (no split reductions), deterministic kernels.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def _clear_leftovers(workdir: Path) -> None:
    # Rank 0 alone, before any rank writes: staging directories are abandoned saves of
    # an earlier run, and a progress file belongs to an earlier run.
    for path in workdir.iterdir():
        if path.name.endswith(TMP_SUFFIX) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.name == PROGRESS_FILE or (
            path.name.startswith("rank-") and path.name.endswith((".pid", ".json"))
        ):
            path.unlink()


def _train(args: WorkerArgs) -> int:
    rank = dist.get_rank()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        _clear_leftovers(args.workdir)
    choice = torch.tensor([_choose_resume(args) if rank == 0 else 0])
    dist.broadcast(choice, src=0)
    step = int(choice.item())
    if step < 0:
        return EXIT_BAD_CHECKPOINT
    job = Rank(args)
    if step > 0:
        job.load(step)
    rank_pid_file(args.workdir, rank).write_text(f"{os.getpid()}\n")
    print(f"rank {rank}/{job.world} pid {os.getpid()} resumed_from {step}", flush=True)
    code = job.run()
    # Leave together: a rank that tears gloo down while a peer is still in its last
    # collective can leave that peer blocked for good.
    dist.barrier()
    return code


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Train, then leave with ``os._exit``.

    A finished rank sometimes never exited (main thread parked on a futex, gloo's
    threads alive, every peer gone) in gloo teardown or interpreter finalization,
    which held its torchrun agent, and so the whole job, for the agent's 300 s exit
    barrier. Nothing is left to flush once the files are written, so the rank skips
    both and exits at once; the kernel closes its sockets.
    """
    args = parse_args(argv)
    # `kill -USR1 <rank pid>` prints where every thread of a stuck rank is.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    _setup()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    try:
        code = _train(args)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
