from __future__ import annotations

import orchestrator.exceptions as exceptions
from orchestrator.exceptions import (
    NON_RETRYABLE_ERROR_TYPES,
    FleetRejected,
    FleetUnavailable,
    Infeasible,
    OrchestratorError,
    VersionConflict,
)


class TestHierarchy:
    """One hierarchy; retryable only where a retry can help; the public names are pinned."""

    def test_public_names(self) -> None:
        assert exceptions.__all__ == [
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

    def test_every_error_is_an_orchestrator_error(self) -> None:
        for name in exceptions.__all__:
            obj = getattr(exceptions, name)
            if isinstance(obj, type):
                assert issubclass(obj, OrchestratorError), name

    def test_retryable_split(self) -> None:
        assert FleetUnavailable("x").retryable
        assert not VersionConflict("x").retryable
        assert "VersionConflict" in NON_RETRYABLE_ERROR_TYPES
        assert "FleetUnavailable" not in NON_RETRYABLE_ERROR_TYPES
        # A poll that saw nothing yet is retried: the retry policy is the poller.
        assert "StillWaiting" not in NON_RETRYABLE_ERROR_TYPES
        assert issubclass(VersionConflict, FleetRejected)
        # A proxy that lost its state waits for an operator, not for a retry.
        assert "ProxyStateLost" in NON_RETRYABLE_ERROR_TYPES

    def test_every_documented_class_is_drawn_in_the_docstring(self) -> None:
        doc = exceptions.__doc__ or ""
        for name in exceptions.__all__:
            if isinstance(getattr(exceptions, name), type):
                assert name in doc, name

    def test_infeasible_names_the_constraint(self) -> None:
        err = Infeasible("rtt_limit", "pop p1 has no region within 40 ms")
        assert err.constraint == "rtt_limit"
        assert "rtt_limit" in str(err)
