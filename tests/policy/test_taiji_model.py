"""Instance validation: an inconsistent instance is refused with the field named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.policy.rebalance.taiji import SolverInstance


def base() -> dict[str, Any]:
    return {
        "regions": [
            {"name": "a", "capacity": 100, "utilization": 0.5},
            {"name": "b", "capacity": 100, "utilization": 0.5},
        ],
        "pops": [
            {
                "name": "p",
                "demand": 10,
                "rtt_ms": {"a": 5, "b": 9},
                "fractions": {"a": 0.5, "b": 0.5},
            }
        ],
    }


class TestInstanceValidation:
    """Each inconsistency raises a validation error whose message names the field."""

    def test_valid_instance_gets_default_constraints(self) -> None:
        inst = SolverInstance.model_validate(base())
        assert inst.constraints.max_utilization_increase == 0.04
        assert inst.constraints.damping == 0.8
        assert inst.constraints.min_shift == 0.01

    @pytest.mark.parametrize(
        ("mutate", "message"),
        [
            (lambda d: d["pops"][0]["fractions"].update(a=0.6), r"pops\.p\.fractions: .*sum"),
            (lambda d: d["pops"][0]["fractions"].update(z=0.0), r"unknown region 'z'"),
            (lambda d: d["pops"][0]["rtt_ms"].pop("b"), r"pops\.p\.rtt_ms: no RTT .*'b'"),
            (lambda d: d["pops"][0].update(sticky={"a": 0.7}), r"pops\.p\.sticky\.a: .*exceeds"),
            (lambda d: d["pops"][0].update(buckets=["a", "q"]), r"pops\.p\.buckets: unknown"),
            (lambda d: d["regions"].append(d["regions"][0]), r"regions: duplicate name 'a'"),
            (lambda d: d["regions"][1].update(capacity=0), r"regions\.b\.capacity: an active"),
            (lambda d: d.update(constraints={"damping": 0}), r"damping"),
            (lambda d: d.update(constraints={"typo": 1}), r"typo"),
        ],
    )
    def test_refuses_with_field_named(self, mutate: Any, message: str) -> None:
        data = base()
        mutate(data)
        with pytest.raises(ValidationError, match=message):
            SolverInstance.model_validate(data)

    def test_drained_region_may_have_no_capacity(self) -> None:
        data = base()
        data["regions"][1].update(capacity=0, status="drained")
        SolverInstance.model_validate(data)
