"""The executor's table of template steps matches the template registry: a template added
to the registry without a step (or a step left for a template that is gone) fails here,
not in a run's task."""

from __future__ import annotations

from orchestrator.runbook.templates import REGISTRY
from workflows.runbook_executor import TemplateExecutor
from workflows.runbook_steps import StepContext


def test_every_registered_template_has_a_step_and_no_other() -> None:
    executor = TemplateExecutor(StepContext("wf/run", lambda _task: None))
    assert set(executor.steps) == {t.name for t in REGISTRY}
    assert all(callable(step) for step in executor.steps.values())
