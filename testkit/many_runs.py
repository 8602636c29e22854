"""Many runs at once on one lab: drills, load tests and the rebalancer, and what must hold.

Shared by ``benchmarks/many_runs.py`` (50 regions, 1,000 PoPs) and its server-tier test
(a small lab): how each run is started (as a user starts it: ``orchestrator runbook run
runbooks/region-drill.yaml --mode drill``, ``orchestrator loadtest run``, ``orchestrator
rebalance start``), and the invariants read back from the lab's audit log and the
rebalancer's histories:

- routing has one writer: every routing write in the audit log carries the rebalancer's
  idempotency key (the key starts with the writer's workflow id);
- no routing write lost or applied twice: each write's If-Match is the version the one
  before it produced (none applied over a table it did not read), every version follows
  the last by one, no key appears twice, and every publish the rebalancer's histories
  record as done is in the log with the version it was told;
- never all regions drained: replaying the writes, at every routing version some region
  still carries traffic, and the most regions at a zero share at once is counted.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from orchestrator.contracts.load_test import LoadTestInput, LoadTestResult, PolicyChoice
from orchestrator.contracts.rebalancer import REBALANCER_ID, RebalancerInput, RebalancerStatus
from orchestrator.contracts.runbook import RUNBOOK_WORKFLOW, RunbookRunInput
from orchestrator.models import AuditEntry, Topology
from orchestrator.runbook import load_runbook, nested_runbooks
from orchestrator.temporal import REGION, RUN_KIND, RUNBOOK

__all__ = [
    "DRILL_RUNBOOK",
    "Pace",
    "RoutingCheck",
    "check_routing",
    "drill_input",
    "published_writes",
    "start_drill",
    "start_load_test",
    "start_rebalancer",
]

DRILL_RUNBOOK = Path(__file__).resolve().parents[1] / "runbooks" / "region-drill.yaml"
#: a region's share of all demand at or under this is drained
DRAINED_SHARE = 1e-9


@dataclass(frozen=True)
class Pace:
    """How fast the runs go: the model lab answers at once, so waits can be short."""

    #: the drill's step_wait and hold parameters (runbook durations)
    step_wait: str = "2s"
    hold: str = "10s"
    #: the rebalancer's epoch and health window (an override wakes it at once)
    epoch_s: float = 5.0
    window_s: float = 2.0
    #: a load test's settle time, window and step limit
    settle_s: float = 1.0
    test_window_s: float = 2.0
    max_steps: int = 6


def drill_input(region: str, pace: Pace) -> RunbookRunInput:
    """What ``orchestrator runbook run runbooks/region-drill.yaml --mode drill`` starts."""
    params = {"region": region, "step_wait": pace.step_wait, "hold": pace.hold}
    runbook = load_runbook(DRILL_RUNBOOK, params)
    return RunbookRunInput(
        runbook=runbook,
        parameters=params,
        mode="drill",
        requested_by="many-runs",
        nested=nested_runbooks(runbook, DRILL_RUNBOOK.parent),
    )


async def start_rebalancer(client: Client, queue: str, pace: Pace) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        "TrafficRebalanceWorkflow",
        RebalancerInput(epoch_s=pace.epoch_s, window_s=pace.window_s),
        id=REBALANCER_ID,
        task_queue=queue,
    )


async def rebalancer_status(handle: WorkflowHandle[Any, Any]) -> RebalancerStatus:
    status: RebalancerStatus = await handle.query("status", result_type=RebalancerStatus)
    return status


async def start_drill(
    client: Client, queue: str, region: str, pace: Pace
) -> WorkflowHandle[Any, Any]:
    inp = drill_input(region, pace)
    return await client.start_workflow(
        RUNBOOK_WORKFLOW,
        inp,
        id=f"region-drill-{region}-{uuid.uuid4().hex[:6]}",
        task_queue=queue,
        # as the CLI sets them at start, so visibility finds the run at once
        search_attributes=_attributes(inp, region),
    )


def _attributes(inp: RunbookRunInput, region: str) -> Any:
    from temporalio.common import SearchAttributePair, TypedSearchAttributes

    return TypedSearchAttributes(
        [
            SearchAttributePair(RUNBOOK, inp.runbook.name),
            SearchAttributePair(RUN_KIND, inp.runbook.kind.value),
            SearchAttributePair(REGION, region),
        ]
    )


async def start_load_test(
    client: Client, queue: str, region: str, pace: Pace
) -> WorkflowHandle[Any, Any]:
    """What ``orchestrator loadtest run REGION`` starts (web pool, adaptive policy)."""
    inp = LoadTestInput(
        region=region,
        window_s=pace.test_window_s,
        settle_s=pace.settle_s,
        max_steps=pace.max_steps,
        policy=PolicyChoice(),
        reason="many-runs",
    )
    return await client.start_workflow(
        "LiveLoadTestWorkflow",
        inp,
        id=f"loadtest-{region}-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=LoadTestResult,
    )


async def published_writes(
    client: Client, task_queue: str, workflow_id: str = REBALANCER_ID
) -> dict[str, int]:
    """Idempotency key -> version, for every publish the rebalancer's runs on ``task_queue``
    record as done (every run of it: continue-as-new starts new ones; other deployments'
    rebalancers on the same server have other queues)."""
    done: dict[str, int] = {}
    query = f"WorkflowId = '{workflow_id}' AND TaskQueue = '{task_queue}'"
    async for execution in client.list_workflows(query):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        keys: dict[int, str] = {}
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == "publish_routing":
                    sent = json.loads(attrs.input.payloads[0].data)
                    keys[event.event_id] = sent["idempotency_key"]
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                attrs = event.activity_task_completed_event_attributes
                key = keys.get(attrs.scheduled_event_id)
                if key is not None:
                    answer = json.loads(attrs.result.payloads[0].data)
                    if not answer.get("conflict") and answer.get("version") is not None:
                        done[key] = int(answer["version"])
    return done


@dataclass
class RoutingCheck:
    """What the audit log says about routing writes while the runs ran."""

    writes: int = 0
    #: workflow id (the key's first part) -> routing writes
    writers: dict[str, int] = field(default_factory=dict)
    #: writes whose If-Match was not the version the previous write produced
    stale_writes: list[int] = field(default_factory=list)
    #: versions that did not follow the previous one by exactly one
    version_gaps: list[int] = field(default_factory=list)
    duplicate_keys: list[str] = field(default_factory=list)
    #: publishes the rebalancer recorded as done, missing from the log or at another version
    lost: list[str] = field(default_factory=list)
    #: the most regions at a zero share of demand at once, and at which version
    max_drained: int = 0
    max_drained_version: int | None = None
    #: routing versions at which every region was at zero (must be none)
    all_drained_versions: list[int] = field(default_factory=list)
    regions: int = 0

    @property
    def single_writer(self) -> bool:
        return len(self.writers) <= 1

    @property
    def holds(self) -> bool:
        return (
            self.single_writer
            and not self.stale_writes
            and not self.version_gaps
            and not self.duplicate_keys
            and not self.lost
            and not self.all_drained_versions
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "routing_writes": self.writes,
            "writers": self.writers,
            "single_writer": self.single_writer,
            "writes_over_a_stale_version": self.stale_writes,
            "version_gaps": self.version_gaps,
            "keys_applied_twice": self.duplicate_keys,
            "published_but_lost": self.lost,
            "max_regions_drained_at_once": self.max_drained,
            "max_drained_at_version": self.max_drained_version,
            "versions_with_every_region_drained": self.all_drained_versions,
            "regions": self.regions,
            "holds": self.holds,
        }


def check_routing(
    entries: list[AuditEntry],
    topology: Topology,
    start_version: int,
    published: dict[str, int],
) -> RoutingCheck:
    """Replay the routing writes of ``entries`` (the audit log since ``start_version``)."""
    weights = {p.name: p.demand_weight for p in topology.pops}
    total = sum(weights.values()) or 1.0
    regions = [r.name for r in topology.regions]
    out = RoutingCheck(regions=len(regions))
    routing = sorted((e for e in entries if e.kind == "routing"), key=lambda e: e.seq)
    version = start_version
    keys: Counter[str] = Counter()
    applied: dict[str, int] = {}
    writers: Counter[str] = Counter()
    for entry in routing:
        out.writes += 1
        keys[entry.idempotency_key] += 1
        writers[entry.idempotency_key.split("/")[0]] += 1
        new = int(entry.response["version"])
        applied[entry.idempotency_key] = new
        if int(entry.request["if_match"]) != version:
            out.stale_writes.append(new)
        if new != version + 1:
            out.version_gaps.append(new)
        version = new
        share = dict.fromkeys(regions, 0.0)
        for pop, split in entry.request["fractions"].items():
            for region, fraction in split.items():
                share[region] += weights.get(pop, 0.0) * float(fraction) / total
        drained = sum(1 for s in share.values() if s <= DRAINED_SHARE)
        if drained > out.max_drained:
            out.max_drained, out.max_drained_version = drained, new
        if drained == len(regions):
            out.all_drained_versions.append(new)
    out.writers = dict(writers)
    out.duplicate_keys = sorted(k for k, n in keys.items() if n > 1)
    out.lost = sorted(k for k, v in published.items() if applied.get(k) != v)
    return out
