"""The model and the data: a small MLP regressing a seeded teacher, and a data cursor.

Everything is a function of the seed, so every rank (and every restart) builds the
same initial parameters and the same data set. The data position is one integer,
the cursor: the number of samples the whole job has consumed. Epoch ``e`` visits the
data set in the order of a permutation seeded by ``(seed, e)``, and rank ``r`` of a
step takes the ``r``-th slice of the next global batch, so the cursor stored in a
checkpoint says exactly which samples come next.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

__all__ = ["HIDDEN", "IN_DIM", "DataSet", "build_model", "params_digest"]

IN_DIM = 32
#: the default width; the checkpoint benchmark widens it to make shards weigh something
HIDDEN = 128
#: samples in the synthetic data set
_SIZE = 4096


def build_model(seed: int, hidden: int = HIDDEN) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(IN_DIM, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, 1),
    )


class DataSet:
    """``y = teacher(x) + noise`` with ``x`` Gaussian; all drawn from the seed."""

    def __init__(self, seed: int, size: int = _SIZE) -> None:
        gen = torch.Generator().manual_seed(seed + 1)
        self.seed = seed
        self.size = size
        self.x = torch.randn(size, IN_DIM, generator=gen)
        teacher = torch.randn(IN_DIM, 1, generator=gen) / IN_DIM**0.5
        self.y = torch.tanh(self.x @ teacher) + 0.05 * torch.randn(size, 1, generator=gen)
        self._perms: dict[int, torch.Tensor] = {}

    def _perm(self, epoch: int) -> torch.Tensor:
        if epoch not in self._perms:
            gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
            self._perms = {epoch: torch.randperm(self.size, generator=gen)}
        return self._perms[epoch]

    def batch(self, cursor: int, rank: int, per_rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank ``rank``'s slice of the global batch that starts at ``cursor``."""
        start = cursor + rank * per_rank
        index = torch.tensor(
            [int(self._perm(p // self.size)[p % self.size]) for p in range(start, start + per_rank)]
        )
        return self.x[index], self.y[index]


def params_digest(model: nn.Module) -> str:
    """sha256 over every parameter's raw bytes, in name order: equal iff bit-identical."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()
