"""The deterministic model: a small MLP trained with SGD + momentum on synthetic data.

Determinism is the whole point: the lab proves a job that crashed and resumed five
times ends bit-identical to one that never stopped. So every input to step ``i``
is a function of ``(seed, i)`` and the state saved in a checkpoint:

- the batch of step ``i`` comes from its own generator seeded ``(seed, BATCH, i)``,
  never from a generator that advanced through earlier steps;
- the learning rate is a function of ``i``;
- the momentum buffers are part of the state (forgetting them on resume would
  change every later step, which the tests catch);
- float64 throughout, fixed shapes, BLAS pinned to one thread by the process
  launcher, so the same operations run in the same order on every run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PARAM_NAMES",
    "TrainState",
    "batch",
    "init_state",
    "learning_rate",
    "params_digest",
    "train",
    "train_step",
    "train_uninterrupted",
]

IN, HIDDEN, OUT, BATCH = 16, 32, 4, 32
LR0, LR_DECAY_STEPS, MOMENTUM, NOISE = 0.05, 500.0, 0.9, 0.01
#: stream tags so the teacher, the initial weights and the batches never share draws
_TEACHER, _INIT, _BATCH = 0, 1, 2

#: the parameters, in the order :meth:`TrainState.flat_params` concatenates them
PARAM_NAMES = ("w1", "b1", "w2", "b2")


@dataclass
class TrainState:
    """Everything step ``step`` needs: parameters and momentum. ``step`` = steps done."""

    seed: int
    step: int
    params: dict[str, np.ndarray]
    velocity: dict[str, np.ndarray]

    def flat_params(self) -> np.ndarray:
        return np.concatenate([self.params[name].ravel() for name in PARAM_NAMES])

    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays = {f"param_{n}": self.params[n] for n in PARAM_NAMES}
        arrays |= {f"velocity_{n}": self.velocity[n] for n in PARAM_NAMES}
        arrays["seed"] = np.asarray(self.seed, dtype=np.int64)
        return arrays

    @classmethod
    def from_arrays(cls, step: int, arrays: dict[str, np.ndarray]) -> TrainState:
        """Rebuild from a checkpoint's arrays; ValueError names what is missing or misshapen."""
        expected = init_state(0)
        params: dict[str, np.ndarray] = {}
        velocity: dict[str, np.ndarray] = {}
        for name in PARAM_NAMES:
            for prefix, target in (("param_", params), ("velocity_", velocity)):
                key = prefix + name
                if key not in arrays:
                    raise ValueError(f"checkpoint arrays: {key} is missing")
                value = np.asarray(arrays[key])
                want = expected.params[name]
                if value.shape != want.shape or value.dtype != np.float64:
                    raise ValueError(
                        f"checkpoint arrays: {key} is {value.dtype}{value.shape}, "
                        f"expected float64{want.shape}"
                    )
                target[name] = value.copy()
        if "seed" not in arrays:
            raise ValueError("checkpoint arrays: seed is missing")
        return cls(seed=int(arrays["seed"]), step=step, params=params, velocity=velocity)


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, *stream])


def init_state(seed: int) -> TrainState:
    if seed < 0:
        raise ValueError(f"seed: must be non-negative, got {seed}")
    rng = _rng(seed, _INIT)
    params = {
        "w1": rng.standard_normal((IN, HIDDEN)) / np.sqrt(IN),
        "b1": np.zeros(HIDDEN),
        "w2": rng.standard_normal((HIDDEN, OUT)) / np.sqrt(HIDDEN),
        "b2": np.zeros(OUT),
    }
    velocity = {name: np.zeros_like(value) for name, value in params.items()}
    return TrainState(seed=seed, step=0, params=params, velocity=velocity)


def batch(seed: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The inputs and targets of step ``step``: a function of ``(seed, step)`` alone."""
    teacher = _rng(seed, _TEACHER).standard_normal((IN, OUT))
    rng = _rng(seed, _BATCH, step)
    x = rng.standard_normal((BATCH, IN))
    y = np.tanh(x @ teacher) + NOISE * rng.standard_normal((BATCH, OUT))
    return x, y


def learning_rate(step: int) -> float:
    return LR0 / (1.0 + step / LR_DECAY_STEPS)


def train_step(state: TrainState) -> float:
    """Run step ``state.step`` in place (mean squared error, SGD + momentum); returns the loss."""
    x, y = batch(state.seed, state.step)
    p = state.params
    hidden = np.tanh(x @ p["w1"] + p["b1"])
    error = hidden @ p["w2"] + p["b2"] - y
    loss = float(np.mean(error * error))

    d_out = (2.0 / error.size) * error
    d_hidden = (d_out @ p["w2"].T) * (1.0 - hidden * hidden)
    grads = {
        "w1": x.T @ d_hidden,
        "b1": d_hidden.sum(axis=0),
        "w2": hidden.T @ d_out,
        "b2": d_out.sum(axis=0),
    }
    lr = learning_rate(state.step)
    for name in PARAM_NAMES:
        velocity = MOMENTUM * state.velocity[name] + grads[name]
        state.velocity[name] = velocity
        p[name] = p[name] - lr * velocity
    state.step += 1
    return loss


def train(state: TrainState, until_step: int) -> TrainState:
    while state.step < until_step:
        train_step(state)
    return state


def train_uninterrupted(seed: int, steps: int) -> np.ndarray:
    """The flat parameters after ``steps`` steps from scratch, in one go: the reference."""
    if steps < 0:
        raise ValueError(f"steps: must be non-negative, got {steps}")
    return train(init_state(seed), steps).flat_params()


def params_digest(flat: np.ndarray) -> str:
    """sha256 of the parameters as little-endian float64: equal digests, equal bits."""
    return hashlib.sha256(np.ascontiguousarray(flat, dtype="<f8").tobytes()).hexdigest()
