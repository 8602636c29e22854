"""Bad-input campaign: >= 1,000 generated bad inputs per boundary; count crashes and unclean errors.

Boundaries, each driven in-process through its real code (``tests/fuzz/probes.py``):
runbook YAML (lint, load, ``runbook lint``), Alertmanager webhooks and manual runs
(the trigger app over the in-memory starter), solver instances (validation, solve,
``rebalance solve --input``), CLI arguments (the Typer app), fleet-API bodies (the
lab app in model mode, state and audit compared before and after each refusal).

Then, against a real Temporal dev server: every workflow type started with each
bad input of ``tests/fuzz/campaign.TARGETED`` (must fail fast with a named
non-retryable error, the worker must survive and complete a valid run after),
and a sample of the webhook campaign over the real Temporal starter (the dev
server must hold exactly the runs the answers reported).

Target: zero crashes, zero unclean errors. Baseline: the same probes on the
valid seed inputs (all must be accepted), so a probe that refuses everything
would show. Results go into the ``bad_input`` section of
``benchmarks/results/chaos.json`` (other sections are kept).

    python benchmarks/fuzz.py [--quick] [--examples N] [--seed S] [--jobs J] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.client import WorkflowFailureError  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from orchestrator import registry  # noqa: E402
from orchestrator.config import Settings  # noqa: E402
from orchestrator.exceptions import NON_RETRYABLE_ERROR_TYPES  # noqa: E402
from orchestrator.fleet.http import HttpFleet  # noqa: E402
from orchestrator.lab.server import LabThread, build_app  # noqa: E402
from orchestrator.triggers.starter import TemporalRunStarter  # noqa: E402
from testkit.fuzz.campaign import (  # noqa: E402
    BOUNDARIES,
    JUNK,
    TARGETED,
    run,
    sample,
    trigger_requests,
)
from testkit.fuzz.probes import RunbookProbe, SolverProbe, valid_instances, valid_runbooks  # noqa: E402
from testkit.fuzz.probes_http import (  # noqa: E402
    VALID_ALERTS,
    VALID_MANUAL,
    LabProbe,
    TriggerProbe,
    auth_headers,
    body_bytes,
)
from testkit.lab import lab_config  # noqa: E402
from testkit.temporal import new_worker, start_dev_server, terminate_if_running  # noqa: E402
from testkit.trigger_payloads import runbook  # noqa: E402
from testkit.triggers import asgi_client, make_app  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "chaos.json"
SECTION = "bad_input"


def baseline() -> dict[str, Any]:
    """The probes on valid inputs: each must be accepted (else the probe judges wrongly)."""
    import yaml

    verdicts: dict[str, list[str]] = {}
    probe: Any = RunbookProbe()
    verdicts["runbook_yaml"] = [
        probe(yaml.safe_dump(d, sort_keys=False)).kind for d in valid_runbooks()
    ]
    probe.close()
    probe = TriggerProbe()
    verdicts["webhook_payloads"] = [
        probe("/v1/alerts/alertmanager", "bearer", b).kind for b in VALID_ALERTS
    ] + [probe("/v1/runbooks/drain/runs", "hmac", b).kind for b in VALID_MANUAL]
    probe.close()
    probe = SolverProbe()
    verdicts["solver_instances"] = [probe(d).kind for d in valid_instances()]
    probe.close()
    probe = LabProbe()
    verdicts["fleet_api_bodies"] = [probe(m, p, b).kind for m, p, b in probe.valid_bodies()]
    probe.close()
    return {
        name: {"valid_inputs": len(kinds), "accepted": kinds.count("accepted")}
        for name, kinds in verdicts.items()
    }


async def over_temporal(webhook_requests: int, seed: int) -> dict[str, Any]:
    env = await start_dev_server()
    try:
        with LabThread(build_app(lab_config(), mode="model")) as lab:
            fleet = HttpFleet(lab.url)
            queue = f"fuzz-{uuid.uuid4().hex[:8]}"
            settings = Settings(task_queue=queue, fleet_url=lab.url, state_dir=Path("/tmp"))
            ctx = registry.ActivityContext(settings=settings, fleet=fleet, client=env.client)
            async with new_worker(env.client, registry.activities(ctx), task_queue=queue):
                workflows = await _workflow_inputs(env, queue)
            await fleet.aclose()
        webhooks = await _webhooks(env, webhook_requests, seed)
    finally:
        await env.shutdown()
    return {"workflow_inputs": workflows, "webhooks_over_temporal": webhooks}


async def _workflow_inputs(env: WorkflowEnvironment, queue: str) -> dict[str, Any]:
    counts = {"inputs": 0, "rejected_cleanly": 0, "crashes": 0, "unclean_errors": 0}
    failures: list[str] = []
    slowest = 0.0
    for workflow, targeted in TARGETED.items():
        for arg in [*JUNK, *targeted]:
            counts["inputs"] += 1
            started = time.monotonic()
            handle = await env.client.start_workflow(
                workflow, arg, id=f"fuzz-{uuid.uuid4().hex[:10]}", task_queue=queue
            )
            kind, detail = "rejected_cleanly", ""
            try:
                await asyncio.wait_for(handle.result(), timeout=30)
                kind, detail = "unclean_errors", "completed"
            except WorkflowFailureError as exc:
                cause = exc.cause
                if not isinstance(cause, ApplicationError):
                    kind, detail = "unclean_errors", repr(cause)
                elif not cause.non_retryable or cause.type not in NON_RETRYABLE_ERROR_TYPES:
                    kind, detail = (
                        "unclean_errors",
                        f"{cause.type} retryable={not cause.non_retryable}",
                    )
            except TimeoutError:
                kind, detail = "crashes", "hung: still running after 30 s"
            slowest = max(slowest, time.monotonic() - started)
            await terminate_if_running(handle, "fuzz benchmark")
            counts[kind] += 1
            if detail and len(failures) < 5:
                failures.append(f"{workflow} {arg!r}: {detail}")
    snapshot = await env.client.execute_workflow(
        "FleetSnapshotWorkflow", {}, id=f"fuzz-ok-{uuid.uuid4().hex[:8]}", task_queue=queue
    )
    return {
        **counts,
        "workflow_types": len(TARGETED),
        "slowest_failure_s": round(slowest, 2),
        "valid_run_completed_after": bool(snapshot),
        "first_failures": failures,
    }


async def _webhooks(env: WorkflowEnvironment, n: int, seed: int) -> dict[str, Any]:
    name = f"fuzz-drain-{uuid.uuid4().hex[:8]}"
    starter = TemporalRunStarter(env.client, f"fuzz-{uuid.uuid4().hex[:8]}")
    reported, five_xx, statuses = 0, 0, {}
    async with asgi_client(make_app([runbook(name)], starter)) as http:
        for path, auth, body in sample(trigger_requests(), n, seed=seed):
            raw = body_bytes(body)
            path = path.replace("/runbooks/drain/", f"/runbooks/{name}/")
            headers = {"Content-Type": "application/json", **auth_headers(auth, raw)}
            response = await http.post(path, content=raw, headers=headers)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            five_xx += response.status_code >= 500
            if response.status_code in (200, 201):
                answer = response.json()
                if "results" in answer:
                    reported += sum(r["outcome"] == "started" for r in answer["results"])
                else:
                    reported += bool(answer["started"])
    runs: list[Any] = []
    for _ in range(100):
        runs = [w async for w in env.client.list_workflows(f'Runbook = "{name}"')]
        if len(runs) >= reported:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # a late extra run must have time to show up
    runs = [w async for w in env.client.list_workflows(f'Runbook = "{name}"')]
    return {
        "requests": n,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "five_xx": five_xx,
        "starts_reported": reported,
        "workflows_on_server": len(runs),
        "unreported_workflows": len(runs) - reported,
    }


def one_boundary(name: str, examples: int, seed: int) -> dict[str, Any]:
    return run(BOUNDARIES[name], examples, seed=seed).as_dict()


def claims(
    boundaries: dict[str, Any], crashes: int, unclean: int, base: dict[str, Any], examples: int
) -> list[dict[str, Any]]:
    """The table's claims: every boundary got enough bad inputs, none crashed or was unclean."""
    from benchmarks.summary import Target, claim, dump, flag

    fewest = min(b["bad_inputs"] for b in boundaries.values())
    return dump(
        [
            claim(
                "bad inputs per boundary (fewest)",
                fewest,
                "inputs",
                Target.at_least(examples, f">= {examples}"),
            ),
            claim(
                "crashes (all boundaries and workflow starts)",
                crashes,
                "inputs",
                Target.equal(0, "none"),
            ),
            claim(
                "unclean errors (incl. 5xx, unreported starts)",
                unclean,
                "inputs",
                Target.equal(0, "none"),
            ),
            flag(
                "valid seed inputs all accepted (the probes' baseline)",
                all(v["accepted"] == v["valid_inputs"] for v in base.values()),
            ),
        ]
    )


def main(examples: int, seed: int, webhook_requests: int, jobs: int) -> dict[str, Any]:
    started = time.monotonic()
    boundaries: dict[str, Any] = {}
    # Runbook YAML (parsing dominates) runs beside the others: the wall time is the slowest.
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {name: pool.submit(one_boundary, name, examples, seed) for name in BOUNDARIES}
        for name, future in futures.items():
            b = boundaries[name] = future.result()
            print(
                f"{name}: {b['bad_inputs']} bad of {b['inputs']} inputs, {b['crashes']} crashes, "
                f"{b['unclean_errors']} unclean, {b['wall_s']:.0f}s",
                flush=True,
            )
    temporal = asyncio.run(over_temporal(webhook_requests, seed))
    total_crashes = (
        sum(b["crashes"] for b in boundaries.values()) + temporal["workflow_inputs"]["crashes"]
    )
    total_unclean = (
        sum(b["unclean_errors"] for b in boundaries.values())
        + temporal["workflow_inputs"]["unclean_errors"]
        + temporal["webhooks_over_temporal"]["five_xx"]
        + temporal["webhooks_over_temporal"]["unreported_workflows"]
    )
    base = baseline()
    ok = (
        total_crashes == 0
        and total_unclean == 0
        and all(b["bad_inputs"] >= examples for b in boundaries.values())
        and all(v["accepted"] == v["valid_inputs"] for v in base.values())
        and temporal["workflow_inputs"]["valid_run_completed_after"]
    )
    lines = [
        f"{name}: {b['bad_inputs']} bad of {b['inputs']} generated inputs, {b['crashes']} crashes, "
        f"{b['unclean_errors']} unclean"
        for name, b in boundaries.items()
    ]
    wf = temporal["workflow_inputs"]
    lines.append(
        f"workflow_inputs: {wf['inputs']} bad starts over {wf['workflow_types']} types, "
        f"{wf['crashes']} hung, {wf['unclean_errors']} unclean, slowest failure {wf['slowest_failure_s']}s"
    )
    hooks = temporal["webhooks_over_temporal"]
    lines.append(
        f"webhooks_over_temporal: {hooks['requests']} requests, {hooks['five_xx']} 5xx, "
        f"{hooks['unreported_workflows']} workflows started but not reported"
    )
    return {
        "benchmark": "fuzz",
        "bad_inputs_per_boundary": examples,
        "seed": seed,
        "wall_s": round(time.monotonic() - started, 1),
        "all_clean": ok,
        "crashes": total_crashes,
        "unclean_errors": total_unclean,
        "lines": lines,
        "summary": claims(boundaries, total_crashes, total_unclean, base, examples),
        "boundaries": boundaries,
        **temporal,
        "baseline_valid_inputs": base,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 bad inputs per boundary")
    parser.add_argument("--examples", type=int, default=1000, help="bad inputs per boundary")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="boundaries fuzzed at once")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    examples = 100 if args.quick else args.examples
    result = main(examples, args.seed, 30 if args.quick else 200, args.jobs)
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    report[SECTION] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        json.dumps(
            {k: v for k, v in result.items() if k in ("wall_s", "all_clean", "lines")}, indent=2
        )
    )
    sys.exit(0 if result["all_clean"] else 1)
