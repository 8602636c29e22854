"""The end-to-end report tests reuse the runbook tests' rig: a worker on a model lab with room
for a drain, and a converged rebalancer under the id ``rebalancer``."""

from tests.workflows.conftest import stack
from tests.workflows.runbook.conftest import balanced, converged_table, model_lab

__all__ = ["balanced", "converged_table", "model_lab", "stack"]
