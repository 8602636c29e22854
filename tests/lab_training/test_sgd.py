"""The deterministic model: every step is a function of (seed, step) and the saved state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from orchestrator.lab.training.checkpoints import load_checkpoint, write_checkpoint
from orchestrator.lab.training.sgd import (
    TrainState,
    batch,
    init_state,
    params_digest,
    train,
    train_step,
    train_uninterrupted,
)


class TestDeterminism:
    """The same seed and steps give bit-identical parameters, however the run is cut up."""

    def test_two_uninterrupted_runs_are_bit_identical(self) -> None:
        first, second = train_uninterrupted(3, 120), train_uninterrupted(3, 120)
        assert first.dtype == np.float64
        assert first.tobytes() == second.tobytes()

    def test_chunks_through_the_checkpoint_store_match_one_run(self, tmp_path: Path) -> None:
        state = init_state(3)
        for stop in (17, 50, 51, 99, 120):
            train(state, stop)
            write_checkpoint(tmp_path, state.step, state.to_arrays())
            state = TrainState.from_arrays(stop, load_checkpoint(tmp_path, stop).arrays)
        assert state.flat_params().tobytes() == train_uninterrupted(3, 120).tobytes()

    def test_dropping_the_momentum_on_resume_changes_the_result(self) -> None:
        state = train(init_state(3), 40)
        for name in state.velocity:
            state.velocity[name] = np.zeros_like(state.velocity[name])
        resumed = train(state, 80).flat_params()
        assert params_digest(resumed) != params_digest(train_uninterrupted(3, 80))

    def test_the_seed_matters(self) -> None:
        assert params_digest(train_uninterrupted(1, 30)) != params_digest(
            train_uninterrupted(2, 30)
        )

    def test_training_reduces_the_loss(self) -> None:
        state = init_state(5)
        first = train_step(state)
        train(state, 400)
        assert train_step(state) < first / 2


class TestBatches:
    """A batch depends on (seed, step) alone, never on what ran before it."""

    def test_batch_is_a_pure_function_of_seed_and_step(self) -> None:
        x1, y1 = batch(4, 77)
        batch(4, 3)
        x2, y2 = batch(4, 77)
        assert x1.tobytes() == x2.tobytes() and y1.tobytes() == y2.tobytes()
        assert batch(4, 78)[0].tobytes() != x1.tobytes()


class TestStateArrays:
    """Restoring from arrays refuses incomplete or misshapen state, naming the array."""

    def test_missing_velocity_is_named(self) -> None:
        arrays = init_state(0).to_arrays()
        del arrays["velocity_w2"]
        with pytest.raises(ValueError, match="velocity_w2 is missing"):
            TrainState.from_arrays(0, arrays)

    def test_wrong_shape_is_named(self) -> None:
        arrays = init_state(0).to_arrays()
        arrays["param_b1"] = np.zeros(3)
        with pytest.raises(ValueError, match="param_b1 is float64"):
            TrainState.from_arrays(0, arrays)

    def test_negative_seed_is_refused(self) -> None:
        with pytest.raises(ValueError, match="seed"):
            init_state(-1)
