"""Big lab configs for model mode: many PoPs and regions, laid out on a sphere.

Regions and PoPs get deterministic pseudo-random positions; RTT grows with
great-circle distance (about 1 ms per 100 km, plus a floor), so nearest-region
routing and RTT-aware solvers see a plausible geography.
"""

from __future__ import annotations

import math
import random
from typing import Any

from orchestrator.lab.config import LabConfig, parse_config

__all__ = ["generate_config"]

_EARTH_KM = 6371.0


def _point(rng: random.Random) -> tuple[float, float]:
    lat = math.degrees(math.asin(rng.uniform(-0.85, 0.85)))
    return lat, rng.uniform(-180.0, 180.0)


def _rtt_ms(a: tuple[float, float], b: tuple[float, float]) -> float:
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    km = 2 * _EARTH_KM * math.asin(math.sqrt(h))
    return round(2.0 + km / 100.0, 1)


def generate_config(
    pops: int = 1000,
    regions: int = 50,
    *,
    seed: int = 7,
    total_rps: float | None = None,
    bucket_count: int = 1024,
) -> LabConfig:
    """A valid lab config with ``pops`` PoPs and ``regions`` regions (2 buildings each).

    Demand defaults to 60% of the fleet's front-door capacity.
    """
    if pops < 1 or regions < 1:
        raise ValueError("pops and regions must be at least 1")
    rng = random.Random(seed)
    region_names = [f"r{i:03d}" for i in range(regions)]
    region_at = {r: _point(rng) for r in region_names}
    region_cfgs: list[dict[str, Any]] = []
    for name in region_names:
        scale = rng.choice([1, 1, 2, 3])
        region_cfgs.append(
            {
                "name": name,
                "buildings": [f"{name}-a", f"{name}-b"],
                "services": {
                    "web": {"slots": 8 * scale, "service_time_ms": 80, "queue_limit": 16 * scale},
                    "sessions": {
                        "slots": 4 * scale,
                        "service_time_ms": 100,
                        "queue_limit": 8 * scale,
                    },
                    "cache": {"slots": 16 * scale, "service_time_ms": 4, "queue_limit": 64},
                    "kv": {"slots": 16 * scale, "service_time_ms": 8, "queue_limit": 64},
                    "batch": {"slots": 2, "service_time_ms": 1000, "queue_limit": 2},
                },
            }
        )
    inter: dict[str, dict[str, float]] = {}
    for i, a in enumerate(region_names):
        inter[a] = {b: _rtt_ms(region_at[a], region_at[b]) for b in region_names[i + 1 :]}
    pop_cfgs = []
    for i in range(pops):
        at = _point(rng)
        pop_cfgs.append(
            {
                "name": f"p{i:04d}",
                "demand_weight": round(rng.uniform(0.5, 5.0), 2),
                "rtt_ms": {r: _rtt_ms(at, region_at[r]) for r in region_names},
            }
        )
    data: dict[str, Any] = {
        "bucket_count": bucket_count,
        "services": [
            {
                "name": "web",
                "kind": "stateless",
                "depends_on": ["cache", "kv"],
                "demand_share": 0.8,
            },
            {"name": "sessions", "kind": "sticky", "depends_on": ["kv"], "demand_share": 0.2},
            {"name": "cache", "kind": "stateless"},
            {"name": "kv", "kind": "stateful"},
            {"name": "batch", "kind": "batch"},
        ],
        "regions": region_cfgs,
        "inter_region_rtt_ms": inter,
        "pops": pop_cfgs,
        "shards": {"kv": dict.fromkeys(region_names, 2)},
        "batch_jobs": [
            {"name": f"batch-{r}", "region": r, "slot_share": 0.2} for r in region_names[:5]
        ],
    }
    config = parse_config(data, source="generated")
    if total_rps is None:
        total_rps = 0.6 * sum(config.front_capacity(r) for r in region_names)
    return config.model_copy(
        update={"demand": config.demand.model_copy(update={"total_rps": total_rps})}
    )
