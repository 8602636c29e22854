"""Argument models of the training templates (issue 25): move jobs off a building, and
quarantine or release its hosts. Registered in :mod:`.templates`; run by
``workflows/runbook_training.py``.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from orchestrator.models import StrictModel

__all__ = ["HostsQuarantineArgs", "HostsReleaseArgs", "TrainingMoveArgs"]


class _Hosts(StrictModel):
    #: every training host of this building
    building: str | None = Field(default=None, min_length=1)
    #: and/or these hosts
    hosts: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some_hosts(self) -> _Hosts:
        if self.building is None and not self.hosts:
            raise ValueError("hosts: name a building or some hosts")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError("hosts: a host is listed twice")
        return self


class TrainingMoveArgs(_Hosts):
    """Move training jobs off a building or hosts through their supervisors: checkpoint on
    demand, restart outside it, 0 lost steps.

    No undo: a moved job stays on its new hosts (moving it back would cost a restart for
    nothing), so the task needs no restore. Refused (GpuCapacityShort) when some job could
    not keep its size outside, unless ``allow_waiting`` (put an approval before the task).
    """

    #: only these jobs; empty: every job with a host there
    jobs: list[str] = Field(default_factory=list)
    #: go ahead even if some job must wait for capacity (after an approval)
    allow_waiting: bool = False


class HostsQuarantineArgs(_Hosts):
    """Quarantine a building's (or the named) training hosts, so no job is placed there.

    Refused (HostsBusy) while a host still runs a job: move the job first with
    ``training_move``. Undone by ``hosts_release`` of the same hosts.
    """

    reason: str = Field(min_length=1)


class HostsReleaseArgs(_Hosts):
    """Release a building's (or the named) training hosts from quarantine. Undone by
    quarantining them again."""

    reason: str = "released by a runbook"
