"""Numbers for a finished run: p75 of past durations and the critical path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.runbook.spec import Runbook

__all__ = ["critical_path_of", "p75"]


def p75(values: Sequence[float]) -> float:
    """The 75th percentile (linear interpolation), Maelstrom's threshold for "stuck"."""
    if not values:
        raise ValueError("p75 of no values")
    ordered = sorted(values)
    rank = 0.75 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def critical_path_of(runbook: Runbook, durations: Mapping[str, float]) -> tuple[list[str], float]:
    """The longest chain of dependent tasks by ``durations`` (tasks not run count 0)."""
    finish: dict[str, float] = {}
    best_parent: dict[str, str | None] = {}
    pending = {t.id: t for t in runbook.tasks}
    while pending:
        progressed = False
        for task_id, task in list(pending.items()):
            deps = task.dependencies
            if any(d in pending for d in deps):
                continue
            parent = max(deps, key=lambda d: finish[d], default=None)
            start = finish[parent] if parent is not None else 0.0
            finish[task_id] = start + durations.get(task_id, 0.0)
            best_parent[task_id] = parent
            del pending[task_id]
            progressed = True
        if not progressed:  # a cycle: lint refuses these, so never reached for a started run
            raise ValueError(f"dependency cycle among {sorted(pending)}")
    if not finish:
        return [], 0.0
    end = max(finish, key=lambda t: finish[t])
    path: list[str] = []
    node: str | None = end
    while node is not None:
        path.append(node)
        node = best_parent[node]
    return list(reversed(path)), finish[end]
