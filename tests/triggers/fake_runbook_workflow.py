"""A stand-in RunbookWorkflow for the trigger tests, registered under RUNBOOK_WORKFLOW.

It only waits: for the ``alert_resolved`` signal (then it completes), a ``finish``
signal, or ten minutes. The ``signals`` and ``started_with`` queries show what it
was told. Swap in the real workflow once it is registered by ``orchestrator.registry``.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from orchestrator.contracts.runbook import (
        RUNBOOK_WORKFLOW,
        AlertResolvedInput,
        RunbookRunInput,
    )


@workflow.defn(name=RUNBOOK_WORKFLOW)
class FakeRunbookWorkflow:
    def __init__(self) -> None:
        self._resolved: list[AlertResolvedInput] = []
        self._finish = False
        self._input: RunbookRunInput | None = None

    @workflow.run
    async def run(self, run: RunbookRunInput) -> list[AlertResolvedInput]:
        self._input = run
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                lambda: bool(self._resolved) or self._finish, timeout=timedelta(minutes=10)
            )
        return self._resolved

    @workflow.signal(name="alert_resolved")
    def alert_resolved(self, signal: AlertResolvedInput) -> None:
        self._resolved.append(signal)

    @workflow.signal
    def finish(self) -> None:
        self._finish = True

    @workflow.query
    def signals(self) -> list[AlertResolvedInput]:
        return self._resolved

    @workflow.query
    def started_with(self) -> RunbookRunInput | None:
        return self._input
