"""Fractions to user buckets, moving as few buckets as possible.

A PoP's users hash into ``bucket_count`` buckets; each bucket is routed to one
region. Taiji's pipeline turns the solver's fractions into such an assignment.
Keeping every bucket that can stay where it is keeps caches warm and sticky
users put, so the number of buckets moved equals the lower bound: the sum over
regions of how many buckets each must give up.

Fractions rarely come out as whole buckets, so each region gets the floor or
the ceiling of its exact count. Which regions get the ceiling is chosen with the
current assignment in view: a region that already holds more than its floor
keeps one more bucket instead of giving it up. That makes the churn the minimum
over every whole-bucket realisation of the fractions, not just over one
rounding, and stops a table that did not change from shuffling buckets.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache

from orchestrator.policy.rebalance.xxh32 import xxh32

__all__ = ["assign_buckets", "bucket_counts", "bucket_of", "churn", "min_churn"]


def bucket_of(user_id: str, bucket_count: int) -> int:
    """The bucket of a user: a stable hash, identical across processes and restarts.

    XXH32 of the id's UTF-8 bytes, mod the count: exactly what an HAProxy frontend
    computes with ``url_param(user),url_dec(1),xxh32,mod(<count>)`` (the lab's HAProxy data
    plane, docs/fleet-contract.md), so the proxy and the Python lab agree on every user.
    """
    return xxh32(user_id.encode()) % bucket_count


def bucket_counts(
    fractions: Mapping[str, float],
    bucket_count: int,
    current: Sequence[str] | None = None,
) -> dict[str, int]:
    """Whole buckets per region, each the floor or ceiling of its exact share.

    They sum to ``bucket_count``. Without ``current`` the ceilings go by largest
    remainder; with it, first to regions that hold more buckets now than their
    floor (each such ceiling saves one move). Ties break by region name so the
    result is deterministic.
    """
    if bucket_count <= 0:
        raise ValueError("bucket_count must be positive")
    total = sum(max(f, 0.0) for f in fractions.values())
    if total <= 0:
        raise ValueError("fractions must have a positive sum")
    exact = {r: _snap(max(f, 0.0) / total * bucket_count) for r, f in fractions.items()}
    counts = {r: math.floor(x) for r, x in exact.items()}
    left = bucket_count - sum(counts.values())
    have = Counter(current or ())
    # Only regions with a fractional part may round up, so a region at 0 stays at 0.
    candidates = [r for r in exact if exact[r] - counts[r] > 0]
    order = sorted(
        candidates,
        key=lambda r: (have.get(r, 0) <= counts[r], -(exact[r] - counts[r]), r),
    )
    # Float error can leave a whole bucket unplaced with no remainder to show for it.
    order += sorted((r for r in exact if r not in candidates), key=lambda r: (-exact[r], r))
    for region in order[:left]:
        counts[region] += 1
    return counts


def _snap(share: float) -> float:
    """A share within float error of a whole number is that number: 1.0000000000000002
    buckets is one bucket, not a candidate for a second (hypothesis found a region kept
    two of four buckets that way, leaving another with none)."""
    nearest = round(share)
    return float(nearest) if abs(share - nearest) < 1e-9 else share


def _region_rank(region: str, bucket: int) -> bytes:
    # Each region ranks buckets by its own seeded permutation (Taiji's stable
    # segment assignment), so fresh assignments don't depend on dict order.
    return hashlib.blake2b(f"{region}:{bucket}".encode(), digest_size=8).digest()


@lru_cache(maxsize=1024)
def _rank_table(region: str, bucket_count: int) -> tuple[bytes, ...]:
    # A rebalancer epoch maps ~1,000 PoPs onto the same regions: hashing each
    # region's permutation once instead of once per PoP keeps that under 0.1 s.
    return tuple(_region_rank(region, b) for b in range(bucket_count))


def assign_buckets(
    fractions: Mapping[str, float],
    bucket_count: int,
    current: Sequence[str] | None = None,
) -> list[str]:
    """The bucket → region list for ``fractions``, keeping ``current`` where possible."""
    if current is not None and len(current) != bucket_count:
        raise ValueError(f"current has {len(current)} buckets, expected {bucket_count}")
    targets = bucket_counts(fractions, bucket_count, current)

    assignment: list[str | None] = [None] * bucket_count
    kept = dict.fromkeys(targets, 0)
    if current is not None:
        for bucket, region in enumerate(current):
            if region in targets and kept[region] < targets[region]:
                assignment[bucket] = region
                kept[region] += 1

    free = [b for b in range(bucket_count) if assignment[b] is None]
    for region in sorted(targets):
        need = targets[region] - kept[region]
        if need <= 0:
            continue
        free.sort(key=_rank_table(region, bucket_count).__getitem__)
        for bucket in free[:need]:
            assignment[bucket] = region
        free = free[need:]
    return [r for r in assignment if r is not None]


def churn(before: Sequence[str], after: Sequence[str]) -> int:
    """How many buckets changed region."""
    if len(before) != len(after):
        raise ValueError(f"before has {len(before)} buckets, after {len(after)}")
    return sum(map(operator.ne, before, after))


def min_churn(before: Sequence[str], fractions: Mapping[str, float]) -> int:
    """The fewest bucket moves that can realise ``fractions`` from ``before``."""
    targets = bucket_counts(fractions, len(before), before)
    have = Counter(before)
    return sum(max(0, n - targets.get(r, 0)) for r, n in have.items())
