"""Runbooks about a building: the ``building`` parameter type, ``traffic_shift building:``,
the ``region-of(B)`` selector, a building alert filling the parameter, and the capacity check
of a building's partial share."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml

from orchestrator.exceptions import RunbookError
from orchestrator.models import HealthReport, RegionHealth
from orchestrator.policy.drain.capacity import DrainRefused, check_drain_capacity
from orchestrator.runbook import REGISTRY
from orchestrator.runbook.params import bind
from orchestrator.runbook.predicates import Predicate, evaluate, select_regions
from orchestrator.runbook.spec import Parameter, ParamType, Runbook
from orchestrator.triggers.payload import Alert
from orchestrator.triggers.rules import TriggerMatch, match_alert
from tests.policy.test_maelstrom import fleet
from tests.triggers.payloads import alert

BUILDINGS = {"euw-a": "eu-west", "euw-b": "eu-west", "use-a": "us-east"}
REGIONS = ["us-east", "us-west", "eu-west"]

BUILDING_LOSS = """
name: building-loss-test
kind: drain
parameters:
  building: {type: building}
triggers:
  - alertname: BuildingPowerLost
    matchers: ['severity="critical"']
    parameters: {building: building}
tasks:
  - id: shift
    template: traffic_shift
    args: {building: "${params.building}", ratio: 0}
    gates: ["error_rate in others-of(region-of(${params.building})) <= 0.05"]
"""


class TestTrafficShiftArgs:
    """``traffic_shift`` takes exactly one of ``region`` or ``building``."""

    def test_building_instead_of_region(self) -> None:
        args = REGISTRY["traffic_shift"].validate_args({"building": "euw-a", "ratio": 0})
        assert (args.building, args.region) == ("euw-a", None)  # type: ignore[attr-defined]
        restore = REGISTRY["traffic_shift"].restore_for({"building": "euw-a", "ratio": 0})
        assert restore is not None and restore.args["building"] == "euw-a"

    @pytest.mark.parametrize("args", [{"ratio": 0}, {"region": "x", "building": "y", "ratio": 0}])
    def test_neither_or_both_is_refused_naming_the_field(self, args: dict[str, object]) -> None:
        with pytest.raises(ValueError, match="region: give exactly one of region or building"):
            REGISTRY["traffic_shift"].validate_args(args)


class TestBuildingParameter:
    """A ``building`` parameter is a name (checked like a region's); the fleet's topology
    decides whether it exists, when the run resolves it."""

    def test_bad_building_name_is_refused_naming_the_parameter(self) -> None:
        rb = Runbook.model_validate(yaml.safe_load(BUILDING_LOSS))
        with pytest.raises(RunbookError, match="parameter building: '../x' is not a building"):
            bind(rb, {"building": "../x"})
        assert Parameter(type=ParamType.BUILDING).coerce("euw-a") == "euw-a"

    def test_alert_building_label_fills_the_parameter(self) -> None:
        rb = Runbook.model_validate(yaml.safe_load(BUILDING_LOSS))
        labels = {
            "alertname": "BuildingPowerLost",
            "building": "euw-a",
            "region": "eu-west",
            "severity": "critical",
        }
        [decision] = match_alert([rb], Alert.model_validate(alert("firing", **labels)), "g")
        assert isinstance(decision, TriggerMatch)
        assert decision.parameters == {"building": "euw-a"}


class TestRegionOf:
    """``region-of(B)`` selects building B's region, inside ``others-of`` too."""

    def test_selectors(self) -> None:
        assert select_regions("region-of(euw-a)", REGIONS, BUILDINGS) == ["eu-west"]
        assert select_regions("others-of(region-of(euw-a))", REGIONS, BUILDINGS) == [
            "us-east",
            "us-west",
        ]
        assert select_regions("others-of(eu-west)", REGIONS, BUILDINGS) == ["us-east", "us-west"]

    def test_one_line_form_and_evaluation(self) -> None:
        predicate = Predicate.model_validate("error_rate in others-of(region-of(euw-a)) <= 0.05")
        assert predicate.region == "others-of(region-of(euw-a))"
        health = HealthReport(
            window_s=10,
            observed_at=datetime(2026, 1, 1, tzinfo=UTC),
            regions=[
                RegionHealth(region="us-east", error_rate=0.0, samples=10),
                RegionHealth(region="us-west", error_rate=0.01, samples=10),
                RegionHealth(region="eu-west", error_rate=1.0, samples=10),
            ],
        )
        result = evaluate(predicate, health, REGIONS, BUILDINGS)
        assert result.ok and {o.region for o in result.observations} == {"us-east", "us-west"}

    def test_unknown_building_names_it(self) -> None:
        with pytest.raises(ValueError, match="region-of: unknown building 'nowhere'"):
            select_regions("region-of(nowhere)", REGIONS, BUILDINGS)

    def test_bad_selector_says_the_grammar(self) -> None:
        with pytest.raises(ValueError, match="region-of"):
            Predicate.model_validate(
                {"metric": "rps", "region": "region-of(a b)", "op": "<", "value": 1}
            )


class TestPartialDrainCapacity:
    """A building drain asks the others for its share of the region's load only."""

    def test_half_the_load_moves_and_half_stays(self) -> None:
        topology, health = fleet({"a": 800, "b": 500, "c": 500}, {"a": 1000, "b": 1000, "c": 1000})
        with pytest.raises(DrainRefused):  # all 800 rps: b and c at 0.9
            check_drain_capacity(topology, health, ["a"])
        forecast = check_drain_capacity(topology, health, ["a"], moving_share={"a": 0.5})
        after = {r.region: r.utilization_after for r in forecast.regions}
        assert after["b"] == pytest.approx(0.7) and after["c"] == pytest.approx(0.7)
        assert after["a"] == pytest.approx(0.4)  # the other building's half stays
