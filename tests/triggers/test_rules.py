"""Matching alerts to runbooks and filling parameters from labels (pure, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.runbook.spec import Trigger
from orchestrator.triggers.payload import Alert
from orchestrator.triggers.rules import Ignored, TriggerMatch, dedup_scope, match_alert
from tests.triggers.payloads import alert, runbook

GROUP = '{}:{alertname="RegionErrorRate"}'
EPISODE = datetime(2024, 5, 1, 10, tzinfo=UTC)


def _alert(status: str = "firing", **labels: str) -> Alert:
    return Alert.model_validate(alert(status, **labels))


class TestMatching:
    """A runbook's trigger (alertname + Alertmanager-style matchers) decides which alerts start it."""

    def test_matching_alert_fills_typed_parameters(self) -> None:
        rb = runbook("drain-a")
        [decision] = match_alert([rb], _alert(region="eu-west", max_pct="30"), GROUP)
        assert isinstance(decision, TriggerMatch)
        assert decision.runbook == "drain-a"
        assert decision.parameters == {"region": "eu-west", "max_pct": 30}
        assert decision.key == GROUP and decision.scope == "group"
        episode = datetime(2024, 5, 1, 10, tzinfo=UTC)
        assert decision.workflow_id(episode).startswith("drain-a-alert-")
        assert decision.workflow_id(episode).endswith("-20240501T100000.000Z")

    def test_absent_optional_label_takes_the_default(self) -> None:
        [decision] = match_alert([runbook("drain-a")], _alert(region="eu-west"), GROUP)
        assert isinstance(decision, TriggerMatch)
        assert decision.parameters["max_pct"] == 50

    def test_other_alertname_or_failing_matcher_is_ignored(self) -> None:
        rb = runbook("drain-a")
        for labels in (
            {"region": "eu-west", "alertname": "Other"},
            {"region": "eu-west", "severity": "info"},
            {"region": "eu-west", "env": "dev"},
        ):
            [decision] = match_alert([rb], _alert(**labels), GROUP)
            assert isinstance(decision, Ignored)
            assert decision.runbook is None
            assert "no runbook trigger matches" in decision.reason

    def test_bad_label_value_ignores_that_alert_with_the_reason(self) -> None:
        rb = runbook("drain-a")
        [bad] = match_alert([rb], _alert(region="eu-west", max_pct="lots"), GROUP)
        assert isinstance(bad, Ignored)
        assert bad.runbook == "drain-a"
        assert "max_pct" in bad.reason and "lots" in bad.reason
        [good] = match_alert([rb], _alert(region="eu-west", max_pct="10"), GROUP)
        assert isinstance(good, TriggerMatch)

    def test_region_label_that_is_no_region_name_is_refused(self) -> None:
        rb = runbook("drain-a")
        for bad in ("..", ".", "../etc", "eu west", "-x", "x" * 64):
            [decision] = match_alert([rb], _alert(region=bad), GROUP)
            assert isinstance(decision, Ignored), bad
            assert decision.code == "bad_label"
            assert "region" in decision.reason and "not a region name" in decision.reason

    def test_missing_required_label_names_it(self) -> None:
        [decision] = match_alert([runbook("drain-a")], _alert(), GROUP)
        assert isinstance(decision, Ignored)
        assert "region" in decision.reason

    def test_every_matching_runbook_gets_a_decision(self) -> None:
        decisions = match_alert(
            [runbook("drain-a"), runbook("drain-b"), runbook("other", alertname="X")],
            _alert(region="eu-west"),
            GROUP,
        )
        assert [d.runbook for d in decisions] == ["drain-a", "drain-b"]


class TestWorkflowIds:
    """The workflow id is stable per (runbook, group, parameters) and episode, so the same
    group maps to one run per episode."""

    def test_same_group_same_id_across_calls(self) -> None:
        rb = runbook("drain-a")
        first = match_alert([rb], _alert(region="eu-west", instance="a"), GROUP)[0]
        again = match_alert([rb], _alert(region="eu-west", instance="b"), GROUP)[0]
        assert isinstance(first, TriggerMatch) and isinstance(again, TriggerMatch)
        assert first.workflow_id(EPISODE) == again.workflow_id(EPISODE)

    def test_other_group_parameters_runbook_or_episode_differ(self) -> None:
        rb = runbook("drain-a")
        base = match_alert([rb], _alert(region="eu-west"), GROUP)[0]
        other_group = match_alert([rb], _alert(region="eu-west"), GROUP + "x")[0]
        other_region = match_alert([rb], _alert(region="us-east"), GROUP)[0]
        other_runbook = match_alert([runbook("drain-b")], _alert(region="eu-west"), GROUP)[0]
        matches = [base, other_group, other_region, other_runbook]
        assert all(isinstance(m, TriggerMatch) for m in matches)
        ids = {m.workflow_id(EPISODE) for m in matches}  # type: ignore[union-attr]
        assert len(ids) == 4
        later = base.workflow_id(EPISODE + timedelta(milliseconds=1))  # type: ignore[union-attr]
        assert later != base.workflow_id(EPISODE)  # type: ignore[union-attr]

    def test_resolved_alert_maps_to_the_firing_alerts_identity(self) -> None:
        rb = runbook("drain-a")
        firing = match_alert([rb], _alert(region="eu-west"), GROUP)[0]
        resolved = match_alert([rb], _alert("resolved", region="eu-west"), GROUP)[0]
        assert firing.identity == resolved.identity  # type: ignore[union-attr]

    def test_per_alert_trigger_keys_on_the_fingerprint(self) -> None:
        class PerAlertTrigger(Trigger):
            per_alert: bool = True

        rb = runbook("drain-a")
        rb.triggers = [PerAlertTrigger.model_validate(rb.triggers[0].model_dump())]
        assert dedup_scope(rb.triggers[0]) == "alert"
        one = match_alert([rb], _alert(region="eu-west", instance="a"), GROUP)[0]
        two = match_alert([rb], _alert(region="eu-west", instance="b"), GROUP)[0]
        assert isinstance(one, TriggerMatch) and isinstance(two, TriggerMatch)
        assert (
            one.scope == "alert" and one.key == _alert(region="eu-west", instance="a").fingerprint
        )
        assert one.identity != two.identity

    def test_cooldown_is_read_from_the_trigger(self) -> None:
        [decision] = match_alert([runbook("drain-a", cooldown="10m")], _alert(region="x"), GROUP)
        assert isinstance(decision, TriggerMatch)
        assert decision.cooldown_s == 600
