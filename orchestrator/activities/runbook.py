"""What runbook tasks do to the world. Each mutation carries the key the workflow
derives from (run, task, step), so a retried or replayed step applies once.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field
from temporalio import activity

from orchestrator.activities.errors import reported
from orchestrator.exceptions import FleetNotFound, InvalidInstance, UnsafeRequest
from orchestrator.fleet.protocol import Fleet
from orchestrator.models import (
    BatchJobAction,
    ConfigChange,
    RegionStatus,
    ServiceWeightChange,
    ShardMove,
)
from orchestrator.runbook.predicates import (
    Predicate,
    PredicateResult,
    RegionReading,
    evaluate_all,
)

__all__ = [
    "CheckInput",
    "CheckResult",
    "ConfigInput",
    "DurationsInput",
    "HoldInput",
    "JobsInput",
    "NotifyInput",
    "RunbookActivities",
    "ShardStepInput",
    "WeightInput",
]


class CheckInput(BaseModel):
    predicates: list[Predicate]
    window_s: float | None = None


class CheckResult(BaseModel):
    ok: bool
    results: list[PredicateResult] = Field(default_factory=list)
    #: the p99 and error rate of every region the predicates selected, read in the same
    #: window: a task's gate chart draws them even when a gate watches only one metric
    regions: dict[str, RegionReading] = Field(default_factory=dict)

    @property
    def message(self) -> str:
        failed = [r.message for r in self.results if not r.ok]
        return "; ".join(failed) if failed else "all hold"


class WeightInput(BaseModel):
    change: ServiceWeightChange
    key: str


class ShardStepInput(BaseModel):
    service: str
    region: str
    direction: str  # out | in
    peers: list[str] = Field(default_factory=list)
    #: cumulative share of the region's primaries to have moved after this step
    target_ratio: float
    #: shards this task moved so far (the restore moves exactly these back)
    moved: list[str] = Field(default_factory=list)
    #: "out": the shards to have moved after this step, chosen by the workflow
    #: (None: from the topology read by this attempt)
    shards: list[str] | None = None
    key: str = ""


class JobsInput(BaseModel):
    operation: str  # start | stop
    jobs: list[str] = Field(default_factory=list)
    region: str | None = None
    key: str = ""


class NotifyInput(BaseModel):
    url: str
    message: str
    key: str


class ConfigInput(BaseModel):
    change: ConfigChange
    key: str


class HoldInput(BaseModel):
    seconds: float = Field(ge=0)


class DurationsInput(BaseModel):
    runbook: str
    #: task id -> seconds, to record; empty to only read
    record: dict[str, float] = Field(default_factory=dict)


class RunbookActivities:
    def __init__(self, fleet: Fleet, state_dir: Path) -> None:
        self._fleet = fleet
        self._state_dir = state_dir

    @activity.defn(name="check_predicates")
    @reported
    async def check(self, inp: CheckInput) -> CheckResult:
        if not inp.predicates:
            return CheckResult(ok=True)
        topology = await self._fleet.topology()
        health = await self._fleet.health(inp.window_s)
        buildings = {b.name: b.region for b in topology.buildings}
        try:
            results = evaluate_all(inp.predicates, health, topology.region_names, buildings)
        except ValueError as exc:
            raise InvalidInstance(str(exc)) from None
        selected = sorted({o.region for r in results for o in r.observations})
        return CheckResult(
            ok=all(r.ok for r in results),
            results=results,
            regions={name: RegionReading.of(health.region(name)) for name in selected},
        )

    @activity.defn(name="read_service_weight")
    @reported
    async def read_weight(self, change: ServiceWeightChange) -> float:
        topology = await self._fleet.topology()
        return topology.service_weights.get(f"{change.region}/{change.service}", 1.0)

    @activity.defn(name="set_service_weight")
    @reported
    async def set_weight(self, inp: WeightInput) -> None:
        await self._fleet.set_service_weight(inp.change, idempotency_key=inp.key)

    @activity.defn(name="read_primaries")
    @reported
    async def read_primaries(self, inp: ShardStepInput) -> list[str]:
        """The ``inp.service`` shards whose primary is in ``inp.region``, sorted."""
        topology = await self._fleet.topology()
        return sorted(
            s.id for s in topology.shards if s.service == inp.service and s.primary == inp.region
        )

    @activity.defn(name="read_batch_jobs")
    @reported
    async def read_jobs(self, inp: JobsInput) -> list[str]:
        """The jobs in ``inp.region`` that ``inp.operation`` would act on."""
        topology = await self._fleet.topology()
        running = inp.operation == "stop"
        return [
            j.name for j in topology.batch_jobs if j.region == inp.region and j.running == running
        ]

    @activity.defn(name="shift_shards")
    @reported
    async def shift_shards(self, inp: ShardStepInput) -> list[str]:
        """Move primaries until ``target_ratio`` of the task's shards moved; return all moved."""
        topology = await self._fleet.topology()
        active = [
            r.name
            for r in topology.regions
            if r.status is RegionStatus.ACTIVE and r.name != inp.region
        ]
        peers = inp.peers or active
        if inp.direction == "out":
            if inp.shards is not None:
                # The workflow chose them from a read taken before any move: a retry
                # after a partial move sends the very same moves under the same keys.
                todo = [s for s in inp.shards if s not in inp.moved]
            else:
                candidates = [s for s in topology.shards if s.service == inp.service]
                owned = sorted(s.id for s in candidates if s.primary == inp.region)
                total = len(owned) + len(inp.moved)
                want = math.ceil(inp.target_ratio * total - 1e-9)
                todo = owned[: max(0, want - len(inp.moved))]
            if not peers and todo:
                raise UnsafeRequest(f"no region to take {inp.service} primaries from {inp.region}")
            by_peer: dict[str, list[str]] = {}
            for i, shard in enumerate(todo):
                by_peer.setdefault(peers[i % len(peers)], []).append(shard)
            for n, (peer, shards) in enumerate(sorted(by_peer.items())):
                await self._fleet.move_shards(
                    ShardMove(shards=shards, to_region=peer), idempotency_key=f"{inp.key}/{n}"
                )
            return [*inp.moved, *todo]
        # "in": bring back exactly what was moved out, in proportion to the step; the ones
        # an earlier step (or an earlier attempt of this one) brought back stay put.
        want = math.ceil(inp.target_ratio * len(inp.moved) - 1e-9)
        here = {s.id for s in topology.shards if s.primary == inp.region}
        back = [s for s in inp.moved[:want] if s not in here]
        if back:
            await self._fleet.move_shards(
                ShardMove(shards=back, to_region=inp.region), idempotency_key=inp.key
            )
        return inp.moved[want:]

    @activity.defn(name="update_batch_jobs")
    @reported
    async def update_jobs(self, inp: JobsInput) -> list[str]:
        """Start or stop jobs; returns the jobs it acted on (the restore flips exactly these)."""
        jobs = list(inp.jobs)
        if not jobs and inp.region is not None:
            topology = await self._fleet.topology()
            running = inp.operation == "stop"
            jobs = [
                j.name
                for j in topology.batch_jobs
                if j.region == inp.region and j.running == running
            ]
        for job in jobs:
            action = BatchJobAction(job=job, action="stop" if inp.operation == "stop" else "start")
            try:
                await self._fleet.batch_job(action, idempotency_key=f"{inp.key}/{job}")
            except FleetNotFound:
                activity.logger.warning("batch job %s not found", job)
        return jobs

    @activity.defn(name="change_config")
    @reported
    async def change_config(self, inp: ConfigInput) -> None:
        await self._fleet.change_config(inp.change, idempotency_key=inp.key)

    @activity.defn(name="notify_webhook")
    @reported
    async def notify(self, inp: NotifyInput) -> None:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.post(
                inp.url,
                json={"text": inp.message, "key": inp.key},
                headers={"Idempotency-Key": inp.key},
            )
            response.raise_for_status()

    @activity.defn(name="hold")
    @reported
    async def hold(self, inp: HoldInput) -> None:
        """Take ``inp.seconds`` (a ``delay`` task standing in for work)."""
        await asyncio.sleep(inp.seconds)

    @activity.defn(name="task_durations")
    async def durations(self, inp: DurationsInput) -> dict[str, list[float]]:
        """Earlier durations of each task of a runbook (for stuck detection); records new ones."""
        path = self._state_dir / "durations" / f"{inp.runbook}.json"
        known: dict[str, Any] = {}
        if path.is_file():
            try:
                known = json.loads(path.read_text())
            except ValueError:
                known = {}
        if inp.record:
            for task, seconds in inp.record.items():
                known.setdefault(task, []).append(seconds)
                known[task] = known[task][-50:]
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=1))
            tmp.replace(path)
        return {k: [float(x) for x in v] for k, v in known.items()}
