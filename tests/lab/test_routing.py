"""The lab's routing state: versions, validation, and lazy bucket realisation."""

from __future__ import annotations

import pytest

from orchestrator.lab.errors import ApiError
from orchestrator.lab.routing import MAX_PENDING_CHAIN, RoutingState
from orchestrator.models import RoutingWrite
from orchestrator.policy.rebalance.buckets import assign_buckets


def _state() -> RoutingState:
    return RoutingState(["p", "q"], ["a", "b", "c"], 1024, {"p": {"a": 1.0}, "q": {"b": 1.0}})


def _write(p: dict[str, float], q: dict[str, float] | None = None) -> RoutingWrite:
    return RoutingWrite(fractions={"p": p, "q": q or {"b": 1.0}})


class TestLazyRealisation:
    """Buckets realised late equal the ones realised after every write (minimal churn chain)."""

    def test_lazy_equals_eager(self) -> None:
        steps = [{"a": 0.5, "b": 0.5}, {"a": 0.2, "b": 0.3, "c": 0.5}, {"c": 1.0}]
        lazy = _state()
        for step in steps:
            lazy.apply(_write(step))
        eager: list[str] | None = assign_buckets({"a": 1.0}, 1024)
        for step in steps:
            eager = assign_buckets({r: f for r, f in step.items() if f > 0}, 1024, eager)
        assert lazy.buckets_of("p") == eager
        assert lazy.version == 4

    def test_long_chains_are_realised_at_write_time(self) -> None:
        state = _state()
        for i in range(MAX_PENDING_CHAIN + 1):
            share = (i % 10 + 1) / 20
            state.apply(_write({"a": share, "b": 1 - share}))
        assert len(state._pending["p"]) < MAX_PENDING_CHAIN

    def test_health_matrix_follows_the_version(self) -> None:
        state = _state()
        assert state.matrix()[0].tolist() == [1.0, 0.0, 0.0]
        state.apply(_write({"a": 0.25, "c": 0.75}))
        assert state.matrix()[0].tolist() == [0.25, 0.0, 0.75]


class TestWriteValidation:
    """Explicit buckets must match the fractions; every PoP must be written."""

    def test_explicit_buckets_must_match_fractions(self) -> None:
        state = _state()
        with pytest.raises(ApiError) as caught:
            state.apply(
                RoutingWrite(
                    fractions={"p": {"a": 0.5, "b": 0.5}, "q": {"b": 1.0}},
                    buckets={"p": ["a"] * 1024},
                )
            )
        assert caught.value.field == "buckets.p"
        assert state.version == 1

    def test_explicit_buckets_are_used(self) -> None:
        state = _state()
        layout = ["a", "b"] * 512
        state.apply(
            RoutingWrite(
                fractions={"p": {"a": 0.5, "b": 0.5}, "q": {"b": 1.0}}, buckets={"p": layout}
            )
        )
        assert state.buckets_of("p") == layout

    def test_missing_pop(self) -> None:
        with pytest.raises(ApiError) as caught:
            _state().apply(RoutingWrite(fractions={"p": {"a": 1.0}}))
        assert caught.value.status == 422 and caught.value.field == "fractions"
