"""Workflow fixtures for the input tests: every workflow on a model lab (``stack``), and the
trigger tests' Temporal stack (a roomy lab, so drains pass their capacity check)."""

from tests.triggers.conftest import temporal_stack
from tests.workflows.conftest import model_lab, stack

__all__ = ["model_lab", "stack", "temporal_stack"]
