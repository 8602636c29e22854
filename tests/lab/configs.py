"""Small lab configs for physics tests: two regions, one PoP, fast service times."""

from __future__ import annotations

import copy
from typing import Any

from orchestrator.lab.config import LabConfig, parse_config

BASE: dict[str, Any] = {
    "metrics": {"window_s": 10, "retention_s": 30},
    "cold": {"factor": 3.0, "warm_after_s": 30, "warm_after_requests": 1000},
    "sessions": {"ttl_s": 60},
    "demand": {"total_rps": 60},
    "services": [
        {"name": "web", "kind": "stateless", "depends_on": ["kv"], "demand_share": 0.75},
        {"name": "sessions", "kind": "sticky", "demand_share": 0.25},
        {"name": "kv", "kind": "stateful"},
    ],
    "regions": [
        {
            "name": name,
            "buildings": [f"{name}-1", f"{name}-2"],
            "services": {
                "web": {"slots": 2, "service_time_ms": 40, "queue_limit": 2},
                "sessions": {"slots": 4, "service_time_ms": 20, "queue_limit": 4},
                "kv": {"slots": 50, "service_time_ms": 1, "queue_limit": 50},
            },
        }
        for name in ("a", "b")
    ],
    "inter_region_rtt_ms": {"a": {"b": 60}},
    "pops": [{"name": "p", "demand_weight": 1, "rtt_ms": {"a": 0, "b": 0}}],
    "shards": {"kv": {"a": 2, "b": 0}},
    "batch_jobs": [{"name": "job", "region": "a", "slot_share": 0.5}],
    "initial_routing": {"p": {"a": 1.0}},
}


def small_config(**overrides: Any) -> LabConfig:
    data = copy.deepcopy(BASE)
    data.update(overrides)
    return parse_config(data, source="test")
