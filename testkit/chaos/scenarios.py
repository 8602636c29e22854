"""Every workflow type the chaos harness runs, by name (``benchmarks/chaos.py`` runs them all),
and the fault classes around the routing writer (run once each, without worker kills)."""

from __future__ import annotations

from testkit.chaos.fault_scenarios import FleetOutage, LabRestart, WorkerStarvation
from testkit.chaos.harness import Scenario
from testkit.chaos.traffic_scenarios import DrainRestore, LoadTest, RebalanceEpochs
from testkit.chaos.training_scenario import TrainingRecovery

__all__ = ["FAULT_CLASSES", "SCENARIOS"]

SCENARIOS: dict[str, type[Scenario]] = {
    s.name: s for s in (DrainRestore, RebalanceEpochs, LoadTest, TrainingRecovery)
}

FAULT_CLASSES: dict[str, type[Scenario]] = {
    s.name: s for s in (FleetOutage, LabRestart, WorkerStarvation)
}
