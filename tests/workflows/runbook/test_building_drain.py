"""``traffic_shift`` by building moves that building's share of its region's traffic, gated
like a region shift, and its restore (a separate restore run, reading the drain's record)
puts the routing table back exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError

from orchestrator.clients.runbook_runs import runbook_result
from orchestrator.contracts.runbook import RunbookReport
from orchestrator.contracts.runbook_undo import TrafficRelease
from orchestrator.models import RoutingTable
from tests.workflows.conftest import Stack
from tests.workflows.runbook.conftest import close, runbook, start
from tests.workflows.runbook.test_drain import cli
from tests.workflows.runbook.test_restore import visible

DRAIN = """
name: building-drain
kind: drain
parameters:
  building: {type: building}
tasks:
  - id: shift-traffic
    template: traffic_shift
    args: {building: "${params.building}", ratio: 0}
    steps: "2 x 50%"
    gates: ["error_rate in others-of(region-of(${params.building})) <= 0.05"]
    restore: traffic-back
"""

RESTORE = """
name: building-restore
kind: restore
parameters:
  building: {type: building}
tasks:
  - id: traffic-back
    template: traffic_shift
    args: {building: "${params.building}", ratio: 1.0}
    steps: "2 x 50%"
"""


def _share_of(table: RoutingTable, region: str, weights: dict[str, float]) -> float:
    """The region's share of user traffic, from its buckets (each PoP by its demand)."""
    assert table.buckets is not None
    total = sum(weights.values())
    return (
        sum(weights[pop] * row.count(region) / len(row) for pop, row in table.buckets.items())
        / total
    )


class TestBuildingShift:
    """euw-a holds half of eu-west: draining it leaves eu-west half its buckets; the
    restore run finds the drain's record and writes the table it found."""

    async def test_half_the_buckets_move_and_the_restore_puts_the_table_back(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        weights = {p.name: p.demand_weight for p in (await stack.fleet.topology()).pops}
        before = await stack.fleet.routing(include_buckets=True)
        held = _share_of(before, "eu-west", weights)
        assert held > 0
        drain = await start(stack, runbook(DRAIN, building="euw-a"))
        drained: RunbookReport = await runbook_result(drain)
        assert drained.outcome == "completed", drained.events
        assert set(drained.restore_records) == {"traffic-back"}
        record = drained.restore_records["traffic-back"]
        assert isinstance(record, TrafficRelease), record
        assert (record.args.region, record.args.building) == ("eu-west", "euw-a")
        assert record.args.building_share == 0.5
        after = await stack.fleet.routing(include_buckets=True)
        # half of eu-west's buckets (by demand) moved: it keeps 1 - 0.5 x (1 - 0) of them
        assert _share_of(after, "eu-west", weights) == pytest.approx(held / 2, abs=2 / 1024)
        await visible(stack, drain.id)

        restore = await start(stack, runbook(RESTORE, building="euw-a"))
        restored: RunbookReport = await runbook_result(restore)
        assert restored.outcome == "completed", restored.events
        assert any(f"restoring what {drain.id} recorded" in e for e in restored.events)
        back = await stack.fleet.routing(include_buckets=True)
        assert close(back.fractions, balanced)
        assert _share_of(back, "eu-west", weights) == pytest.approx(held, abs=1 / 1024)

    async def test_unknown_building_fails_the_run_naming_the_field(
        self, stack: Stack, balanced: dict[str, dict[str, float]]
    ) -> None:
        run = await start(stack, runbook(DRAIN, building="nowhere"))
        with pytest.raises(WorkflowFailureError) as err:
            await run.result()
        message = str(err.value.cause)
        assert "building: unknown building 'nowhere'" in message
        assert "euw-a" in message  # the known ones are listed


class TestBuildingDryRun:
    """``orchestrator drain REGION --building B --dry-run`` forecasts moving B's share only:
    the region keeps the rest of its load; a building of another region is refused."""

    async def test_forecast_moves_the_share(
        self, stack: Stack, balanced: dict[str, dict[str, float]], tmp_path: Path
    ) -> None:
        path = tmp_path / "building-drain.yaml"
        path.write_text(DRAIN.replace("restore: traffic-back", "restore: auto"))
        args = ("drain", "eu-west", "--building", "euw-a", "--runbook", str(path), "--dry-run")
        code, out, err = await cli(stack, *args, "--json")
        assert code == 0, err
        forecast = json.loads(out)["forecast"]
        euw = next(r for r in forecast["regions"] if r["region"] == "eu-west")
        assert euw["role"] == "draining"
        for service in euw["services"]:
            assert service["load_after_rps"] == pytest.approx(service["load_before_rps"] / 2)
        code, out, err = await cli(stack, "drain", "us-east", *args[2:])
        assert code != 0
        assert "building: euw-a is in eu-west, not us-east" in err
