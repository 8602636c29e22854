"""Maelstrom planning: the runbook DAG as a schedule, and when a task is stuck.

Pure functions over :class:`Dag`, a runbook reduced to ids, dependencies and
expected durations:

- :func:`topological_layers`, :func:`ready_tasks` (strong versus weak
  dependencies), :func:`blocked_tasks`;
- :func:`critical_path` and :func:`simulate` (list scheduling, unlimited or
  bounded parallelism) for the makespan, the sequential sum and the speed-up
  Maelstrom reports (4.3x to 6.6x, Table 5);
- :func:`generate_drain_dag`, a seeded DAG the size of Meta's full datacenter
  drain (79 tasks, 109 dependencies, Table 4) and :func:`synthetic_runbook`;
- :func:`stuck_verdict`: a task running past the 75th percentile of its earlier
  durations is stuck (§4.4).

The drain capacity check lives in :mod:`orchestrator.policy.drain.capacity` and
is re-exported here.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Collection, Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from orchestrator.exceptions import InvalidInstance
from orchestrator.models import StrictModel
from orchestrator.policy.drain.capacity import (
    DEFAULT_TARGET_UTILIZATION,
    DrainForecast,
    DrainRefused,
    RegionForecast,
    check_drain_capacity,
    forecast_drain,
)
from orchestrator.runbook.spec import Runbook, RunMode, Task

__all__ = [
    "DEFAULT_TARGET_UTILIZATION",
    "CriticalPath",
    "Dag",
    "DagTask",
    "DrainForecast",
    "DrainRefused",
    "RegionForecast",
    "Schedule",
    "StuckVerdict",
    "blocked_tasks",
    "check_drain_capacity",
    "critical_path",
    "dag_of",
    "forecast_drain",
    "generate_drain_dag",
    "percentile",
    "ready_tasks",
    "simulate",
    "stuck_verdict",
    "synthetic_runbook",
    "topological_layers",
]

#: Duration assumed for a task whose runbook gives no expected_duration.
DEFAULT_TASK_SECONDS = 60.0


class DagTask(StrictModel):
    id: str = Field(min_length=1)
    depends_on: list[str] = Field(default_factory=list)
    weak_depends_on: list[str] = Field(default_factory=list)
    duration_s: float = Field(default=0.0, ge=0.0)
    #: what the task stands for (a template name), for reports
    kind: str = ""

    @property
    def dependencies(self) -> list[str]:
        return [*self.depends_on, *self.weak_depends_on]


class Dag(StrictModel):
    """Tasks with their dependencies; validated unique, closed and acyclic."""

    tasks: list[DagTask]

    @model_validator(mode="after")
    def _well_formed(self) -> Dag:
        ids = [t.id for t in self.tasks]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise InvalidInstance(f"tasks: duplicate id(s) {', '.join(dup)}")
        known = set(ids)
        for task in self.tasks:
            unknown = [d for d in task.dependencies if d not in known]
            if unknown:
                raise InvalidInstance(f"tasks.{task.id}: unknown dependency {', '.join(unknown)}")
        _order(self)  # raises on a cycle
        return self

    def task(self, task_id: str) -> DagTask:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    @property
    def dependency_count(self) -> int:
        return sum(len(t.dependencies) for t in self.tasks)


def _order(dag: Dag) -> list[str]:
    """Kahn's order, ties broken by position in the file so plans read like the runbook."""
    position = {t.id: i for i, t in enumerate(dag.tasks)}
    indegree = {t.id: len(set(t.dependencies)) for t in dag.tasks}
    children: dict[str, list[str]] = {t.id: [] for t in dag.tasks}
    for task in dag.tasks:
        for dep in set(task.dependencies):
            children[dep].append(task.id)
    heap = [(position[i], i) for i, d in indegree.items() if d == 0]
    heapq.heapify(heap)
    order: list[str] = []
    while heap:
        _, node = heapq.heappop(heap)
        order.append(node)
        for child in children[node]:
            indegree[child] -= 1
            if indegree[child] == 0:
                heapq.heappush(heap, (position[child], child))
    if len(order) != len(dag.tasks):
        stuck = sorted(set(indegree) - set(order))
        raise InvalidInstance(f"tasks: dependency cycle among {', '.join(stuck)}")
    return order


def dag_of(
    runbook: Runbook, mode: RunMode | None = None, default_s: float = DEFAULT_TASK_SECONDS
) -> Dag:
    """The runbook's DAG. With a ``mode``, tasks that do not run in it take no time.

    Needs a bound runbook when durations reference parameters (unbound ones count
    as ``default_s``).
    """

    def seconds(task: Task) -> float:
        if mode is not None and not task.active_in(mode):
            return 0.0
        value = task.expected_duration
        return value if isinstance(value, float) else default_s

    return Dag(
        tasks=[
            DagTask(
                id=t.id,
                depends_on=list(t.depends_on),
                weak_depends_on=list(t.weak_depends_on),
                duration_s=seconds(t),
                kind=t.template,
            )
            for t in runbook.tasks
        ]
    )


def topological_layers(dag: Dag) -> list[list[str]]:
    """Tasks grouped by depth: layer k holds tasks whose longest dependency chain has k links."""
    depth: dict[str, int] = {}
    by_id = {t.id: t for t in dag.tasks}
    for task_id in _order(dag):
        deps = by_id[task_id].dependencies
        depth[task_id] = 1 + max((depth[d] for d in deps), default=-1)
    layers: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for task in dag.tasks:
        layers[depth[task.id]].append(task.id)
    return layers


def ready_tasks(
    dag: Dag,
    done: Collection[str],
    failed: Collection[str] = (),
    skipped: Collection[str] = (),
    running: Collection[str] = (),
    *,
    ignore_weak: bool = False,
) -> list[str]:
    """Tasks that may start now, in file order.

    A strong dependency must be done or skipped (a failed one blocks for good); a
    weak one must merely have finished, however it ended. ``ignore_weak`` drops
    weak dependencies altogether, as operators may in a real disaster (§4.4).
    """
    settled = {*done, *skipped}
    finished = {*settled, *failed}
    ready: list[str] = []
    for task in dag.tasks:
        if task.id in finished or task.id in running:
            continue
        if not all(d in settled for d in task.depends_on):
            continue
        if not ignore_weak and not all(d in finished for d in task.weak_depends_on):
            continue
        ready.append(task.id)
    return ready


def blocked_tasks(dag: Dag, failed: Collection[str]) -> list[str]:
    """Tasks that can never start because a strong dependency (transitively) failed."""
    blocked: set[str] = set()
    by_id = {t.id: t for t in dag.tasks}
    for task_id in _order(dag):
        if any(d in failed or d in blocked for d in by_id[task_id].depends_on):
            blocked.add(task_id)
    return [t.id for t in dag.tasks if t.id in blocked]


class CriticalPath(StrictModel):
    #: the chain of tasks that bounds the run, first to last
    tasks: list[str]
    length_s: float


def critical_path(dag: Dag) -> CriticalPath:
    """The longest chain by expected duration (strong and weak links both order tasks)."""
    by_id = {t.id: t for t in dag.tasks}
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for task_id in _order(dag):
        task = by_id[task_id]
        parent = max(task.dependencies, key=lambda d: (finish[d], d), default=None)
        finish[task_id] = (finish[parent] if parent else 0.0) + task.duration_s
        via[task_id] = parent
    if not finish:
        return CriticalPath(tasks=[], length_s=0.0)
    end: str | None = max(finish, key=lambda t: (finish[t], t))
    length = finish[end] if end else 0.0
    chain: list[str] = []
    while end is not None:
        chain.append(end)
        end = via[end]
    return CriticalPath(tasks=chain[::-1], length_s=length)


class Schedule(StrictModel):
    start_s: dict[str, float]
    finish_s: dict[str, float]
    makespan_s: float
    #: the time to run every task one after another
    sequential_s: float
    #: sequential_s / makespan_s (1 when the makespan is zero)
    speedup: float
    critical_path: CriticalPath
    parallelism: int | None


def simulate(dag: Dag, parallelism: int | None = None) -> Schedule:
    """A list schedule: each task starts once its dependencies finish and a slot is free.

    With unlimited parallelism the makespan equals the critical path. With a
    bound, ready tasks are taken longest-remaining-path first, the usual list
    scheduling priority.
    """
    if parallelism is not None and parallelism < 1:
        raise InvalidInstance("parallelism: must be at least 1")
    by_id = {t.id: t for t in dag.tasks}
    order = _order(dag)
    children: dict[str, list[str]] = {t.id: [] for t in dag.tasks}
    for task in dag.tasks:
        for dep in set(task.dependencies):
            children[dep].append(task.id)
    tail: dict[str, float] = {}
    for task_id in reversed(order):
        tail[task_id] = by_id[task_id].duration_s + max(
            (tail[c] for c in children[task_id]), default=0.0
        )
    waiting = {t.id: len(set(t.dependencies)) for t in dag.tasks}
    position = {t.id: i for i, t in enumerate(dag.tasks)}
    ready: list[tuple[float, int, str]] = [
        (-tail[t], position[t], t) for t, n in waiting.items() if n == 0
    ]
    heapq.heapify(ready)
    events: list[tuple[float, int, str]] = []
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    now = 0.0
    slots = parallelism if parallelism is not None else len(dag.tasks) or 1
    while ready or events:
        while ready and len(events) < slots:
            _, _, task_id = heapq.heappop(ready)
            start[task_id] = now
            heapq.heappush(events, (now + by_id[task_id].duration_s, position[task_id], task_id))
        now, _, done_id = heapq.heappop(events)
        finish[done_id] = now
        for child in children[done_id]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (-tail[child], position[child], child))
    makespan = max(finish.values(), default=0.0)
    sequential = sum(t.duration_s for t in dag.tasks)
    return Schedule(
        start_s=start,
        finish_s=finish,
        makespan_s=makespan,
        sequential_s=sequential,
        speedup=sequential / makespan if makespan > 0 else 1.0,
        critical_path=critical_path(dag),
        parallelism=parallelism,
    )


#: Typical durations (seconds) per kind of drain task, after Maelstrom's Table 3.
_KIND_SECONDS: dict[str, float] = {
    "traffic_shift": 600.0,
    "service_weight": 180.0,
    "shard_shift": 1080.0,
    "job_update": 60.0,
    "config_change": 30.0,
    "wait_for": 120.0,
}


def generate_drain_dag(
    seed: int = 0,
    tasks: int = 79,
    dependencies: int = 109,
    depth: int = 8,
    weak_share: float = 0.1,
) -> Dag:
    """A seeded DAG shaped like a full datacenter drain (defaults: Meta's Table 4).

    Tasks sit in ``depth`` levels; every task past the first level has a strong
    parent in the level before (so the longest chain has exactly ``depth``
    tasks), and further links from any earlier level make up ``dependencies``.
    About ``weak_share`` of the further links are weak.
    """
    if depth < 1 or tasks < depth:
        raise InvalidInstance(f"depth: need 1 <= depth <= tasks, got depth={depth}, tasks={tasks}")
    rng = random.Random(seed)
    # Level 0 holds enough roots that the chain links alone do not exceed the budget.
    roots = max(1, tasks - dependencies, round(tasks * 0.12))
    if roots > tasks - (depth - 1):
        roots = tasks - (depth - 1)
    rest = tasks - roots
    cuts = sorted(rng.sample(range(1, rest), depth - 2)) if depth > 2 else []
    sizes = [roots] + [b - a for a, b in zip([0, *cuts], [*cuts, rest], strict=True)]
    if depth == 1:
        sizes = [tasks]
    levels: list[list[str]] = []
    counter = 0
    for size in sizes:
        levels.append([f"t{counter + i:02d}" for i in range(size)])
        counter += size
    strong: dict[str, set[str]] = {t: set() for level in levels for t in level}
    weak: dict[str, set[str]] = {t: set() for t in strong}
    for depth_index in range(1, len(levels)):
        for task_id in levels[depth_index]:
            strong[task_id].add(rng.choice(levels[depth_index - 1]))
    chain_links = tasks - len(levels[0])
    possible = sum(len(level) * sum(len(lv) for lv in levels[:i]) for i, level in enumerate(levels))
    if not chain_links <= dependencies <= possible:
        raise InvalidInstance(
            f"dependencies: {dependencies} not in [{chain_links}, {possible}] for this shape"
        )
    level_of = {t: i for i, level in enumerate(levels) for t in level}
    later = [t for t in strong if level_of[t] > 0]
    added = chain_links
    while added < dependencies:
        child = rng.choice(later)
        parent = rng.choice(levels[rng.randrange(level_of[child])])
        if parent in strong[child] or parent in weak[child]:
            continue
        (weak if rng.random() < weak_share else strong)[child].add(parent)
        added += 1
    kinds = list(_KIND_SECONDS)
    result: list[DagTask] = []
    for task_id in strong:
        kind = rng.choice(kinds)
        result.append(
            DagTask(
                id=task_id,
                depends_on=sorted(strong[task_id]),
                weak_depends_on=sorted(weak[task_id]),
                duration_s=round(_KIND_SECONDS[kind] * rng.uniform(0.5, 1.5), 1),
                kind=kind,
            )
        )
    return Dag(tasks=result)


def synthetic_runbook(
    dag: Dag, name: str = "synthetic-drain", time_scale: float = 1.0, as_activity: bool = False
) -> Runbook:
    """A runbook of ``delay`` tasks with the DAG's shape, for model-mode benchmarks.

    ``time_scale`` shrinks every duration (e.g. 0.001 turns minutes into tenths of
    a second) while keeping the shape of the schedule. With ``as_activity`` each
    task spends its time in an activity, as real work would, instead of a timer.
    """
    tasks: list[dict[str, Any]] = [
        {
            "id": t.id,
            "template": "delay",
            "description": f"stands for a {t.kind or 'generic'} task",
            "args": {"duration": t.duration_s * time_scale, "as_activity": as_activity},
            "depends_on": t.depends_on,
            "weak_depends_on": t.weak_depends_on,
            "expected_duration": t.duration_s * time_scale,
        }
        for t in dag.tasks
    ]
    return Runbook.model_validate({"name": name, "kind": "drill", "tasks": tasks})


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) with linear interpolation between order statistics."""
    if not values:
        raise InvalidInstance("values: need at least one value")
    if not 0.0 <= q <= 1.0:
        raise InvalidInstance(f"q: {q} is not within [0, 1]")
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class StuckVerdict(StrictModel):
    stuck: bool
    elapsed_s: float
    #: the time past which the task counts as stuck; None when nothing to compare with
    threshold_s: float | None
    basis: Literal["history", "expected", "none"]


def stuck_verdict(
    elapsed_s: float,
    history_s: Sequence[float],
    expected_s: float | None = None,
    *,
    min_history: int = 3,
    quantile: float = 0.75,
) -> StuckVerdict:
    """Whether a task running for ``elapsed_s`` is stuck.

    With at least ``min_history`` earlier durations the threshold is their
    ``quantile`` (p75, as Maelstrom); with fewer, the runbook's expected duration;
    with neither, a task is never called stuck.
    """
    if elapsed_s < 0:
        raise InvalidInstance("elapsed_s: cannot be negative")
    if len(history_s) >= min_history:
        threshold = percentile(history_s, quantile)
        return StuckVerdict(
            stuck=elapsed_s > threshold, elapsed_s=elapsed_s, threshold_s=threshold, basis="history"
        )
    if expected_s is not None:
        return StuckVerdict(
            stuck=elapsed_s > expected_s,
            elapsed_s=elapsed_s,
            threshold_s=expected_s,
            basis="expected",
        )
    return StuckVerdict(stuck=False, elapsed_s=elapsed_s, threshold_s=None, basis="none")
