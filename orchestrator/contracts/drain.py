"""The inputs of a drain's capacity check and of its record read (activities of RunbookWorkflow)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from orchestrator.policy.drain.capacity import DEFAULT_TARGET_UTILIZATION

__all__ = ["DrainCheckInput", "DrainRecordInput"]


class DrainCheckInput(BaseModel):
    region: str = Field(min_length=1)
    #: a building of ``region``: only its share of the region's load moves; empty: all of it
    building: str = ""
    #: the drain asking, left out of the running drains
    workflow_id: str = ""
    target: float = Field(default=DEFAULT_TARGET_UTILIZATION, gt=0, le=1)
    #: only drains on this task queue count (one deployment); empty: every queue
    task_queue: str = ""


class DrainRecordInput(BaseModel):
    region: str = Field(min_length=1)
    #: the drain run to read; empty: the newest finished drain of the region
    workflow_id: str = ""
    task_queue: str = ""
