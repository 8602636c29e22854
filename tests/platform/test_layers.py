"""What importing a lower layer costs: contracts and policy load no solver, no YAML, no
Temporal SDK; and the names clients use for workflows are the workflows' own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from temporalio import workflow

from orchestrator.contracts.drill import DRILL_WORKFLOW
from orchestrator.contracts.runbook import RUNBOOK_WORKFLOW
from orchestrator.contracts.training_supervisor import SUPERVISOR_WORKFLOW
from workflows.drill import DrillWorkflow
from workflows.runbook import RunbookWorkflow
from workflows.training_supervisor import TrainingJobSupervisorWorkflow

CONTRACTS = (
    "drain",
    "drill",
    "load_test",
    "rebalancer",
    "runbook",
    "training",
    "training_supervisor",
)


def _loaded_after(imports: list[str], watch: tuple[str, ...]) -> list[str]:
    code = "import json, sys\n" + "".join(f"import {m}\n" for m in imports)
    code += f"print(json.dumps(sorted(m for m in {watch!r} if m in sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.server  # a fresh interpreter: only a subprocess shows what an import pulls in
class TestLowerLayersImportLittle:
    """Importing every contract loads neither scipy (the solver's) nor YAML, Temporal's
    SDK or httpx; the maelstrom planner (which reads runbook specs) loads no YAML loader."""

    def test_contracts(self) -> None:
        modules = [f"orchestrator.contracts.{c}" for c in CONTRACTS]
        assert _loaded_after(modules, ("scipy", "yaml", "temporalio", "httpx")) == []

    def test_maelstrom(self) -> None:
        assert _loaded_after(["orchestrator.policy.drain.maelstrom"], ("yaml", "scipy")) == []


class TestWorkflowNames:
    """Clients start and query workflows by the names in the contracts, never by importing
    the workflow code: those names are the workflows' registered names."""

    @pytest.mark.parametrize(
        ("cls", "name"),
        [
            (TrainingJobSupervisorWorkflow, SUPERVISOR_WORKFLOW),
            (DrillWorkflow, DRILL_WORKFLOW),
            (RunbookWorkflow, RUNBOOK_WORKFLOW),
        ],
    )
    def test_name(self, cls: type, name: str) -> None:
        definition = workflow._Definition.must_from_class(cls)
        assert definition.name == name
