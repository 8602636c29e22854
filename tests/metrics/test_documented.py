"""Every metric the orchestrator records from workflows is in docs/metrics.md, under the
name Prometheus shows (counters with ``_total``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_every_workflow_metric_is_documented() -> None:
    source = (ROOT / "workflows" / "observe.py").read_text()
    docs = (ROOT / "docs" / "metrics.md").read_text()
    counters = set(re.findall(r'_count\(\s*"(orchestrator_\w+)"', source))
    others = set(re.findall(r'_(?:observe|gauge)\(\s*"(orchestrator_\w+)"', source))
    names = {f"{n}_total" for n in counters} | others
    assert len(names) >= 20

    def documented(name: str) -> bool:
        if f"`{name}`" in docs:
            return True
        # a table row may abbreviate a sibling: `orchestrator_load_test_load`, `..._capacity_estimate`
        return any(f"`..._{name[len(p) + 1 :]}`" in docs for p in _prefixes(name))

    assert sorted(n for n in names if not documented(n)) == []


def _prefixes(name: str) -> list[str]:
    parts = name.split("_")
    return ["_".join(parts[:i]) for i in range(2, len(parts))]
