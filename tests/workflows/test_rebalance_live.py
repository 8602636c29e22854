"""TrafficRebalanceWorkflow against the live lab with Locust traffic whose PoP mix shifts.

The smaller sibling of benchmarks/rebalance_live.py: the lab (its own process,
live physics, nearest-region routing) serves Locust users (``orchestrator lab
traffic``, its own process) whose demand mix moves from one where the nearest
table is balanced to one where Europe is busier; the real workflow on the real
dev server must even utilization out again, without 5xx from its moves.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml
from temporalio.testing import WorkflowEnvironment

from orchestrator.activities.rebalance import RebalanceActivities
from orchestrator.contracts.rebalancer import RebalancerInput, RebalancerStatus
from orchestrator.lab.config import DEFAULT_CONFIG_PATH
from tests.fixtures.lab import LabFactory
from tests.fixtures.temporal import new_worker
from workflows.rebalancer import TrafficRebalanceWorkflow

#: nearest routing is balanced under the first mix (east 4, west 4, Europe 3 against
#: 100:100:75 rps of web); the second makes Europe the busiest region (east 4, west 3, Europe 4)
BEFORE = "nyc=2,chi=2,sfo=3,sea=1,lon=2,fra=1"
AFTER = "nyc=2,chi=2,sfo=2,sea=1,lon=3,fra=1"
SHIFT_AFTER_S = 14.0
EPOCH_S = 5.0


def _start_traffic(lab_url: str) -> subprocess.Popen[bytes]:
    """Locust through the CLI, in its own process: 120 rps of web, the mix shifting once."""
    env = {k: v for k, v in os.environ.items() if k != "ORCHESTRATOR_LAB_TOKEN"}
    return subprocess.Popen(
        [
            *(sys.executable, "-c", "from orchestrator.cli import app; app()"),
            *("lab", "traffic", "--lab", lab_url, "--rps", "120", "--duration", "90"),
            *("--sessions-share", "0", "--pop-weights", BEFORE),
            *("--shift-after", str(SHIFT_AFTER_S), "--shift-weights", AFTER),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _served(truth: dict[str, Any]) -> tuple[int, int]:
    served = truth["edge_requests"]
    total = sum(n for by_status in served.values() for n in by_status.values())
    errors = sum(n for by_status in served.values() for s, n in by_status.items() if s[0] == "5")
    return total, errors


async def _truth(lab_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=lab_url, timeout=10.0) as client:
        return dict((await client.get("/lab/truth")).json())


class TestDemandShiftInTheLiveLab:
    """After the PoP mix shifts, the rebalancer brings the utilization spread under 3% within
    a few epochs, its moves cost at most a trace of 5xx, and no routing write applies twice."""

    async def test_spread_back_under_three_percent(
        self, dev_env: WorkflowEnvironment, start_lab: LabFactory, tmp_path: Path
    ) -> None:
        data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
        data["initial_routing"] = "nearest"
        # Buckets warm within an epoch (the default 5 s would outlast these short epochs, and
        # the rebalancer would chase the cold-start cost of its own last move).
        data["cold"]["warm_after_s"] = 2.0
        config = tmp_path / "lab.yaml"
        config.write_text(yaml.safe_dump(data))
        lab = await start_lab(config, mode="live", faults=True, subprocess=True)
        fleet = lab.fleet(timeout=10.0)
        traffic = _start_traffic(lab.url)
        activities = RebalanceActivities(fleet)
        worker = new_worker(dev_env.client, [activities.plan_epoch, activities.publish])
        try:
            async with worker:
                await asyncio.sleep(6.0)  # every region serves before the first epoch
                handle = await dev_env.client.start_workflow(
                    TrafficRebalanceWorkflow.run,
                    RebalancerInput(epoch_s=EPOCH_S, window_s=EPOCH_S),
                    id=f"rebalancer-live-{uuid.uuid4().hex[:8]}",
                    task_queue=worker.task_queue,
                )
                await asyncio.sleep(SHIFT_AFTER_S - 6.0 + 1.0)
                first_after: int | None = None
                at_first_move = (0, 0)
                settled: int | None = None
                peak = 0.0
                for _ in range(int(60 / EPOCH_S)):
                    await asyncio.sleep(EPOCH_S)
                    status: RebalancerStatus = await handle.query(TrafficRebalanceWorkflow.status)
                    read = [e for e in status.epochs if e.utilization_spread_before is not None]
                    if first_after is None:
                        # From the next epoch on the readings see the new mix; 5xx count
                        # from here, as the shift itself (every user changing PoP in one
                        # second) is not the rebalancer's doing.
                        first_after = status.epoch + 1
                        at_first_move = _served(await _truth(lab.url))
                        continue
                    recent = [e for e in read if e.epoch > first_after]
                    peak = max([peak, *(e.utilization_spread_before or 0.0 for e in recent)])
                    under = [e for e in recent if (e.utilization_spread_before or 1.0) < 0.03]
                    if under and peak > 0.08:
                        settled = under[0].epoch
                        break
                after = _served(await _truth(lab.url))
                audit = await fleet.audit()
                await handle.terminate("test over")
        finally:
            traffic.terminate()
            traffic.wait(10)
        assert peak > 0.08, "the shift in the demand mix did not unbalance the regions"
        assert settled is not None and first_after is not None, "spread never fell under 3%"
        assert settled - first_after <= 10, f"spread under 3% only at epoch {settled}"
        answers, errors = after[0] - at_first_move[0], after[1] - at_first_move[1]
        assert answers > 1000
        # Exact counts from the lab's served requests. On a quiet machine the moves cost none
        # (benchmarks/rebalance_live.py reports the counts); a CPU-starved lab can drop a
        # few cold-bucket requests, so the test holds the moves to a trace, not to zero.
        assert errors <= 0.005 * answers, f"{errors} 5xx in {answers} answers while moving"
        keys = [a.idempotency_key for a in audit if a.kind == "routing"]
        assert keys and len(keys) == len(set(keys)), "a routing write was applied twice"
