"""The harness's audit checks catch the double applies they exist to catch."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from orchestrator.models import AuditEntry
from tests.chaos.harness import audit_problems, redundant_publishes

RUN_A = "11111111-1111-1111-1111-111111111111"
RUN_B = "22222222-2222-2222-2222-222222222222"


def entry(seq: int, key: str, kind: str = "service_weight", **request: Any) -> AuditEntry:
    return AuditEntry(
        seq=seq, at=datetime.now(UTC), idempotency_key=key, kind=kind, request=request, response={}
    )


class TestAuditChecks:
    """A clean log passes; a repeated key or a step under two runs fails; a repeated table
    is counted as a redundant publish."""

    def test_clean_log(self) -> None:
        log = [
            entry(1, f"drain/{RUN_A}/sessions/1"),
            entry(2, "rebalancer/epoch-1", "routing", fractions={"p": {"a": 1.0}}),
            entry(3, "rebalancer/epoch-2", "routing", fractions={"p": {"a": 0.5, "b": 0.5}}),
        ]
        assert audit_problems(log) == []

    def test_each_double_apply_is_named(self) -> None:
        log = [
            entry(1, f"drain/{RUN_A}/sessions/1"),
            entry(2, f"drain/{RUN_B}/sessions/1"),
            entry(3, "k"),
            entry(4, "k"),
            entry(5, "rebalancer/epoch-1", "routing", fractions={"p": {"a": 1.0}}),
            entry(6, "rebalancer/epoch-2", "routing", fractions={"p": {"a": 1.0}}),
        ]
        problems = audit_problems(log)
        assert any("key k applied 2 times" in p for p in problems)
        assert any("drain/sessions/1 applied under 2 runs" in p for p in problems)
        assert not any("epoch-2" in p for p in problems)
        assert redundant_publishes(log) == ["rebalancer/epoch-2"]
