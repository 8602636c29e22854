"""What the worker runs. A capability registers here by adding to these two functions;
the worker itself never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client

from orchestrator.config import Settings
from orchestrator.fleet.protocol import Fleet

__all__ = ["ActivityContext", "activities", "workflows"]


@dataclass(frozen=True)
class ActivityContext:
    """Long-lived resources that activity instances share within one worker."""

    settings: Settings
    fleet: Fleet
    client: Client


def workflows() -> list[type]:
    from workflows.drill import DrillWorkflow
    from workflows.fleet_snapshot import FleetSnapshotWorkflow
    from workflows.load_test import LiveLoadTestWorkflow
    from workflows.rebalancer import TrafficRebalanceWorkflow
    from workflows.runbook import RunbookWorkflow
    from workflows.training_recovery import TrainingRecoveryWorkflow
    from workflows.training_supervisor import TrainingJobSupervisorWorkflow

    return [
        FleetSnapshotWorkflow,
        TrafficRebalanceWorkflow,
        RunbookWorkflow,
        LiveLoadTestWorkflow,
        TrainingJobSupervisorWorkflow,
        TrainingRecoveryWorkflow,
        DrillWorkflow,
    ]


def activities(ctx: ActivityContext) -> list[Callable[..., Any]]:
    from orchestrator.activities.drain import DrainActivities
    from orchestrator.activities.drill import DrillActivities
    from orchestrator.activities.fleet_reads import FleetReadActivities
    from orchestrator.activities.load_test import LoadTestActivities
    from orchestrator.activities.overrides import OverrideActivities
    from orchestrator.activities.rebalance import RebalanceActivities
    from orchestrator.activities.rebalancer_recovery import RebalancerRecoveryActivities
    from orchestrator.activities.runbook import RunbookActivities
    from orchestrator.activities.training import TrainingActivities
    from orchestrator.activities.training_moves import TrainingMoveActivities

    reads = FleetReadActivities(ctx.fleet)
    rebalance = RebalanceActivities(ctx.fleet)
    overrides = OverrideActivities(ctx.client)
    recovery = RebalancerRecoveryActivities(ctx.client)
    runbook = RunbookActivities(ctx.fleet, ctx.settings.state_dir)
    load_test = LoadTestActivities(ctx.fleet)
    training = TrainingActivities(ctx.fleet)
    moves = TrainingMoveActivities(ctx.fleet, ctx.client)
    drain = DrainActivities(ctx.fleet, ctx.client)
    drill = DrillActivities(ctx.client)
    return [
        reads.read_topology,
        reads.read_routing,
        reads.read_health,
        rebalance.plan_epoch,
        rebalance.publish,
        recovery.recover,
        overrides.request,
        overrides.release,
        overrides.status,
        overrides.writer,
        runbook.check,
        runbook.read_weight,
        runbook.set_weight,
        runbook.read_primaries,
        runbook.read_jobs,
        runbook.shift_shards,
        runbook.update_jobs,
        runbook.change_config,
        runbook.notify,
        runbook.durations,
        runbook.hold,
        drain.check_capacity,
        drain.drain_record,
        load_test.prepare,
        load_test.observe,
        load_test.check_routing,
        load_test.write_directly,
        training.watch,
        training.stop,
        training.checkpoint_stop,
        training.quarantine,
        training.read,
        training.start,
        training.await_progress,
        training.alert,
        moves.plan,
        moves.move,
        moves.hosts,
        moves.quarantine,
        moves.release,
        drill.blockers,
        drill.history,
    ]
