"""Runbooks that run runbooks, as a graph: any cycle, and any chain deeper than allowed.

A run starts each ``runbook`` task's runbook as a child run, and on a rollback the
child's ``restore_runbook`` as another; so a runbook's children are the runbooks its
``runbook`` tasks name and their restore runbooks. A cycle (a runbook that reaches
itself, by name or by file) would start child runs until Temporal refuses the
workflow id; a chain deeper than :data:`MAX_NESTING_DEPTH` is refused as well, since
the workflow stops there. Lint and the starter of a run (``nested_runbooks``) both
ask :func:`nesting_problem`; the nodes are runbook names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from orchestrator.runbook.loader import Parsed
from orchestrator.runbook.spec import MAX_NESTING_DEPTH, Task
from orchestrator.runbook.types import PARAM_REF_RE

__all__ = ["find_cycle", "nested_refs", "nesting_findings", "nesting_problem"]


def find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None; ``edges`` maps a node to the nodes it
    points at (a task to its dependencies, a runbook to the runbooks it runs)."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(edges, white)
    for root in sorted(edges):
        if colour[root] != white:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(edges[root]))]
        colour[root] = grey
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = black
                stack.pop()
            elif child not in colour:
                continue
            elif colour[child] == grey:
                path = [n for n, _ in stack]
                return [*path[path.index(child) :], child]
            elif colour[child] == white:
                colour[child] = grey
                stack.append((child, iter(edges[child])))
    return None


def nested_refs(tasks: Iterable[Task]) -> list[str]:
    """The runbook each ``runbook`` task names, where it is known before binding
    (a ``${params.x}`` reference is left to the run)."""
    refs = []
    for task in tasks:
        ref = task.args.get("runbook") if task.template == "runbook" else None
        if isinstance(ref, str) and ref and not PARAM_REF_RE.search(ref):
            refs.append(ref)
    return refs


def _reachable(starts: Iterable[str], edges: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    todo = list(starts)
    while todo:
        node = todo.pop()
        if node in found:
            continue
        found[node] = list(edges.get(node, ()))
        todo.extend(found[node])
    return found


def _deepest(start: str, edges: Mapping[str, Sequence[str]]) -> list[str]:
    """The longest chain of runbooks from ``start`` in an acyclic ``edges``."""
    below: dict[str, list[str]] = {}
    stack = [start]
    while stack:
        node = stack[-1]
        pending = [c for c in edges.get(node, ()) if c not in below]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        chains = [below[c] for c in edges.get(node, ())]
        below[node] = [node, *max(chains, key=len, default=[])]
    return below[start]


def nesting_problem(
    root: str,
    edges: Mapping[str, Sequence[str]],
    starts: Sequence[str] | None = None,
    limit: int = MAX_NESTING_DEPTH,
) -> str | None:
    """Why running ``root`` would nest without end or too deep, or None.

    ``edges`` maps each runbook name to the names of the runbooks it runs as children;
    ``starts`` narrows the check to the children of one task of ``root`` (by default all
    of ``root``'s children).
    """
    first = list(edges.get(root, ())) if starts is None else list(starts)
    graph = _reachable([root], {**edges, root: first})
    cycle = find_cycle(graph)
    if cycle is not None:
        if root in cycle[:-1]:
            at = cycle.index(root)
            cycle = [*cycle[at:-1], *cycle[:at], root]
        if len(cycle) == 2:
            return f"runbook {cycle[0]!r} runs itself: {cycle[0]} -> {cycle[0]}"
        return "nested runbooks form a cycle: " + " -> ".join(cycle)
    deepest = max((_deepest(s, graph) for s in first), key=len, default=[])
    if len(deepest) > limit:
        return (
            f"nested runbooks {len(deepest)} levels deep, more than the limit of {limit}: "
            + " -> ".join([root, *deepest])
        )
    return None


def _key(parsed: Parsed) -> str:
    """A runbook's node: its name, so one file reached under several references
    (``x``, ``x.yaml``, ``./x.yaml``) is one runbook."""
    name = (parsed.data or {}).get("name")
    return name if isinstance(name, str) and name else parsed.source


def nesting_findings(root: Parsed, load: Callable[[str], Parsed | None]) -> list[tuple[int, str]]:
    """``(task index, problem)`` for each ``runbook`` task of ``root`` whose nested
    runbooks cycle or nest too deep; ``load`` reads a reference (None: unreadable, which
    lint reports on its own)."""

    def children(refs: list[str]) -> list[Parsed]:
        kids = []
        for ref in refs:
            child = load(ref)
            if child is None or child.data is None:
                continue
            kids.append(child)
            restore = child.data.get("restore_runbook")
            paired = load(restore) if isinstance(restore, str) else None
            if paired is not None and paired.data is not None:
                kids.append(paired)
        return kids

    edges: dict[str, list[str]] = {}
    todo = [root]
    while todo:
        parsed = todo.pop()
        if _key(parsed) in edges:
            continue
        kids = children(nested_refs(t for _, t in parsed.tasks))
        edges[_key(parsed)] = [_key(k) for k in kids]
        todo.extend(kids)
    found = []
    for index, task in root.tasks:
        refs = nested_refs([task])
        if refs:
            starts = [_key(k) for k in children(refs)]
            problem = nesting_problem(_key(root), edges, starts)
            if problem is not None:
                found.append((index, problem))
    return found
