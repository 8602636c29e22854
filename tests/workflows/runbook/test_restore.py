"""A restore run puts back what its drain recorded before changing anything, not the
values written in the restore runbook nor what it finds once the region is drained."""

from __future__ import annotations

import asyncio
from collections import Counter

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import RunbookReport
from orchestrator.models import ServiceWeightChange
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import close, runbook, start

DRAIN = """
name: pair-drain
kind: drain
parameters:
  region: {type: region}
tasks:
  - id: shift-traffic
    template: traffic_shift
    args: {region: "${params.region}", ratio: 0}
    steps: "2 x 50%"
    restore: traffic-back
  - id: sessions-off
    template: service_weight
    depends_on: [shift-traffic]
    args: {region: "${params.region}", service: sessions, weight: 0}
    restore: sessions-on
  - id: move-kv
    template: shard_shift
    depends_on: [shift-traffic]
    args: {service: kv, region: "${params.region}", direction: out}
    steps: "2 x 50%"
    restore: kv-back
  - id: stop-batch
    template: job_update
    depends_on: [move-kv]
    args: {operation: stop, region: "${params.region}"}
    restore: start-batch
"""

# Written the way a restore runbook reads naturally ("weight 1", "start the region's
# jobs"); the drain's records, not these values, decide what comes back.
RESTORE = """
name: pair-restore
kind: restore
parameters:
  region: {type: region}
tasks:
  - id: kv-back
    template: shard_shift
    args: {service: kv, region: "${params.region}", direction: in}
    steps: "2 x 50%"
  - id: start-batch
    template: job_update
    args: {operation: start, region: "${params.region}"}
  - id: sessions-on
    template: service_weight
    depends_on: [kv-back]
    args: {region: "${params.region}", service: sessions, weight: 1.0}
  - id: traffic-back
    template: traffic_shift
    depends_on: [sessions-on]
    args: {region: "${params.region}", ratio: 1.0}
    steps: "2 x 50%"
"""


async def visible(stack: Stack, workflow_id: str) -> None:
    """Until Temporal's visibility lists the run as completed (the restore finds it there)."""
    query = f"WorkflowId = '{workflow_id}' AND ExecutionStatus = 'Completed'"
    for _ in range(100):
        if [e async for e in stack.client.list_workflows(query)]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{workflow_id} never became visible as completed")


class TestRestoreFromDrainRecords:
    """After a drain and the restore found by visibility, the pool weight is the one set
    before the drain (0.7, not the runbook's 1.0), a batch job that was not running stays
    stopped, the kv primaries and the routing table are the originals, nothing applied twice."""

    async def test_restore_puts_back_the_recorded_values(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        await stack.fleet.set_service_weight(
            ServiceWeightChange(region="eu-west", service="sessions", weight=0.7),
            idempotency_key="test/sessions-weight",
        )
        before = await stack.fleet.topology()
        assert [j.name for j in before.batch_jobs if j.region == "eu-west" and not j.running]
        drain = await start(stack, runbook(DRAIN, region="eu-west"))
        drained: RunbookReport = await runbook_result(drain)
        assert drained.outcome == "completed"
        assert set(drained.restore_records) == {
            "traffic-back",
            "sessions-on",
            "kv-back",
            "start-batch",
        }
        await visible(stack, drain.id)

        restore = await start(stack, runbook(RESTORE, region="eu-west"))
        restored: RunbookReport = await runbook_result(restore)
        assert restored.outcome == "completed"
        assert any(f"restoring what {drain.id} recorded" in e for e in restored.events)
        after = await stack.fleet.topology()
        assert after.service_weights.get("eu-west/sessions") == 0.7
        assert sorted((s.id, s.primary) for s in after.shards) == sorted(
            (s.id, s.primary) for s in before.shards
        )
        assert [(j.name, j.running) for j in after.batch_jobs] == [
            (j.name, j.running) for j in before.batch_jobs
        ]
        assert close((await stack.fleet.routing()).fractions, balanced)
        audit = await stack.fleet.audit()
        assert max(Counter(e.idempotency_key for e in audit).values()) == 1
        moves = Counter(
            (shard, e.request["to_region"])
            for e in audit
            if e.kind == "shard-move"
            for shard in e.request["shards"]
        )
        assert moves and max(moves.values()) == 1  # out once, back once

    async def test_nothing_to_restore_from_says_so(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        restore = await start(stack, runbook(RESTORE, region="us-west"))
        report: RunbookReport = await runbook_result(restore)
        assert report.outcome == "completed"
        assert any("no finished drain of us-west left to restore" in e for e in report.events)
