"""Alertmanager payloads and runbooks for the trigger tests (kept in testkit: the fuzz
campaign and its benchmark use them too)."""

from __future__ import annotations

from testkit.trigger_payloads import (
    APPROVER,
    HMAC_SECRET,
    TOKEN,
    alert,
    fingerprint,
    notification,
    runbook,
)

__all__ = ["APPROVER", "HMAC_SECRET", "TOKEN", "alert", "fingerprint", "notification", "runbook"]
