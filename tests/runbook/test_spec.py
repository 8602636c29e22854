"""The runbook format: parsing, steps, durations, parameter binding, predicates, triggers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from orchestrator.exceptions import RunbookError
from orchestrator.models import HealthReport, RegionHealth, ServiceHealth
from orchestrator.runbook import Predicate, Runbook, Steps, Trigger, bind, evaluate
from orchestrator.runbook.loader import parse_text
from orchestrator.runbook.spec import Parameter, ParamType
from orchestrator.runbook.types import format_duration, parse_duration
from tests.runbook.helpers import runbook_text

TASKS = """
- id: shift
  template: traffic_shift
  args: {region: "${params.region}", ratio: 0.0}
  steps: 5% + 5 x 20%
  wait: ${params.step}
  gates: ["p99_ms in others-of(${params.region}) < ${params.slo}"]
  expected_duration: 10m
  restore: auto
- id: note
  template: notify
  when: drill
  args: {url: "http://hooks.local/${params.region}", message: "draining ${params.region}"}
"""
HEADER = """\
name: sample
kind: drain
parameters:
  region: {type: region}
  slo: {type: float, default: 250}
  step: {type: duration, default: 1m}
"""


def parsed_runbook() -> Runbook:
    result = parse_text(runbook_text(TASKS, HEADER), "x.yaml")
    assert result.findings == []
    assert result.runbook is not None
    return result.runbook


class TestSteps:
    """Step forms all cover the whole move, with the last step exactly at 1."""

    def test_count_and_size(self) -> None:
        assert Steps.model_validate("5 x 20%").progress() == [0.2, 0.4, 0.6, 0.8, 1.0]

    def test_small_first_step_then_trimmed_last(self) -> None:
        assert Steps.model_validate("5% + 5 x 20%").progress() == [
            0.05,
            0.25,
            0.45,
            0.65,
            0.85,
            1.0,
        ]

    def test_explicit_sizes_and_integer(self) -> None:
        assert Steps(sizes=[0.1, 0.4, 0.5]).progress() == [0.1, 0.5, 1.0]
        assert Steps.model_validate(4).progress() == [0.25, 0.5, 0.75, 1.0]

    def test_not_covering_the_move_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="cover only 60%"):
            Steps.model_validate("3 x 20%")
        with pytest.raises(ValidationError, match="sum to 0.9"):
            Steps(sizes=[0.5, 0.4])
        with pytest.raises(ValidationError, match="cannot read steps"):
            Steps.model_validate("lots")


class TestDurations:
    """Durations read as seconds from numbers and unit strings."""

    @pytest.mark.parametrize(
        ("text", "seconds"),
        [("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), (12, 12.0), ("250ms", 0.25)],
    )
    def test_forms(self, text: str | int, seconds: float) -> None:
        assert parse_duration(text) == seconds

    @pytest.mark.parametrize("bad", ["soon", "-5", "5 parsecs", True, -1])
    def test_refused(self, bad: object) -> None:
        with pytest.raises(ValueError):
            parse_duration(bad)

    def test_format_round_trips(self) -> None:
        assert format_duration(5400) == "1h30m"
        assert parse_duration(format_duration(3725.0)) == 3725.0


class TestParameterBinding:
    """Binding substitutes references with typed values and re-validates."""

    def test_whole_reference_keeps_type_embedded_becomes_text(self) -> None:
        bound = bind(parsed_runbook(), {"region": "eu-west", "step": "45s"})
        shift = bound.task("shift")
        assert shift.args == {"region": "eu-west", "ratio": 0.0}
        assert shift.wait == 45.0
        assert shift.gates[0].region == "others-of(eu-west)"
        assert shift.gates[0].value == 250.0
        note = bound.task("note")
        assert note.args["url"] == "http://hooks.local/eu-west"
        assert bound.parameters["region"].default == "eu-west"

    def test_cli_strings_are_coerced(self) -> None:
        bound = bind(parsed_runbook(), {"region": "r1", "slo": "300"})
        assert bound.task("shift").gates[0].value == 300.0

    def test_missing_unknown_and_ill_typed_parameters(self) -> None:
        runbook = parsed_runbook()
        with pytest.raises(RunbookError, match="parameter region is required"):
            bind(runbook, {})
        with pytest.raises(RunbookError, match="unknown parameter"):
            bind(runbook, {"region": "a", "regoin": "b"})
        with pytest.raises(RunbookError, match="parameter slo: expected a float"):
            bind(runbook, {"region": "a", "slo": "fast"})
        with pytest.raises(RunbookError, match="not a region name"):
            bind(runbook, {"region": "eu west!"})

    @pytest.mark.parametrize("region", ["..", ".", "../etc", "a..b", "-a", "a.", "x" * 64])
    def test_a_path_or_overlong_name_is_no_region(self, region: str) -> None:
        """It would reach fleet URLs, search attributes and workflow ids."""
        with pytest.raises(RunbookError, match="not a region name"):
            bind(parsed_runbook(), {"region": region})

    def test_bound_value_that_breaks_a_field_names_it(self) -> None:
        text = runbook_text(TASKS.replace("wait: ${params.step}", "wait: ${params.region}"), HEADER)
        runbook = parse_text(text).runbook
        assert runbook is not None
        with pytest.raises(RunbookError, match="tasks.0.wait"):
            bind(runbook, {"region": "eu-west"})

    @pytest.mark.parametrize(
        ("kind", "raw", "value"),
        [
            (ParamType.INT, "3", 3),
            (ParamType.BOOL, "yes", True),
            (ParamType.BOOL, False, False),
            (ParamType.DURATION, "2m", 120.0),
            (ParamType.FLOAT, 2, 2.0),
        ],
    )
    def test_coercion(self, kind: ParamType, raw: object, value: object) -> None:
        assert Parameter(type=kind).coerce(raw) == value

    def test_choices_and_bad_default(self) -> None:
        with pytest.raises(ValueError, match="not one of"):
            Parameter(type=ParamType.STRING, choices=["a"]).coerce("b")
        with pytest.raises(ValidationError, match="default"):
            Parameter(type=ParamType.INT, default="many")


class TestModes:
    """`when:` decides which tasks run in a drill or a real run."""

    def test_active_tasks(self) -> None:
        runbook = parsed_runbook()
        assert [t.id for t in runbook.active_tasks("real")] == ["shift"]
        assert [t.id for t in runbook.active_tasks("drill")] == ["shift", "note"]
        assert runbook.mode_for() == "real"
        drill = runbook.model_copy(update={"kind": "drill"})
        assert drill.mode_for("real") == "drill"


def health(**services: tuple[float | None, float | None, None]) -> HealthReport:
    """A report with service entries keyed ``region__service`` -> (rps, p99, unused)."""
    now = datetime(2024, 1, 1, tzinfo=UTC)
    entries = []
    regions = []
    for key, (rps, p99, _) in services.items():
        region, service = key.split("__")
        samples = 0 if rps is None else 10
        entries.append(
            ServiceHealth(region=region, service=service, rps=rps, p99_ms=p99, samples=samples)
        )
    for name in sorted({k.split("__")[0] for k in services}):
        regions.append(RegionHealth(region=name, p99_ms=100.0, error_rate=0.0, samples=5))
    return HealthReport(window_s=30, observed_at=now, regions=regions, services=entries)


class TestPredicates:
    """Predicates read shorthand, select regions and treat missing data explicitly."""

    def test_shorthand_equals_structured(self) -> None:
        short = Predicate.model_validate("rps of web in eu <= 1")
        assert short == Predicate(metric="rps", service="web", region="eu", op="<=", value=1)
        assert Predicate.model_validate("error_rate < 0.01").region == "all"

    def test_bad_predicates(self) -> None:
        for bad in ["rps is low", "latency in eu < 3", "rps in others-of(a b) < 3"]:
            with pytest.raises(ValidationError):
                Predicate.model_validate(bad)

    def test_others_of_and_failing_region_named(self) -> None:
        report = health(a__web=(10, 120.0, None), b__web=(10, 300.0, None), c__web=(5, 90.0, None))
        predicate = Predicate.model_validate("p99_ms of web in others-of(a) < 250")
        result = evaluate(predicate, report, ["a", "b", "c"])
        assert not result.ok
        assert [o.region for o in result.observations] == ["b", "c"]
        assert "b=300" in result.message
        assert evaluate(Predicate.model_validate("p99_ms of web in c < 250"), report, ["a"]).ok

    def test_missing_data_fails_unless_allowed(self) -> None:
        report = health(a__web=(None, None, None))
        strict = Predicate.model_validate("rps of web in a <= 1")
        lenient = strict.model_copy(update={"missing": "pass"})
        assert not evaluate(strict, report, ["a"]).ok
        assert "no data" in evaluate(strict, report, ["a"]).message
        assert evaluate(lenient, report, ["a"]).ok

    def test_no_data_in_an_idle_region_passes_health_predicates(self) -> None:
        # b is drained by another run: routing sends it nothing, so it has nothing to judge
        report = health(a__web=(10, 120.0, None), b__web=(None, None, None))
        others = Predicate.model_validate("p99_ms of web in others-of(c) < 250")
        assert not evaluate(others, report, ["a", "b", "c"]).ok
        assert evaluate(others, report, ["a", "b", "c"], idle={"b"}).ok
        every = Predicate.model_validate("p99_ms of web in all < 250")
        assert evaluate(every, report, ["a", "b"], idle={"b"}).ok
        named = Predicate.model_validate("error_rate of web in b < 0.01")
        assert evaluate(named, report, ["a", "b"], idle={"b"}).ok
        # its rate still needs data: "rps > 0" must not pass on none
        rate = Predicate.model_validate("rps of web in b > 0")
        assert not evaluate(rate, report, ["a", "b"], idle={"b"}).ok
        # data in an idle region is judged as usual
        slow = health(a__web=(10, 120.0, None), b__web=(1, 900.0, None))
        assert not evaluate(others, slow, ["a", "b", "c"], idle={"b"}).ok

    def test_region_aggregate_and_unbound_refused(self) -> None:
        report = health(a__web=(1, 1.0, None))
        assert evaluate(Predicate.model_validate("p99_ms in all < 150"), report, ["a"]).ok
        unbound = Predicate.model_validate("p99_ms in ${params.region} < 1")
        with pytest.raises(ValueError, match="unbound"):
            evaluate(unbound, report, ["a"])


class TestTriggers:
    """Triggers match alerts the way Alertmanager matchers do and map labels to parameters."""

    def test_matching_and_parameters(self) -> None:
        trigger = Trigger.model_validate(
            {
                "alertname": "RegionDown",
                "matchers": ['severity="critical"', 'region=~"eu-.*"', 'env!="dev"'],
                "parameters": {"region": "region"},
                "cooldown": "1h",
            }
        )
        labels = {"alertname": "RegionDown", "severity": "critical", "region": "eu-west"}
        assert trigger.matches(labels)
        assert trigger.parameters_from(labels) == {"region": "eu-west"}
        assert trigger.cooldown == 3600.0
        assert not trigger.matches({**labels, "region": "us-east"})
        assert not trigger.matches({**labels, "region": "xeu-west"})  # anchored regex
        assert not trigger.matches({**labels, "env": "dev"})
        assert not trigger.matches({**labels, "alertname": "Other"})

    def test_mapping_form_and_bad_regex(self) -> None:
        trigger = Trigger.model_validate({"alertname": "A", "matchers": {"severity": "page"}})
        assert trigger.matchers[0].op == "="
        with pytest.raises(ValidationError, match="regular expression"):
            Trigger.model_validate({"alertname": "A", "matchers": ['x=~"("']})
