"""Every workflow type the chaos harness runs, by name (``benchmarks/chaos.py`` runs them all)."""

from __future__ import annotations

from testkit.chaos.harness import Scenario
from testkit.chaos.traffic_scenarios import DrainRestore, LoadTest, RebalanceEpochs
from testkit.chaos.training_scenario import TrainingRecovery

__all__ = ["SCENARIOS"]

SCENARIOS: dict[str, type[Scenario]] = {
    s.name: s for s in (DrainRestore, RebalanceEpochs, LoadTest, TrainingRecovery)
}
