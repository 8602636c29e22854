"""A move request is checked before the supervisor acts (the Update's validator), naming the
field; continue-as-new carries the newest moves so a retried request id still answers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.contracts.training_moves import (
    MoveJobRequest,
    MoveJobResult,
    MoveOutcome,
    MoveRecord,
    move_request_problem,
)
from orchestrator.contracts.training_supervisor import SupervisorInput
from workflows.training_carry import carry

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
GOOD = {"avoid_buildings": ["use-a"], "reason": "power work", "request_id": "r1"}


class TestValidation:
    """Each bad request names its field; a good one passes."""

    def test_good(self) -> None:
        assert move_request_problem(MoveJobRequest.model_validate(GOOD)) is None
        hosts = GOOD | {"avoid_buildings": [], "avoid_hosts": ["use-a-h00"]}
        assert move_request_problem(MoveJobRequest.model_validate(hosts)) is None

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ({"request_id": " "}, "request_id"),
            ({"avoid_buildings": []}, "avoid_buildings"),
            ({"avoid_buildings": [""]}, "avoid_buildings"),
            ({"avoid_hosts": ["h1", "h1"]}, "avoid_hosts"),
            ({"reason": ""}, "reason"),
        ],
    )
    def test_bad(self, change: dict[str, object], field: str) -> None:
        problem = move_request_problem(MoveJobRequest.model_validate(GOOD | change))
        assert problem is not None and problem[0] == field


class TestCarried:
    """Continue-as-new keeps the newest 20 moves (their ids still answer), never failures."""

    def test_newest_moves_kept(self) -> None:
        moves = [
            MoveRecord(
                request_id=f"r{i}",
                requested_at=NOW,
                result=MoveJobResult(job="j", outcome=MoveOutcome.MOVED, request_id=f"r{i}"),
            )
            for i in range(25)
        ]
        inp = SupervisorInput(job="j", started_at=NOW, moves=moves)
        kept = carry(inp, NOW)
        assert [m.request_id for m in kept.moves] == [f"r{i}" for i in range(5, 25)]
        assert kept.failures == []
