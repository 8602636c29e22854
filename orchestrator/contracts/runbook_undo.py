"""How to put back what a runbook task changed: one typed record per kind of undo.

A task records its undo as its steps apply (it grows step by step), a rollback reads it
back, and a drain's report keeps it for the restore that follows (``restore_records``,
read back by the restore through ``DrainRecord``). The JSON is ``{"template": ...,
"args": {...}}`` with the field names the untyped records had, so records and histories
written before the types still read, and older workers read these.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from orchestrator.runbook.spec import RunMode

__all__ = [
    "HostsQuarantine",
    "HostsQuarantineArgs",
    "HostsRelease",
    "HostsReleaseArgs",
    "JobUpdate",
    "JobUpdateArgs",
    "RunbookUndo",
    "RunbookUndoArgs",
    "ServiceWeight",
    "ServiceWeightArgs",
    "ShardReturn",
    "ShardReturnArgs",
    "TrafficRelease",
    "TrafficReleaseArgs",
    "Undo",
]


class TrafficReleaseArgs(BaseModel):
    """A traffic shift off ``region``: lift its hold and put back the routing found."""

    region: str
    #: the region's share when the task first ran
    start: float
    #: the share it goes back to (a restore: what the drain found before it)
    normal: float
    #: the region was held by an override already when the task first ran
    held: bool = False
    #: the routing table found before the shift; None in records from before it was kept
    table: dict[str, dict[str, float]] | None = None
    #: a building's shift: the building, and its share of the region's capacity
    building: str | None = None
    building_share: float | None = None


class TrafficRelease(BaseModel):
    template: Literal["traffic_release"] = "traffic_release"
    args: TrafficReleaseArgs


class ServiceWeightArgs(BaseModel):
    """Set ``service``'s weight in ``region`` back to ``weight``."""

    region: str
    service: str
    weight: float


class ServiceWeight(BaseModel):
    template: Literal["service_weight"] = "service_weight"
    args: ServiceWeightArgs


class ShardReturnArgs(BaseModel):
    """Move the ``moved`` primaries of ``service`` back into ``region``."""

    service: str
    region: str
    #: recorded before each move, so a crash mid-step still returns them
    moved: list[str] = Field(default_factory=list)
    #: the primaries the region owned before the first move, in the order they leave;
    #: None in runs that read them inside the mutating activity (before RECORDS_PATCH)
    owned: list[str] | None = None


class ShardReturn(BaseModel):
    template: Literal["shard_return"] = "shard_return"
    args: ShardReturnArgs


class JobUpdateArgs(BaseModel):
    """``operation`` (the opposite of what the task did) on exactly ``jobs``."""

    operation: Literal["start", "stop"]
    jobs: list[str] = Field(default_factory=list)


class JobUpdate(BaseModel):
    template: Literal["job_update"] = "job_update"
    args: JobUpdateArgs


class RunbookUndoArgs(BaseModel):
    """A nested runbook's restore runbook, run as a child with the same parameters."""

    runbook: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    #: None: the mode of the run that undoes it
    mode: RunMode | None = None


class RunbookUndo(BaseModel):
    template: Literal["runbook"] = "runbook"
    args: RunbookUndoArgs


class HostsReleaseArgs(BaseModel):
    """Release exactly these quarantined hosts."""

    hosts: list[str] = Field(default_factory=list)


class HostsRelease(BaseModel):
    template: Literal["hosts_release"] = "hosts_release"
    args: HostsReleaseArgs


class HostsQuarantineArgs(BaseModel):
    """Quarantine exactly these released hosts again."""

    hosts: list[str] = Field(default_factory=list)
    reason: str = ""


class HostsQuarantine(BaseModel):
    template: Literal["hosts_quarantine"] = "hosts_quarantine"
    args: HostsQuarantineArgs


#: any undo record, told apart by its ``template``
Undo = Annotated[
    TrafficRelease
    | ServiceWeight
    | ShardReturn
    | JobUpdate
    | RunbookUndo
    | HostsRelease
    | HostsQuarantine,
    Field(discriminator="template"),
]
