"""Every error the orchestrator raises on purpose, in one hierarchy.

::

    OrchestratorError
    ├── ConfigError ................. a setting is missing or invalid (names the setting)
    ├── TemporalUnreachable ......... the Temporal frontend did not answer
    ├── FleetError .................. the fleet API failed; carries status and server reason
    │   ├── FleetUnavailable ........ transport error, timeout or 5xx: retry later
    │   └── FleetRejected ........... 4xx: the request itself is wrong, never retried
    │       ├── FleetUnauthorized ... 401/403
    │       ├── FleetNotFound ....... 404
    │       ├── VersionConflict ..... 409: a routing write carried a stale If-Match
    │       ├── ProxyStateLost ...... the proxy restarted from its files: an operator adopts
    │       └── InvalidRequest ...... 422: a body failed validation (names the field)
    ├── PolicyError ................. a pure algorithm cannot produce an answer
    │   ├── InvalidInstance ......... its input is inconsistent (names the field)
    │   └── Infeasible .............. no answer meets the constraints (names the binding one)
    ├── UnsafeRequest ............... refused: it would leave too little capacity
    │   ├── GpuCapacityShort ........ training jobs could not keep their size off a building
    │   └── HostsBusy ............... a host to quarantine still runs a training job
    ├── OverrideConflict ............ refused: another owner holds the region
    ├── RunbookError ................ a runbook is invalid or cannot run
    └── StillWaiting ................ a poll found nothing yet: its retry policy polls again

Workflows and activities report these to Temporal as ``ApplicationError`` whose
``type`` is the class name; :data:`NON_RETRYABLE_ERROR_TYPES` lists the types a
retry cannot fix, so retry policies stop on them at once.
"""

from __future__ import annotations

__all__ = [
    "NON_RETRYABLE_ERROR_TYPES",
    "ConfigError",
    "FleetError",
    "FleetNotFound",
    "FleetRejected",
    "FleetUnauthorized",
    "FleetUnavailable",
    "GpuCapacityShort",
    "HostsBusy",
    "Infeasible",
    "InvalidInstance",
    "InvalidRequest",
    "OrchestratorError",
    "OverrideConflict",
    "PolicyError",
    "ProxyStateLost",
    "RunbookError",
    "StillWaiting",
    "TemporalUnreachable",
    "UnsafeRequest",
    "VersionConflict",
]


class OrchestratorError(Exception):
    """Base of every error this project raises on purpose."""

    #: Whether retrying the same call can succeed.
    retryable: bool = False

    @classmethod
    def type_name(cls) -> str:
        """The ``ApplicationError.type`` this error travels as through Temporal."""
        return cls.__name__


class ConfigError(OrchestratorError):
    """A setting is missing or invalid; the message names the setting."""

    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"invalid setting {setting}: {reason}")
        self.setting = setting
        self.reason = reason


class TemporalUnreachable(OrchestratorError):
    """The Temporal frontend at ``address`` did not answer."""

    retryable = True

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot reach Temporal at {address}: {reason}")
        self.address = address
        self.reason = reason


class FleetError(OrchestratorError):
    """The fleet API failed. ``status`` is the HTTP status (0 when no answer came)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class FleetUnavailable(FleetError):
    """No usable answer (connection refused, timeout, 5xx): a later retry may succeed."""

    retryable = True


class FleetRejected(FleetError):
    """The fleet refused the request (4xx); sending it again changes nothing."""


class FleetUnauthorized(FleetRejected):
    """The fleet token is missing or wrong."""


class FleetNotFound(FleetRejected):
    """The resource does not exist in the fleet."""


class VersionConflict(FleetRejected):
    """A routing write carried a version that is no longer current."""


class ProxyStateLost(FleetRejected):
    """The data plane lost the state the orchestrator wrote (a proxy restarted from its
    config file); nothing is changed until an operator re-adopts it."""


class InvalidRequest(FleetRejected):
    """The fleet could not validate a request body; the reason names the field."""


class PolicyError(OrchestratorError):
    """A pure policy cannot produce an answer for its input."""


class InvalidInstance(PolicyError):
    """The policy's input is inconsistent; the message names the field."""


class Infeasible(PolicyError):
    """No answer satisfies every constraint; ``constraint`` names the one that binds."""

    def __init__(self, constraint: str, detail: str) -> None:
        super().__init__(f"infeasible: {constraint}: {detail}")
        self.constraint = constraint
        self.detail = detail


class UnsafeRequest(OrchestratorError):
    """Refused because it would leave the fleet short of capacity."""


class GpuCapacityShort(UnsafeRequest):
    """Refused: moving training jobs off a building would leave some job waiting or
    shrunk (too few free GPU hosts outside), and the run has no approval for that."""


class HostsBusy(UnsafeRequest):
    """Refused: a host to quarantine still runs a training job; move the job first
    (through its supervisor), never behind its back."""


class OverrideConflict(OrchestratorError):
    """Refused because another owner holds an override on the region."""


class RunbookError(OrchestratorError):
    """A runbook is invalid or cannot run."""


class StillWaiting(OrchestratorError):
    """A one-shot poll saw nothing to report yet (the job is healthy, or still restarting).

    Not a failure: the activity's retry policy is the poller, so the workflow waits on
    the server's retry timer between polls (which a time-skipping server skips).
    """

    retryable = True


#: ``ApplicationError`` types that retry policies must not retry.
NON_RETRYABLE_ERROR_TYPES: list[str] = sorted(
    cls.type_name()
    for cls in (
        ConfigError,
        FleetRejected,
        FleetUnauthorized,
        FleetNotFound,
        VersionConflict,
        InvalidRequest,
        ProxyStateLost,
        PolicyError,
        InvalidInstance,
        Infeasible,
        UnsafeRequest,
        GpuCapacityShort,
        HostsBusy,
        OverrideConflict,
        RunbookError,
    )
)
