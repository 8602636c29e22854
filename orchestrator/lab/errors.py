"""Errors the lab answers with; the app turns them into the contract's JSON error body."""

from __future__ import annotations

__all__ = ["ApiError", "conflict", "invalid", "not_found", "rejected"]


class ApiError(Exception):
    """An HTTP error answer: ``{"error": <name>, "reason": ..., "field": ...}``.

    ``error`` is the exception type name the client maps it to, so both sides
    agree on the vocabulary of :mod:`orchestrator.exceptions`.
    """

    def __init__(self, status: int, error: str, reason: str, field: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.error = error
        self.reason = reason
        self.field = field

    def body(self) -> dict[str, str | None]:
        return {"error": self.error, "reason": self.reason, "field": self.field}


def invalid(field: str, reason: str) -> ApiError:
    return ApiError(422, "InvalidRequest", reason, field)


def conflict(reason: str, field: str | None = None) -> ApiError:
    return ApiError(409, "VersionConflict", reason, field)


def not_found(reason: str, field: str | None = None) -> ApiError:
    return ApiError(404, "FleetNotFound", reason, field)


def rejected(status: int, reason: str, field: str | None = None) -> ApiError:
    return ApiError(status, "FleetRejected", reason, field)
