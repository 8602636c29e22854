"""Workers for a test or a benchmark run: the project's workflows on a fresh task queue."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from orchestrator import registry
from orchestrator.worker import HEARTBEAT_THROTTLE, sandbox_runner

__all__ = ["new_worker"]


def new_worker(
    client: Client,
    activities: Sequence[Callable[..., Any]],
    workflows: Sequence[type] | None = None,
    task_queue: str | None = None,
) -> Worker:
    return Worker(
        client,
        task_queue=task_queue or f"test-{uuid.uuid4().hex[:12]}",
        workflows=list(workflows if workflows is not None else registry.workflows()),
        activities=list(activities),
        workflow_runner=sandbox_runner(),
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )
