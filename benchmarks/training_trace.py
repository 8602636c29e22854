"""The training supervisor workflow driven through a 54-day failure trace, against the simulation.

The real ``TrainingJobSupervisorWorkflow`` (and its recovery children) runs on the
Java time-skipping test server against a :class:`~orchestrator.lab.training.trace.TraceFleet`:
a model fleet whose clock is the Temporal activity's (skipped) time and whose
failures are a trace drawn in advance by ``ettr_sim.failure_traces`` for a seed.
The supervisor polls in ``watch_mode=retry`` (each poll is one activity attempt,
Temporal's retry timer waits between polls), so the server skips between polls.

The same trace goes through ``ettr_sim.simulate_trace`` with the same parameters:
failure rate, checkpoint interval Δt (``checkpoint_every`` × ``step_s``), restart
time u0 and the blocking checkpoint write w (``CKPT_WRITE_S``, below), which the
trace fleet's job spends after every interval with no steps and which the supervisor
is told (it cannot see a write). Target: the ETTR the workflow returns is within 1%
(relative) of the simulation's, and it counts every failure of the trace. The
workflow's own observation lag (detection up to one poll, confirmation up to one
confirm poll) is the expected gap: about λ·(poll/2 + confirm poll) of ETTR.

Scale (issue 24): the failure process is the Llama 3 job's (16,384 GPUs, 419
unexpected interruptions in 54 days, one per 3.1 h) and the job is that size too:
``--hosts 2048`` (8 GPUs each) over ``--buildings 8`` with ``--spares`` per building.
A job of another size fails at the same rate per GPU (``--model-gpus`` overrides: the
tests show a small job the Llama 3 job's failures).
What it costs Temporal is measured, not estimated: every payload the client and worker
encode or decode passes a recording codec (largest kept), and after the run every
history (each continue-as-new run of the supervisor and each recovery child) is read
back through ``fetch_history`` for its event count and largest payload. Targets: no
payload over 256 KB, every run's history under 10,000 events. Worker memory is this
process's peak RSS (the fleet model lives in it too); the test server's is its own.

Results keep one entry per job size (``runs``, keyed by hosts), so an 8,192-host run
(``--hosts 8192``) is added beside the 2,048-host one.

    python benchmarks/training_trace.py [--quick] [--days D] [--hosts N] [--buildings B]
        [--spares S] [--ckpt-write W] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from orchestrator.activities.training import TrainingActivities
from orchestrator.contracts.training_supervisor import (
    FailureKind,
    FailureRecord,
    SupervisorInput,
    SupervisorStatus,
    WatchMode,
)
from orchestrator.lab.training.failure_trace import TraceJob, trace_from_simulation
from orchestrator.lab.training.trace import TraceFleet, activity_clock
from orchestrator.policy.training.crashloop import DEFAULT_CRASH_LOOP_LIMIT, crash_loop_limit_for
from orchestrator.policy.training.ettr import FailureModel, rate_from_interruptions
from orchestrator.policy.training.ettr_sim import SimulationParams, simulate_trace
from orchestrator.temporal import binary_path, data_converter, register_search_attributes
from orchestrator.worker import sandbox_runner
from workflows.training_recovery import TrainingRecoveryWorkflow
from workflows.training_supervisor import TrainingJobSupervisorWorkflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.summary import Claim, Target, claim, dump, flag  # noqa: E402
from testkit.history_audit import (  # noqa: E402
    audit_chain,
    child_peak_rss_mb,
    recording_converter,
)

RESULTS = Path(__file__).parent / "results" / "training_trace.json"
#: the 16-host 54-day run took 20 minutes on 2 cores; the suite's default timeout is 15
SUITE_TIMEOUT_S = 2700.0
DAYS = 54.0
TOLERANCE = 0.01
#: Temporal warns at 512 KB and refuses 2 MB; the budget here is half the warning
PAYLOAD_CAP_BYTES = 256 * 1024
#: a run's history stays well under Temporal's 50K-event limit (and its 10K warning)
HISTORY_CAP_EVENTS = 10_000
#: the Llama 3 job: 16,384 GPUs, 419 unexpected interruptions in 54 days
LLAMA3 = FailureModel(
    gpus=16_384, failures_per_1000_node_days=rate_from_interruptions(419, 16_384, 54.0)
)
#: w, seconds per checkpoint. benchmarks/torch_checkpoint.py measured a blocking
#: torch.distributed.checkpoint save at 0.293 s (p50) for 3.27 MB per rank (11 MB/s per
#: rank on this machine's disk). Llama 3 405B's state with Adam (bf16 weights, fp32
#: master and two moments: 14 bytes a parameter, 5.67 TB) over 16,384 GPUs is 346 MB a
#: rank: 31 s at that rate, taken as 30 s. (Async save's stall scales to about 2 s.)
CKPT_WRITE_S = 30.0
HOSTS = 2048
BUILDINGS = 8
#: spare hosts per building, beside the job's share of it
SPARES = 8


def trace_job(
    hosts: int = HOSTS, write_s: float = CKPT_WRITE_S, interval_s: int = 30 * 60
) -> TraceJob:
    return TraceJob(
        name="llama3-trace",
        hosts=hosts,
        step_s=1.0,
        checkpoint_every=interval_s,  # Δt = 30 min by default (1 s steps)
        restart_s=5 * 60.0,  # u0 = 5 min
        checkpoint_write_s=write_s,
    )


#: the first test's job: 16 hosts (4 buildings of 16 with 2 spares each), no write cost
#: (two days of trace are too short for the 1% comparison with w > 0: see TestAtScale)
JOB = trace_job(16, 0.0)
#: the test's polls (a short trace); the 54-day run polls half as often, see BENCH_POLL_S
POLL_S = 60.0
CONFIRM_POLL_S = 5.0
#: The Java test server gets slower with every timer it has fired (measured here: 1,000
#: one-shot polls took 2.1 s on a fresh server and 5.9 s after 11,000 more), so the whole
#: run costs about the square of the number of polls; 54 days at 60 s polls did not finish
#: in 12 minutes (day 21). At 120 s / 10 s the expected lag is 0.7% of ETTR.
BENCH_POLL_S = 120.0
BENCH_CONFIRM_POLL_S = 10.0


def sim_params(days: float, job: TraceJob = JOB, model: FailureModel = LLAMA3) -> SimulationParams:
    return SimulationParams(
        failures=model,
        days=days,
        interval_s=job.interval_s,
        cost_s=job.checkpoint_write_s,
        restart_s=job.restart_s,
    )


def failure_model(gpus: int) -> FailureModel:
    """Llama 3's failure rate per GPU-day, for a job of ``gpus``: a job four times its size
    fails four times as often."""
    return LLAMA3.model_copy(update={"gpus": gpus})


def fleet_shape(hosts: int, buildings: int, spares: int) -> dict[str, int]:
    """TraceFleet's layout: the job spread evenly over ``buildings``, ``spares`` more each."""
    return {
        "buildings": buildings,
        "hosts_per_building": math.ceil(hosts / buildings) + spares,
        "spares_per_building": spares,
    }


async def drive(
    env: WorkflowEnvironment,
    *,
    days: float,
    seed: int,
    job: TraceJob = JOB,
    buildings: int = 4,
    spares: int = 2,
    poll_s: float = POLL_S,
    confirm_poll_s: float = CONFIRM_POLL_S,
    failures_per_run: int = 25,
    keep_failures: int = 30,
    model_gpus: int = LLAMA3.gpus,
    crash_loop_limit: int | None = DEFAULT_CRASH_LOOP_LIMIT,
    progress: bool = False,
) -> dict[str, Any]:
    """Run the supervisor through the trace for ``days`` (failures of ``model_gpus`` at
    Llama 3's rate) and the simulation on the same trace; read back what it cost Temporal (payloads, histories) and this process."""
    params = sim_params(days, job, failure_model(model_gpus))
    trace = trace_from_simulation(params, seed=seed)
    sim = simulate_trace(
        trace.failures_s,
        horizon_s=params.horizon_s,
        interval_s=params.interval_s,
        cost_s=params.cost_s,
        restart_s=params.restart_s,
    )
    if crash_loop_limit is None:
        # sized to the trace's failure rate, as an operator would: see crash_loop_limit_for
        crash_loop_limit = crash_loop_limit_for(
            mtbf_s=params.failures.mtbf_s,
            interval_s=params.interval_s,
            restart_s=params.restart_s + poll_s / 2 + confirm_poll_s,
            failures=params.horizon_s / params.failures.mtbf_s,
        )
    shape = fleet_shape(job.hosts, buildings, spares)
    fleet = TraceFleet(job, trace, clock=activity_clock(), **shape)
    acts = TrainingActivities(fleet, clock=fleet.now)
    converter, codec = recording_converter(env.client.data_converter)
    config = env.client.config()
    config["data_converter"] = converter
    client = Client(**config)
    queue = f"trace-{uuid.uuid4().hex[:10]}"
    options = SupervisorInput(
        job=job.name,
        hang_after_s=6 * job.heartbeat_s,
        poll_s=poll_s,
        confirm_poll_s=confirm_poll_s,
        confirm_timeout_s=job.restart_s + 3600.0,
        watch_mode=WatchMode.RETRY,
        failures_per_run=failures_per_run,
        keep_failures=keep_failures,
        crash_loop_limit=crash_loop_limit,
        # a checkpoint is passed over one no-progress resume before the halt (3 and 2 by default)
        max_failed_resumes=max(1, crash_loop_limit - 1),
        checkpoint_write_s=job.checkpoint_write_s,
        checkpoint_interval_s=job.interval_s,
    )
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[TrainingJobSupervisorWorkflow, TrainingRecoveryWorkflow],
        activities=[
            acts.watch,
            acts.stop,
            acts.quarantine,
            acts.read,
            acts.start,
            acts.await_progress,
            acts.alert,
        ],
        workflow_runner=sandbox_runner(),
    )
    started = time.perf_counter()
    cpu0 = time.process_time()
    async with worker:
        handle = await client.start_workflow(
            TrainingJobSupervisorWorkflow.run,
            options,
            id=f"training-{job.name}-{uuid.uuid4().hex[:6]}",
            task_queue=queue,
        )
        ticker = asyncio.create_task(_progress(fleet, started)) if progress else None
        try:
            status: SupervisorStatus = await handle.result()
        finally:
            if ticker is not None:
                ticker.cancel()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    audit = await audit_chain(client, handle.id, handle.first_execution_run_id or "")
    failures = [f for f in status.failures if f.kind is not FailureKind.LAUNCH]
    totals = status.totals  # over every failure: older records are folded into totals
    in_order = sum(_stamped_in_order(f) for f in failures)
    ettr = status.ettr
    top = audit.max_payload
    return {
        "days": days,
        "seed": seed,
        "hosts": job.hosts,
        "gpus": job.hosts * job.gpus_per_host,
        "fleet_hosts": len(fleet.hosts),
        **shape,
        "gpus_modelled": params.failures.gpus,
        "failures_per_1000_node_days": params.failures.failures_per_1000_node_days,
        "mtbf_s": params.failures.mtbf_s,
        "interval_s": params.interval_s,
        "restart_s": params.restart_s,
        "cost_s": params.cost_s,
        "poll_s": poll_s,
        "confirm_poll_s": confirm_poll_s,
        "failures_per_run": failures_per_run,
        "crash_loop_limit": crash_loop_limit,
        "max_failed_resumes": max(1, crash_loop_limit - 1),
        "keep_failures": keep_failures,
        "trace_failures": len(trace.failures_s),
        "trace_gpu_failures": sum(k == "gpu" for k in trace.kinds),
        "fleet_hits": fleet.counts.hits,
        "fleet_deferred": fleet.counts.deferred,
        "fleet_starts": fleet.counts.starts,
        "workflow_state": status.state.value,
        "workflow_alert": status.alert,
        "workflow_failures": totals.failures,
        "workflow_failures_listed": len(failures),
        "workflow_records_dropped": status.dropped,
        "workflow_confirmed": totals.confirmed,
        "workflow_quarantined_hosts": totals.quarantined_hosts,
        "workflow_ettr": ettr,
        "sim_ettr": sim.ettr,
        # the job's own count: steps that survived the trace, over the horizon
        "fleet_ettr": fleet.productive_s() / params.horizon_s,
        "sim_failures": sim.failures,
        "sim_checkpoints": sim.checkpoints,
        "rel_diff": None if ettr is None else ettr / sim.ettr - 1.0,
        "expected_lag_rel": (poll_s / 2 + confirm_poll_s) * params.failures.rate_per_s / sim.ettr,
        "mean_mttd_s": totals.mttd_mean_s,
        "mean_mttr_s": totals.mttr_mean_s,
        # onset <= detected <= decided <= restarted (<= recovered, once confirmed): one timeline
        # (of the records still listed)
        "failures_stamped_in_order": in_order,
        # what it cost Temporal: every payload through the codec, every run's history
        "payloads_seen": codec.count,
        "payload_max_bytes": codec.max_bytes,
        "payload_largest": [{"bytes": b, "starts": head} for b, head in codec.largest],
        "history_runs": len(audit.runs),
        "history_max_events": audit.max_events,
        "history_max_payload_bytes": 0 if top is None else top.max_payload_bytes,
        "history_max_payload_event": "" if top is None else top.max_payload_event,
        "supervisor_history": audit.summary(lambda wid: wid == handle.id),
        "recovery_history": audit.summary(lambda wid: wid.startswith(f"{handle.id}-recovery-")),
        "wall_s": wall,
        "wall_s_per_day": wall / days,
        # 2 cores shared with other work: wall time per day depends on it
        "load_avg_1m_at_end": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "cpu_s": cpu,
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "test_server_peak_rss_mb": child_peak_rss_mb("temporal-test-server"),
    }


async def _progress(fleet: TraceFleet, started: float, every_s: float = 30.0) -> None:
    """Trace day and wall time to stderr now and then (a long run shows how it goes)."""
    while True:
        await asyncio.sleep(every_s)
        day = fleet.elapsed_s / 86400.0
        wall = time.perf_counter() - started
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print(
            f"day {day:6.2f}  wall {wall:7.1f} s  failures {fleet.counts.applied}  "
            f"rss {rss:.0f} MB",
            file=sys.stderr,
            flush=True,
        )


def _stamped_in_order(failure: FailureRecord) -> bool:
    """Restarted, and every stamp it has in order (a failure that cuts a restart short is
    never confirmed: no ``recovered_at``)."""
    if failure.decided_at is None or failure.restarted_at is None:
        return False
    stamps = [failure.onset_at, failure.detected_at, failure.decided_at, failure.restarted_at]
    if failure.recovered_at is not None:
        stamps.append(failure.recovered_at)
    return stamps == sorted(stamps)


def summary(run: dict[str, Any]) -> list[Claim]:
    days, hosts = run["days"], run["hosts"]
    job = f"{hosts:,} hosts, {days:g} days"
    if run["gpus_modelled"] != run.get("gpus", run["gpus_modelled"]):
        job += f", failures of {run['gpus_modelled']:,} GPUs"
    if run["interval_s"] != 1800:
        job += f", Δt {run['interval_s']:g} s"
    if run.get("crash_loop_limit", DEFAULT_CRASH_LOOP_LIMIT) != DEFAULT_CRASH_LOOP_LIMIT:
        job += f", crash-loop limit {run['crash_loop_limit']}"
    return [
        claim(
            f"supervisor workflow's ETTR vs the simulation ({job}, w = {run['cost_s']:g} s)",
            run["workflow_ettr"],
            "ETTR",
            Target.between(1 - TOLERANCE, 1 + TOLERANCE, "within 1%", on="ratio"),
            baseline=run["sim_ettr"],
            baseline_name="ettr_sim on the same trace and parameters",
        ),
        claim(
            f"failures the workflow recovered, of the trace's ({job})",
            run["workflow_failures"],
            "failures",
            Target.equal(run["trace_failures"], f"all {run['trace_failures']}"),
        ),
        flag(
            f"the job reached the end of the trace, not halted ({job})",
            run["workflow_state"] == "finished",
        ),
        claim(
            f"largest payload encoded or decoded ({job})",
            run["payload_max_bytes"] / 1024.0,
            "KB",
            Target.below(PAYLOAD_CAP_BYTES / 1024.0, "< 256 KB"),
        ),
        claim(
            f"most events in one run's history, of {run['history_runs']} runs ({job})",
            run["history_max_events"],
            "events",
            Target.below(HISTORY_CAP_EVENTS, "< 10,000"),
        ),
        claim(
            f"wall time per simulated day ({run['trace_failures']} failures; {job})",
            run["wall_s_per_day"],
            "s/day",
            Target.below(60.0, "< 60 s per day"),
        ),
    ]


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter,
        test_server_existing_path=binary_path("temporal-test-server"),
    )
    await register_search_attributes(env.client)
    try:
        return await drive(
            env,
            days=args.days,
            seed=args.seed,
            job=trace_job(args.hosts, args.ckpt_write, args.interval),
            buildings=args.buildings,
            spares=args.spares,
            poll_s=args.poll,
            confirm_poll_s=args.confirm_poll,
            model_gpus=args.model_gpus or args.hosts * 8,
            crash_loop_limit=None
            if args.crash_loop_limit == "auto"
            else int(args.crash_loop_limit),
            progress=True,
        )
    finally:
        await env.shutdown()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 7-day trace instead of 54")
    parser.add_argument("--days", type=float, default=None)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--hosts", type=int, default=HOSTS, help="the job's hosts (8 GPUs each)")
    parser.add_argument("--buildings", type=int, default=BUILDINGS)
    parser.add_argument(
        "--model-gpus",
        type=int,
        default=None,
        help="GPUs whose failures the trace draws (default: the job's; Llama 3 per GPU-day)",
    )
    parser.add_argument("--spares", type=int, default=SPARES, help="spare hosts per building")
    parser.add_argument(
        "--ckpt-write", type=float, default=CKPT_WRITE_S, help="checkpoint write w, s"
    )
    parser.add_argument("--interval", type=int, default=1800, help="checkpoint interval Δt, s")
    parser.add_argument("--poll", type=float, default=BENCH_POLL_S, help="watch poll, s")
    parser.add_argument(
        "--confirm-poll", type=float, default=BENCH_CONFIRM_POLL_S, help="restart poll, s"
    )
    parser.add_argument(
        "--crash-loop-limit",
        default=str(DEFAULT_CRASH_LOOP_LIMIT),
        help="recoveries without progress before the supervisor halts, or 'auto': sized "
        "to the trace's failure rate (crash_loop_limit_for)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.crash_loop_limit != "auto" and not args.crash_loop_limit.isdigit():
        parser.error("--crash-loop-limit: a positive whole number or 'auto'")
    if args.days is None:
        args.days = 7.0 if args.quick else DAYS
    run = asyncio.run(_main(args))
    run["quick"] = args.quick
    runs = _earlier_runs(args.out)
    runs[run_key(run)] = run
    ordered = {k: runs[k] for k in sorted(runs, key=lambda k: (int(k.split("@")[0]), k))}
    result = {
        "benchmark": "training_trace",
        "tolerance": TOLERANCE,
        "python": platform.python_version(),
        "runs": ordered,
        "summary": dump([c for r in ordered.values() for c in summary(r)]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps(run, indent=2))
    print(f"wrote {args.out}")
    return result


def run_key(run: dict[str, Any]) -> str:
    """``hosts``, or ``hosts@gpus`` when the trace's failures are not the job's own size's."""
    key = str(run["hosts"])
    if run["gpus_modelled"] != run["gpus"]:
        key += f"@{run['gpus_modelled']}"
    if run["interval_s"] != 1800:
        key += f"@{run['interval_s']:g}s"
    if run.get("crash_loop_limit", DEFAULT_CRASH_LOOP_LIMIT) != DEFAULT_CRASH_LOOP_LIMIT:
        key += f"@limit{run['crash_loop_limit']}"
    return key


def _earlier_runs(path: Path) -> dict[str, Any]:
    """The other job sizes' runs already in the results file (kept beside this one)."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    runs = earlier.get("runs")
    return dict(runs) if isinstance(runs, dict) else {}


if __name__ == "__main__":
    main()
