"""Benchmark summary claims: the verdict follows from the numbers, never from the author."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from benchmarks.summary import Claim, Target, claim, dump, flag, load, ratio


class TestTarget:
    """A target is a bound with a direction, and a missing number meets none."""

    @pytest.mark.parametrize(
        ("target", "inside", "outside"),
        [
            (Target.below(1.0, "< 1"), 0.99, 1.0),
            (Target.at_most(1.0, "<= 1"), 1.0, 1.01),
            (Target.above(0.0, "> 0"), 1e-9, 0.0),
            (Target.at_least(20, ">= 20"), 20, 19),
            (Target.equal(0, "none"), 0, 1),
            (Target.between(0.9, 1.1, "within 10%"), 1.1, 1.11),
        ],
    )
    def test_bound_and_direction(self, target: Target, inside: float, outside: float) -> None:
        assert target.holds(inside)
        assert not target.holds(outside)

    def test_nan_and_none_meet_nothing(self) -> None:
        target = Target.at_most(1.0, "<= 1")
        assert not target.holds(math.nan)
        assert not target.holds(None)

    def test_between_needs_an_upper_end_and_only_it_does(self) -> None:
        with pytest.raises(ValidationError, match="upper"):
            Target(text="x", op="between", bound=1.0)
        with pytest.raises(ValidationError, match="upper"):
            Target(text="x", op="<", bound=1.0, upper=2.0)


class TestClaim:
    """claim() computes the ratio to the baseline and the verdict from the measurement."""

    def test_ratio_and_verdict_on_the_value(self) -> None:
        c = claim("solve time", 0.5, "s", Target.below(1.0, "< 1 s"), baseline=2.0)
        assert c.ratio_to_baseline == 0.25
        assert c.met

    def test_verdict_on_the_ratio(self) -> None:
        target = Target.below(1.0, "fewer than fixed", on="ratio")
        assert not claim("steps", 6, "steps", target, baseline=4).met
        assert claim("steps", 3, "steps", target, baseline=4).met

    def test_no_ratio_without_a_nonzero_baseline(self) -> None:
        assert ratio(1.0, None) is None
        assert ratio(1.0, 0.0) is None
        c = claim("5xx", 3, "errors", Target.equal(0, "none"), baseline=0)
        assert c.ratio_to_baseline is None
        assert not c.met

    def test_a_ratio_target_without_a_baseline_is_not_met(self) -> None:
        assert not claim("x", 1.0, "s", Target.at_most(2.0, "<= 2x", on="ratio")).met

    def test_flag_is_one_for_yes(self) -> None:
        assert flag("restore completed", True).met
        no = flag("restore completed", False)
        assert (no.value, no.unit, no.met) == (0.0, "bool", False)


class TestConsistency:
    """A stored claim whose verdict or ratio disagrees with its numbers is refused on load."""

    def _stored(self) -> dict[str, object]:
        return dump([claim("p99", 120.0, "ms", Target.below(500, "< SLO"), baseline=100.0)])[0]

    def test_round_trip(self) -> None:
        document = {"summary": [self._stored()]}
        (c,) = load(document)
        assert isinstance(c, Claim)
        assert (c.value, c.baseline, c.met) == (120.0, 100.0, True)

    def test_a_flipped_verdict_is_refused(self) -> None:
        stored = {**self._stored(), "met": False}
        with pytest.raises(ValidationError, match="disagrees with the target"):
            load({"summary": [stored]})

    def test_a_wrong_ratio_is_refused(self) -> None:
        stored = {**self._stored(), "ratio_to_baseline": 2.0}
        with pytest.raises(ValidationError, match="ratio_to_baseline"):
            load({"summary": [stored]})

    def test_unknown_fields_are_refused(self) -> None:
        with pytest.raises(ValidationError):
            load({"summary": [{**self._stored(), "verdict": "great"}]})

    def test_a_document_without_a_summary(self) -> None:
        with pytest.raises(KeyError, match="summary"):
            load({"benchmark": "old"})


class TestMissingMeasurements:
    """A measurement that did not happen (NaN) has no ratio and meets no target."""

    def test_nan_value(self) -> None:
        c = claim("spread once settled", math.nan, "%", Target.below(3, "< 3%"), baseline=14.7)
        assert (c.value, c.ratio_to_baseline, c.met) == (None, None, False)
        (stored,) = load({"summary": dump([c])})
        assert stored.value is None
