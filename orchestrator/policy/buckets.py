"""Fractions to user buckets, moving as few buckets as possible.

A PoP's users hash into ``bucket_count`` buckets; each bucket is routed to one
region. Taiji's pipeline turns the solver's fractions into such an assignment.
Keeping every bucket that can stay where it is keeps caches warm and sticky
users put, so the number of buckets moved equals the lower bound: the sum over
regions of how many buckets each must give up.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from functools import partial

__all__ = ["assign_buckets", "bucket_counts", "bucket_of", "churn", "min_churn"]


def bucket_of(user_id: str, bucket_count: int) -> int:
    """The bucket of a user: a stable hash, identical across processes and restarts."""
    digest = hashlib.blake2b(user_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % bucket_count


def bucket_counts(fractions: Mapping[str, float], bucket_count: int) -> dict[str, int]:
    """Whole buckets per region, by largest remainder: they sum to ``bucket_count``.

    Ties break by region name so the result is deterministic.
    """
    if bucket_count <= 0:
        raise ValueError("bucket_count must be positive")
    total = sum(max(f, 0.0) for f in fractions.values())
    if total <= 0:
        raise ValueError("fractions must have a positive sum")
    exact = {r: max(f, 0.0) / total * bucket_count for r, f in fractions.items()}
    counts = {r: math.floor(x) for r, x in exact.items()}
    left = bucket_count - sum(counts.values())
    by_remainder = sorted(exact, key=lambda r: (-(exact[r] - counts[r]), r))
    for region in by_remainder[:left]:
        counts[region] += 1
    return counts


def _region_rank(region: str, bucket: int) -> bytes:
    # Each region ranks buckets by its own seeded permutation (Taiji's stable
    # segment assignment), so fresh assignments don't depend on dict order.
    return hashlib.blake2b(f"{region}:{bucket}".encode(), digest_size=8).digest()


def assign_buckets(
    fractions: Mapping[str, float],
    bucket_count: int,
    current: Sequence[str] | None = None,
) -> list[str]:
    """The bucket → region list for ``fractions``, keeping ``current`` where possible."""
    targets = bucket_counts(fractions, bucket_count)
    if current is not None and len(current) != bucket_count:
        raise ValueError(f"current has {len(current)} buckets, expected {bucket_count}")

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
        free.sort(key=partial(_region_rank, region))
        for bucket in free[:need]:
            assignment[bucket] = region
        free = free[need:]
    return [r for r in assignment if r is not None]


def churn(before: Sequence[str], after: Sequence[str]) -> int:
    """How many buckets changed region."""
    return sum(1 for a, b in zip(before, after, strict=True) if a != b)


def min_churn(before: Sequence[str], fractions: Mapping[str, float]) -> int:
    """The fewest bucket moves that can realise ``fractions`` from ``before``."""
    targets = bucket_counts(fractions, len(before))
    have: dict[str, int] = {}
    for region in before:
        have[region] = have.get(region, 0) + 1
    return sum(max(0, n - targets.get(r, 0)) for r, n in have.items())
