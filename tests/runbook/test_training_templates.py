"""The training templates (issue 25): training_move needs no restore (a moved job stays),
hosts_quarantine is undone by hosts_release of the same hosts, and bad args name the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.runbook.templates import REGISTRY, InlineRestore
from tests.runbook.helpers import codes, lint, runbook_text

HEADER = """\
name: building
kind: drain
parameters:
  building: {type: string}
"""

MOVE_THEN_FENCE = """
- id: move-jobs
  template: training_move
  args: {building: "${params.building}"}
- id: fence
  template: hosts_quarantine
  depends_on: [move-jobs]
  args: {building: "${params.building}", reason: maintenance}
  restore: auto
"""


class TestLint:
    """A drain that moves jobs and fences the building lints clean; fencing without a
    restore is flagged like any other change."""

    def test_move_needs_no_restore(self) -> None:
        assert lint(runbook_text(MOVE_THEN_FENCE, HEADER)) == []

    def test_quarantine_needs_a_restore(self) -> None:
        text = runbook_text(MOVE_THEN_FENCE.replace("  restore: auto\n", ""), HEADER)
        assert codes(lint(text)) == ["no-restore"]


class TestArgs:
    """Each template names the field it refuses; the quarantine's restore releases the
    same hosts, and the release's quarantines them again."""

    def test_registered(self) -> None:
        assert {"training_move", "hosts_quarantine", "hosts_release"} <= set(REGISTRY.names())
        assert REGISTRY["training_move"].mutates and not REGISTRY["training_move"].needs_restore

    @pytest.mark.parametrize("name", ["training_move", "hosts_quarantine", "hosts_release"])
    def test_needs_a_building_or_hosts(self, name: str) -> None:
        with pytest.raises(ValidationError, match="hosts: name a building or some hosts"):
            REGISTRY[name].validate_args({} if name == "training_move" else {"reason": "r"})

    def test_quarantine_needs_a_reason(self) -> None:
        with pytest.raises(ValidationError, match="reason"):
            REGISTRY["hosts_quarantine"].validate_args({"building": "use-a"})

    def test_restores(self) -> None:
        args = {"building": "use-a", "hosts": ["x-h01"], "reason": "power work"}
        assert REGISTRY["hosts_quarantine"].restore_for(args) == InlineRestore(
            template="hosts_release", args={"building": "use-a", "hosts": ["x-h01"]}
        )
        back = REGISTRY["hosts_release"].restore_for({"hosts": ["x-h01"]})
        assert back is not None and back.template == "hosts_quarantine"
        assert REGISTRY["training_move"].restore_for({"building": "use-a"}) is None
