"""What the orchestrator keeps in the HAProxy routing map, parsed and diffed (pure, no I/O).

The map holds one entry per PoP and bucket, ``<pop>/<bucket> <region>``, which the
frontends look up to pick a region's backend, plus reserved keys (prefix
:data:`RESERVED`) that a proxy started from its config file does not have:

* ``__orchestrator.boot <token>``: the boot mark. ``orchestrator haproxy adopt`` adds it;
  a proxy restarted from its files (its runtime state lost) comes back without it, and
  the fleet refuses to act until an operator adopts again.
* ``__orchestrator.gen.<N> <writer>``: the routing version ``N``. A writer claims the move
  from ``N`` with ``del map`` on this exact key, which HAProxy performs atomically and
  which fails ("Key not found") for every other writer: that is the compare-and-set the
  runtime API lacks, so of two writers holding the same version one wins.
* ``__orchestrator.writing <N>.<writer>``: a write to version ``N`` is under way. Its writer
  (same idempotency key) may resume it; any other reader waits, or an operator adopts.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "BOOT_KEY",
    "GEN_PREFIX",
    "RESERVED",
    "WRITING_KEY",
    "MapState",
    "ServerState",
    "bucket_key",
    "diff_entries",
    "parse_map",
    "parse_servers_state",
    "writer_tag",
]

RESERVED = "__orchestrator."
BOOT_KEY = RESERVED + "boot"
GEN_PREFIX = RESERVED + "gen."
WRITING_KEY = RESERVED + "writing"

#: names that can sit in a map key or a CLI argument unquoted
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")

# srv_admin_state bits (HAProxy's enum srv_admin): forced/inherited maintenance and drain
ADMIN_FMAINT = 0x01
ADMIN_IMAINT = 0x02
ADMIN_CMAINT = 0x04
ADMIN_FDRAIN = 0x08
ADMIN_IDRAIN = 0x10
ADMIN_RMAINT = 0x20
ADMIN_HMAINT = 0x40
MAINT_BITS = ADMIN_FMAINT | ADMIN_IMAINT | ADMIN_CMAINT | ADMIN_RMAINT | ADMIN_HMAINT
DRAIN_BITS = ADMIN_FDRAIN | ADMIN_IDRAIN


def bucket_key(pop: str, bucket: int) -> str:
    return f"{pop}/{bucket}"


def writer_tag(idempotency_key: str) -> str:
    """A short, CLI-safe stand-in for an idempotency key (keys may hold any character)."""
    return hashlib.blake2b(idempotency_key.encode(), digest_size=8).hexdigest()


@dataclass
class MapState:
    """The routing map as read: entries by key (first one wins, as in HAProxy's lookup)."""

    entries: dict[str, str] = field(default_factory=dict)
    #: keys present more than once (``add map`` on an existing key); HAProxy uses the first
    duplicates: list[str] = field(default_factory=list)

    @property
    def boot(self) -> str | None:
        return self.entries.get(BOOT_KEY)

    @property
    def generations(self) -> list[int]:
        found = []
        for key in self.entries:
            if key.startswith(GEN_PREFIX):
                tail = key.removeprefix(GEN_PREFIX)
                if tail.isdigit():
                    found.append(int(tail))
        return sorted(found)

    @property
    def version(self) -> int | None:
        """The routing version, or None while no single generation key is present."""
        gens = self.generations
        return gens[0] if len(gens) == 1 else None

    @property
    def writing(self) -> tuple[int, str] | None:
        """``(version, writer tag)`` of a write under way, if any."""
        value = self.entries.get(WRITING_KEY)
        if value is None:
            return None
        version, _, tag = value.partition(".")
        return (int(version), tag) if version.isdigit() else None

    def buckets(self, pop: str, bucket_count: int) -> tuple[list[str | None], list[int]]:
        """The region of each of ``pop``'s buckets (None where the map lacks the key),
        and the missing buckets."""
        regions: list[str | None] = []
        missing: list[int] = []
        for b in range(bucket_count):
            region = self.entries.get(bucket_key(pop, b))
            regions.append(region)
            if region is None:
                missing.append(b)
        return regions, missing


def parse_map(text: str) -> MapState:
    """``show map <file>`` output: one ``<entry id> <key> <value>`` line per entry."""
    state = MapState()
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[0].startswith("0x"):
            continue
        _, key, value = parts
        if key in state.entries:
            state.duplicates.append(key)
            continue
        state.entries[key] = value.strip()
    return state


@dataclass(frozen=True)
class ServerState:
    backend: str
    server: str
    admin_state: int
    #: the weight set by the user (``set server ... weight``), before drain or maintenance
    user_weight: int

    @property
    def drained(self) -> bool:
        return bool(self.admin_state & DRAIN_BITS)

    @property
    def maintenance(self) -> bool:
        return bool(self.admin_state & MAINT_BITS)

    def fraction(self, full_weight: int) -> float:
        """The pool weight the orchestrator sees: 0 when drained or in maintenance."""
        if self.drained or self.maintenance:
            return 0.0
        return min(1.0, self.user_weight / full_weight)


def parse_servers_state(text: str) -> dict[tuple[str, str], ServerState]:
    """``show servers state`` output -> (backend, server) -> state.

    Columns (format 1): be_id be_name srv_id srv_name srv_addr srv_op_state
    srv_admin_state srv_uweight ...
    """
    found: dict[tuple[str, str], ServerState] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8 or line.startswith("#") or not parts[0].isdigit():
            continue
        backend, server = parts[1], parts[3]
        found[(backend, server)] = ServerState(
            backend=backend,
            server=server,
            admin_state=int(parts[6]),
            user_weight=int(parts[7]),
        )
    return found


def diff_entries(
    live: Mapping[str, str], target: Mapping[str, Sequence[str]]
) -> list[tuple[str, str, bool]]:
    """``(key, region, exists)`` for every bucket whose live region is not the target's.

    ``exists`` tells ``set map`` (the key is there) from ``add map`` (it is not: ``add``
    on an existing key would add a second entry that HAProxy never reads).
    """
    changes = []
    for pop, regions in target.items():
        for bucket, region in enumerate(regions):
            key = bucket_key(pop, bucket)
            have = live.get(key)
            if have != region:
                changes.append((key, region, have is not None))
    return changes
