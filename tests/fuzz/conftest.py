"""The workflow fixtures (a worker with every workflow on a model lab) for the input tests."""

from tests.workflows.conftest import model_lab, stack

__all__ = ["model_lab", "stack"]
