"""Idempotency keys and the audit log: every mutation applies once, and says so.

A key seen before with the same request returns the stored answer without
touching the fleet or the log; the same key with a different request is a
client bug and is refused. Only applied mutations are stored: a refused one
(409, 422) changed nothing, so retrying it re-evaluates.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.lab.errors import invalid
from orchestrator.models import AuditEntry

__all__ = ["Ledger", "StoredAnswer", "fingerprint"]


def fingerprint(kind: str, request: dict[str, Any]) -> str:
    canonical = json.dumps({"kind": kind, "request": request}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class StoredAnswer:
    fingerprint: str
    body: dict[str, Any]
    headers: dict[str, str]


class Ledger:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._answers: dict[str, StoredAnswer] = {}
        self._entries: list[AuditEntry] = []

    def replay(self, key: str, kind: str, request: dict[str, Any]) -> StoredAnswer | None:
        """The stored answer for ``key``, or None when the key is new."""
        stored = self._answers.get(key)
        if stored is None:
            return None
        if stored.fingerprint != fingerprint(kind, request):
            raise invalid(
                "Idempotency-Key",
                "this key was already used for a different request; use a new key",
            )
        return stored

    def next_seq(self) -> int:
        return len(self._entries) + 1

    def record(
        self,
        key: str,
        kind: str,
        request: dict[str, Any],
        body: dict[str, Any],
        *,
        summary: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> AuditEntry:
        entry = AuditEntry(
            seq=self.next_seq(),
            at=datetime.fromtimestamp(self._clock(), UTC),
            idempotency_key=key,
            kind=kind,
            request=request,
            response=summary if summary is not None else body,
        )
        self._entries.append(entry)
        self._answers[key] = StoredAnswer(fingerprint(kind, request), body, dict(headers or {}))
        return entry

    def since(self, seq: int) -> list[AuditEntry]:
        return [e for e in self._entries if e.seq > seq]

    def __len__(self) -> int:
        return len(self._entries)
