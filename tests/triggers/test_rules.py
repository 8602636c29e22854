"""Matching alerts to runbooks and filling parameters from labels (pure, no I/O)."""

from __future__ import annotations

from orchestrator.runbook.spec import Trigger
from orchestrator.triggers.payload import Alert
from orchestrator.triggers.rules import Ignored, TriggerMatch, dedup_scope, match_alert
from tests.triggers.payloads import alert, runbook

GROUP = '{}:{alertname="RegionErrorRate"}'


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
        assert decision.workflow_id.startswith("drain-a-alert-")

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
    """The workflow id is stable per (group, parameters), so the same group maps to one run."""

    def test_same_group_same_id_across_calls(self) -> None:
        rb = runbook("drain-a")
        first = match_alert([rb], _alert(region="eu-west", instance="a"), GROUP)[0]
        again = match_alert([rb], _alert(region="eu-west", instance="b"), GROUP)[0]
        assert isinstance(first, TriggerMatch) and isinstance(again, TriggerMatch)
        assert first.workflow_id == again.workflow_id

    def test_other_group_or_other_parameters_differ(self) -> None:
        rb = runbook("drain-a")
        base = match_alert([rb], _alert(region="eu-west"), GROUP)[0]
        other_group = match_alert([rb], _alert(region="eu-west"), GROUP + "x")[0]
        other_region = match_alert([rb], _alert(region="us-east"), GROUP)[0]
        ids = {d.workflow_id for d in (base, other_group, other_region)}  # type: ignore[union-attr]
        assert len(ids) == 3

    def test_resolved_alert_maps_to_the_firing_alerts_id(self) -> None:
        rb = runbook("drain-a")
        firing = match_alert([rb], _alert(region="eu-west"), GROUP)[0]
        resolved = match_alert([rb], _alert("resolved", region="eu-west"), GROUP)[0]
        assert firing.workflow_id == resolved.workflow_id  # type: ignore[union-attr]

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
        assert one.workflow_id != two.workflow_id

    def test_cooldown_is_read_from_the_trigger(self) -> None:
        [decision] = match_alert([runbook("drain-a", cooldown="10m")], _alert(region="x"), GROUP)
        assert isinstance(decision, TriggerMatch)
        assert decision.cooldown_s == 600
