"""The lab's versioned routing table: fractions per PoP, realised as buckets on demand.

Fractions are the source of truth. Buckets are realised lazily, one PoP at a
time, by replaying the chain of fraction changes through
:func:`~orchestrator.policy.rebalance.buckets.assign_buckets` (each step keeping as many
buckets in place as possible), so a 1,000-PoP table can be rewritten and read
for health without ever building a million bucket entries, and a PoP whose
buckets are realised later gets exactly the minimal-churn history it would
have had if realised eagerly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np

from orchestrator.lab.errors import invalid
from orchestrator.models import FRACTION_SUM_TOLERANCE, RoutingTable, RoutingWrite
from orchestrator.policy.rebalance.buckets import assign_buckets

__all__ = ["MAX_PENDING_CHAIN", "RoutingState"]

#: a PoP with this many unrealised fraction changes is realised at write time
MAX_PENDING_CHAIN = 16


class RoutingState:
    def __init__(
        self,
        pops: list[str],
        regions: list[str],
        bucket_count: int,
        fractions: dict[str, dict[str, float]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self.pops = list(pops)
        self.regions = list(regions)
        self.bucket_count = bucket_count
        self.version = 1
        self.updated_at = datetime.fromtimestamp(clock(), UTC)
        self.reason = "initial"
        self._fractions = {p: dict(fractions[p]) for p in self.pops}
        self._buckets: dict[str, list[str]] = {}
        self._pending: dict[str, list[dict[str, float]]] = {
            p: [dict(fractions[p])] for p in self.pops
        }
        self._pop_index = {p: i for i, p in enumerate(self.pops)}
        self._region_index = {r: i for i, r in enumerate(self.regions)}
        self._matrix: tuple[int, np.ndarray] | None = None

    # --- reads -----------------------------------------------------------

    @property
    def fractions(self) -> dict[str, dict[str, float]]:
        return self._fractions

    def buckets_of(self, pop: str) -> list[str]:
        chain = self._pending.get(pop)
        if chain:
            current = self._buckets.get(pop)
            for shares in chain:
                current = assign_buckets(_positive(shares), self.bucket_count, current)
            assert current is not None
            self._buckets[pop] = current
            self._pending[pop] = []
        return self._buckets[pop]

    def region_of(self, pop: str, bucket: int) -> str:
        return self.buckets_of(pop)[bucket]

    def matrix(self) -> np.ndarray:
        """pops x regions fractions, cached per version (model mode reads it per request)."""
        if self._matrix is None or self._matrix[0] != self.version:
            m = np.zeros((len(self.pops), len(self.regions)))
            for pop, shares in self._fractions.items():
                row = self._pop_index[pop]
                for region, share in shares.items():
                    m[row, self._region_index[region]] = share
            self._matrix = (self.version, m)
        return self._matrix[1]

    def table(self, *, include_buckets: bool) -> RoutingTable:
        buckets = {p: list(self.buckets_of(p)) for p in self.pops} if include_buckets else None
        return RoutingTable.model_construct(
            version=self.version,
            fractions={p: dict(s) for p, s in self._fractions.items()},
            buckets=buckets,
            updated_at=self.updated_at,
            reason=self.reason,
        )

    # --- writes ----------------------------------------------------------

    def validate(self, write: RoutingWrite) -> None:
        """Refuse a write naming unknown PoPs/regions or carrying inconsistent buckets."""
        known_pops = set(self.pops)
        unknown = sorted(set(write.fractions) - known_pops)
        if unknown:
            raise invalid(f"fractions.{unknown[0]}", f"unknown PoP {unknown[0]!r}")
        missing = sorted(known_pops - set(write.fractions))
        if missing:
            raise invalid("fractions", f"every PoP needs fractions; missing {missing[:5]}")
        for pop, shares in write.fractions.items():
            for region in shares:
                if region not in self._region_index:
                    raise invalid(f"fractions.{pop}.{region}", f"unknown region {region!r}")
        for pop, buckets in (write.buckets or {}).items():
            field = f"buckets.{pop}"
            if pop not in known_pops:
                raise invalid(field, f"unknown PoP {pop!r}")
            if len(buckets) != self.bucket_count:
                raise invalid(field, f"has {len(buckets)} buckets, expected {self.bucket_count}")
            counts: dict[str, int] = {}
            for region in buckets:
                if region not in self._region_index:
                    raise invalid(field, f"unknown region {region!r}")
                counts[region] = counts.get(region, 0) + 1
            shares = write.fractions[pop]
            for region in set(counts) | set(shares):
                got = counts.get(region, 0) / self.bucket_count
                if abs(got - shares.get(region, 0.0)) > 1.0 / self.bucket_count + 1e-9:
                    raise invalid(
                        field,
                        f"{region} has {got:.4f} of the buckets but a fraction of "
                        f"{shares.get(region, 0.0):.4f}",
                    )

    def apply(self, write: RoutingWrite) -> None:
        self.validate(write)
        explicit = write.buckets or {}
        for pop in self.pops:
            shares = {r: float(f) for r, f in write.fractions[pop].items()}
            if pop in explicit:
                self._buckets[pop] = list(explicit[pop])
                self._pending[pop] = []
            elif not _same(shares, self._fractions[pop]):
                chain = self._pending.setdefault(pop, [])
                chain.append(shares)
                if len(chain) >= MAX_PENDING_CHAIN:
                    self.buckets_of(pop)
            self._fractions[pop] = shares
        self.version += 1
        self.updated_at = datetime.fromtimestamp(self._clock(), UTC)
        self.reason = write.reason


def _positive(shares: dict[str, float]) -> dict[str, float]:
    return {r: f for r, f in shares.items() if f > 0}


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    keys = set(a) | set(b)
    return all(abs(a.get(k, 0.0) - b.get(k, 0.0)) <= FRACTION_SUM_TOLERANCE for k in keys)
