"""A planned move of a training job (issue 25): the ``move_job`` Update and its record.

A runbook (or an operator) asks a job's supervisor, ``training-<job>``, to move the job
off some buildings or hosts. The supervisor, the job's single writer, checkpoints it on
demand, restarts it outside the avoided set from that checkpoint and answers a
:class:`MoveJobResult`. The move is kept in the supervisor's status as a
:class:`MoveRecord`, apart from its failures: a planned move is no failure and does
not lower ETTR the way one does.

The models are lenient on purpose (plain strings and lists): the Update's validator
checks them and names the field, so a bad request is rejected with a clear error
instead of failing to decode inside the worker.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import AwareDatetime, Field

from orchestrator.contracts.host_list import HostList
from orchestrator.models import StrictModel

__all__ = [
    "MOVE_JOB_UPDATE",
    "MoveJobRequest",
    "MoveJobResult",
    "MoveOutcome",
    "MoveRecord",
    "move_request_problem",
]

#: the Update's name on TrainingJobSupervisorWorkflow
MOVE_JOB_UPDATE = "move_job"


class MoveOutcome(StrEnum):
    #: checkpointed on demand and restarted outside the avoided set
    MOVED = "moved"
    #: none of the job's hosts is in the avoided set (or the job is finished): nothing done
    NOT_NEEDED = "not_needed"
    #: no capacity outside the avoided set: the job was left where it runs; ``detail`` says
    #: what is short
    WAITING = "waiting"


class MoveJobRequest(StrictModel):
    avoid_buildings: list[str] = Field(default_factory=list)
    avoid_hosts: list[str] = Field(default_factory=list)
    reason: str = ""
    #: the idempotency key: the same id answers the first move's result, moving nothing
    request_id: str = ""


class MoveJobResult(StrictModel):
    job: str
    outcome: MoveOutcome
    request_id: str
    from_hosts: HostList = Field(default_factory=list)
    to_hosts: HostList = Field(default_factory=list)
    #: the step of the checkpoint written on demand (None when nothing was stopped)
    checkpoint_step: int | None = None
    #: the step the job had reached when it stopped
    stopped_at_step: int | None = None
    #: steps done but not in the checkpoint: 0 for a planned move
    lost_steps: int = Field(default=0, ge=0)
    #: from the request to the job stepping again on its new hosts
    duration_s: float = Field(default=0.0, ge=0)
    detail: str = ""


class MoveRecord(StrictModel):
    """One planned move in the supervisor's status (never counted as a failure)."""

    request_id: str
    reason: str = ""
    avoid_buildings: list[str] = Field(default_factory=list)
    avoid_hosts: HostList = Field(default_factory=list)
    requested_at: AwareDatetime
    finished_at: AwareDatetime | None = None
    result: MoveJobResult


def move_request_problem(req: MoveJobRequest) -> tuple[str, str] | None:
    """(field, reason) when ``req`` cannot be acted on, else None."""
    if not req.request_id.strip():
        return "request_id", "is required: it is the move's idempotency key"
    if not req.avoid_buildings and not req.avoid_hosts:
        return "avoid_buildings", "name a building, or hosts in avoid_hosts, to move off"
    for field, names in (
        ("avoid_buildings", req.avoid_buildings),
        ("avoid_hosts", req.avoid_hosts),
    ):
        if any(not n.strip() for n in names):
            return field, "has an empty name"
        if len(set(names)) != len(names):
            return field, "lists a name twice"
    if not req.reason.strip():
        return "reason", "is required: it is recorded with the move"
    return None
