"""Runbook lint: every reason a runbook must not start, each with file, line and task.

Checks (Maelstrom's continuous lint, §4.4, plus what this format adds): a file
over the size cap, YAML syntax and duplicate keys, schema and type errors
(durations beyond their maximum among them), duplicate task ids, dependencies on
unknown tasks or on themselves, cycles, unknown templates, bad template
arguments, references to undeclared parameters, required parameters a trigger or
nested run would leave unset, nested runbooks outside the runbooks directory or
that cycle or nest too deep, steps on a template that is not stepped, a mutating
drain task with no restore, and a restore that names a task the paired restore
runbook does not have (those two in :mod:`~orchestrator.runbook.restore_lint`).

:func:`load_runbook` is the only way the CLI and workflows obtain a runbook from
a file: it lints first and raises :class:`RunbookInvalid` on any finding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.exceptions import RunbookError
from orchestrator.runbook.findings import Finding, RunbookInvalid
from orchestrator.runbook.loader import (
    LineMap,
    Parsed,
    RunbookTooLarge,
    parse_text,
    read_text,
    resolve_runbook_ref,
    validation_findings,
)
from orchestrator.runbook.nesting import find_cycle, nesting_findings, nesting_problem
from orchestrator.runbook.params import bind, sample_value, substitute
from orchestrator.runbook.restore_lint import check_restores
from orchestrator.runbook.spec import Parameter, Runbook, Task
from orchestrator.runbook.templates import REGISTRY, TemplateRegistry
from orchestrator.runbook.types import PARAM_REF_RE, check_runbook_ref

__all__ = ["find_cycle", "lint_file", "lint_files", "lint_text", "load_runbook"]


def _strings_with_paths(value: Any, path: tuple[str | int, ...]) -> Iterator[tuple[Any, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings_with_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings_with_paths(item, (*path, index))


class _Samples(dict[str, Any]):
    def __missing__(self, key: str) -> Any:
        return "sample"


def _is_ref(ref: str) -> bool:
    try:
        check_runbook_ref(ref)
    except ValueError:
        return False
    return True


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


class _Linter:
    def __init__(self, parsed: Parsed, base_dir: Path | None, registry: TemplateRegistry) -> None:
        self.p = parsed
        self.base_dir = base_dir
        self.registry = registry
        self.data: dict[str, Any] = parsed.data or {}
        self.params: dict[str, Parameter] = parsed.parameters
        raw_params = self.data.get("parameters")
        self.param_names = {str(k) for k in raw_params} if isinstance(raw_params, dict) else set()
        self.samples = {n: sample_value(p) for n, p in self.params.items()}
        self.known_ids = {
            str(t["id"]) for t in parsed.raw_tasks if isinstance(t, dict) and "id" in t
        }
        self._runbook_cache: dict[Path, Parsed] = {}
        self._refs: dict[str, Parsed | RunbookError | None] = {}

    def run(self) -> None:
        self.check_ids()
        self.check_dependencies()
        self.check_parameter_refs()
        for index, task in self.p.tasks:
            self.check_template(index, task)
        self.check_restores()
        self.check_triggers()
        self.check_paired_restore_params()
        self.check_nesting()

    # --- graph -------------------------------------------------------------

    def check_ids(self) -> None:
        seen: dict[str, int] = {}
        for index, task in self.p.tasks:
            if task.id in seen:
                self.p.add(
                    ("tasks", index, "id"),
                    "duplicate-id",
                    f"duplicate task id {task.id!r} (first at tasks[{seen[task.id]}])",
                )
            else:
                seen[task.id] = index

    def check_dependencies(self) -> None:
        edges: dict[str, list[str]] = {}
        first_index: dict[str, int] = {}
        for index, task in self.p.tasks:
            first_index.setdefault(task.id, index)
            edges.setdefault(task.id, [])
            for field in ("depends_on", "weak_depends_on"):
                for pos, dep in enumerate(getattr(task, field)):
                    where = ("tasks", index, field, pos)
                    if dep == task.id:
                        self.p.add(where, "self-dependency", f"{field}: task depends on itself")
                    elif dep not in self.known_ids:
                        self.p.add(where, "unknown-dependency", f"{field}: no task {dep!r}")
                    else:
                        edges[task.id].append(dep)
            both = sorted(set(task.depends_on) & set(task.weak_depends_on))
            if both:
                self.p.add(
                    ("tasks", index, "weak_depends_on"),
                    "dependency-kind",
                    f"weak_depends_on: {', '.join(both)} also in depends_on; pick one kind",
                )
        cycle = find_cycle(edges)
        if cycle is not None:
            self.p.add(
                ("tasks", first_index[cycle[0]], "id"),
                "cycle",
                "dependency cycle: " + " -> ".join(cycle),
            )

    # --- parameters --------------------------------------------------------

    def check_parameter_refs(self) -> None:
        for section in ("tasks", "triggers"):
            raw = self.data.get(section)
            for path, text in _strings_with_paths(raw, (section,)):
                for name in PARAM_REF_RE.findall(text):
                    if name not in self.param_names:
                        self.p.add(
                            path,
                            "unknown-parameter",
                            f"{'.'.join(str(x) for x in path[2:]) or section}: "
                            f"reference to undeclared parameter {name!r}",
                        )

    def _sampled(self, value: Any) -> Any:
        # Undeclared references are reported on their own; here they just need a value.
        return substitute(value, _Samples(self.samples), self.params)

    # --- templates ---------------------------------------------------------

    def check_template(self, index: int, task: Task) -> None:
        tmpl = self.registry.get(task.template)
        if tmpl is None:
            self.p.add(
                ("tasks", index, "template"),
                "unknown-template",
                f"unknown template {task.template!r} (known: {', '.join(self.registry.names())})",
            )
            return
        args = self._sampled(task.args)
        try:
            tmpl.validate_args(args)
        except ValidationError as exc:
            validation_findings(self.p, exc, args, ("tasks", index, "args"), "bad-args")
        if not tmpl.stepped:
            for field in ("steps", "gates"):
                if getattr(task, field):
                    self.p.add(
                        ("tasks", index, field),
                        "not-stepped",
                        f"{field}: template {tmpl.name} does not run in steps",
                    )
        if (
            isinstance(task.timeout, float)
            and isinstance(task.expected_duration, float)
            and task.expected_duration > task.timeout
        ):
            self.p.add(
                ("tasks", index, "expected_duration"),
                "duration",
                f"expected_duration {task.expected_duration:g}s exceeds timeout {task.timeout:g}s",
            )
        if tmpl.name == "runbook":
            self.check_nested(index, task)

    def _load_other(self, ref: str) -> Parsed | None:
        """The runbook file ``ref`` names, parsed (an unreadable one carries the reason as
        its finding); None when there is no such file. Raises :class:`RunbookError` for a
        reference that leads out of the runbooks directory."""
        if self.base_dir is None:
            return None
        if ref not in self._refs:
            try:
                self._refs[ref] = self._read_other(ref, self.base_dir)
            except RunbookError as exc:
                self._refs[ref] = exc
        found = self._refs[ref]
        if isinstance(found, RunbookError):
            raise found
        return found

    def _read_other(self, ref: str, base_dir: Path) -> Parsed | None:
        path = resolve_runbook_ref(ref, base_dir)
        if path is None:
            return None
        if path not in self._runbook_cache:
            try:
                self._runbook_cache[path] = parse_text(read_text(path), str(path))
            except (OSError, UnicodeDecodeError, RunbookTooLarge) as exc:
                unread = Parsed(source=str(path), lines=LineMap())
                unread.add((), "io", f"cannot read: {_reason(exc)}")
                self._runbook_cache[path] = unread
        return self._runbook_cache[path]

    def check_nested(self, index: int, task: Task) -> None:
        ref = task.args.get("runbook")
        if not isinstance(ref, str) or PARAM_REF_RE.search(ref) or self.base_dir is None:
            return
        where = ("tasks", index, "args", "runbook")
        if ref == self.data.get("name") or not _is_ref(ref):
            return  # check_nesting names the cycle; the args' check, the bad reference
        try:
            other = self._load_other(ref)
        except RunbookError as exc:
            self.p.add(where, "nested-runbook", str(exc))
            return
        if other is None:
            self.p.add(where, "nested-runbook", f"no runbook file for {ref!r} in {self.base_dir}")
            return
        if other.runbook is None:
            first = other.findings[0].format() if other.findings else "no runbook"
            self.p.add(where, "nested-runbook", f"nested runbook {ref!r} is invalid: {first}")
            return
        given = task.args.get("parameters") or {}
        given = given if isinstance(given, dict) else {}
        missing = [n for n in other.runbook.required_parameters() if n not in given]
        unknown = [str(n) for n in given if n not in other.runbook.parameters]
        if missing:
            self.p.add(
                where,
                "missing-parameter",
                f"nested runbook {ref!r} requires parameter(s) {', '.join(missing)}",
            )
        if unknown:
            self.p.add(
                ("tasks", index, "args", "parameters"),
                "unknown-parameter",
                f"nested runbook {ref!r} has no parameter(s) {', '.join(unknown)}",
            )

    # --- restores ----------------------------------------------------------

    def check_restores(self) -> None:
        paired_ref = self.data.get("restore_runbook")
        if isinstance(paired_ref, str) and not _is_ref(paired_ref):
            paired_ref = None  # the schema check names the bad reference
        try:
            paired = self._load_other(paired_ref) if isinstance(paired_ref, str) else None
        except RunbookError as exc:
            self.p.add(("restore_runbook",), "restore-missing", f"restore_runbook: {exc}")
            paired_ref, paired = None, None
        if isinstance(paired_ref, str) and paired is None and self.base_dir is not None:
            self.p.add(
                ("restore_runbook",),
                "restore-missing",
                f"restore_runbook: no runbook file for {paired_ref!r} in {self.base_dir}",
            )
        check_restores(self.p, self.registry, self._sampled, paired_ref, paired)

    def check_paired_restore_params(self) -> None:
        paired_ref = self.data.get("restore_runbook")
        if not isinstance(paired_ref, str):
            return
        try:
            paired = self._load_other(paired_ref)
        except RunbookError:
            return  # check_restores reported it
        if paired is None or paired.runbook is None:
            return
        missing = [n for n in paired.runbook.required_parameters() if n not in self.param_names]
        if missing:
            self.p.add(
                ("restore_runbook",),
                "missing-parameter",
                f"restore runbook {paired_ref!r} requires parameter(s) {', '.join(missing)} "
                "this runbook does not declare",
            )

    # --- nesting -----------------------------------------------------------

    def _child(self, ref: str) -> Parsed | None:
        """A nested runbook for the graph; one that cannot be read is reported elsewhere."""
        if ref == self.data.get("name"):
            return self.p
        try:
            return self._load_other(ref)
        except RunbookError:
            return None

    def check_nesting(self) -> None:
        if self.base_dir is None:
            return
        for index, problem in nesting_findings(self.p, self._child):
            self.p.add(("tasks", index, "args", "runbook"), "nested-runbook", problem)

    # --- triggers ----------------------------------------------------------

    def check_triggers(self) -> None:
        runbook: Runbook | None = self.p.runbook
        if runbook is None:
            return
        for index, trigger in enumerate(runbook.triggers):
            where = ("triggers", index)
            unknown = [p for p in trigger.parameters if p not in runbook.parameters]
            if unknown:
                self.p.add(
                    (*where, "parameters"),
                    "unknown-parameter",
                    f"trigger {trigger.alertname}: no parameter(s) {', '.join(unknown)}",
                )
            unfilled = [p for p in runbook.required_parameters() if p not in trigger.parameters]
            if unfilled:
                self.p.add(
                    where,
                    "missing-parameter",
                    f"trigger {trigger.alertname} leaves required parameter(s) "
                    f"{', '.join(unfilled)} unset (map them from alert labels)",
                )


def lint_text(
    text: str,
    source: str = "<string>",
    *,
    base_dir: Path | None = None,
    registry: TemplateRegistry = REGISTRY,
) -> list[Finding]:
    """Every finding for a runbook text. ``base_dir`` locates paired and nested runbooks;
    without it those cross-file checks are skipped."""
    return _lint(text, source, base_dir, registry)[1]


def _lint(
    text: str, source: str, base_dir: Path | None, registry: TemplateRegistry
) -> tuple[Parsed, list[Finding]]:
    parsed = parse_text(text, source)
    if parsed.data is not None:
        try:
            _Linter(parsed, base_dir, registry).run()
        except RecursionError:
            parsed.add((), "schema", "runbook: structure nested too deeply")
    findings = sorted(parsed.findings, key=lambda f: (f.line, f.code, f.message))
    return parsed, findings


def lint_file(path: str | Path, *, registry: TemplateRegistry = REGISTRY) -> list[Finding]:
    """Every finding for the runbook file at ``path`` (an unreadable file is one finding)."""
    return _lint_path(Path(path), registry)[1]


def _lint_path(path: Path, registry: TemplateRegistry) -> tuple[Parsed | None, list[Finding]]:
    try:
        text = read_text(path)
    except RunbookTooLarge as exc:
        return None, [Finding(file=str(path), line=1, code="size", message=str(exc))]
    except (OSError, UnicodeDecodeError) as exc:
        message = f"cannot read: {_reason(exc)}"
        return None, [Finding(file=str(path), line=1, code="io", message=message)]
    return _lint(text, str(path), path.parent, registry)


def lint_files(paths: list[str | Path], *, registry: TemplateRegistry = REGISTRY) -> list[Finding]:
    return [f for path in paths for f in lint_file(path, registry=registry)]


def load_runbook(
    path: str | Path,
    params: Mapping[str, Any] | None = None,
    *,
    registry: TemplateRegistry = REGISTRY,
) -> Runbook:
    """The runbook in ``path``, only if it lints clean (else :class:`RunbookInvalid`).

    With ``params`` the runbook comes back bound (:func:`~orchestrator.runbook.params.bind`),
    which raises ``RunbookError`` for a missing, unknown or ill-typed parameter.
    """
    parsed, findings = _lint_path(Path(path), registry)
    if findings or parsed is None or parsed.runbook is None:
        raise RunbookInvalid(str(path), findings)
    return parsed.runbook if params is None else bind(parsed.runbook, params)


def nested_runbooks(
    runbook: Runbook, base_dir: Path, *, registry: TemplateRegistry = REGISTRY
) -> dict[str, Runbook]:
    """Every runbook ``runbook`` runs as a nested task, and their restore runbooks,
    transitively: by the reference the task gives, each linted and unbound.

    The starter of a run passes this as ``RunbookRunInput.nested`` so the workflow
    reads no files; an invalid nested runbook is :class:`RunbookInvalid` here, and
    nesting that cycles or goes deeper than ``MAX_NESTING_DEPTH`` a
    :class:`RunbookError`, so neither starts.
    """
    found: dict[str, Runbook] = {}
    edges: dict[str, list[str]] = {}

    def load(ref: str) -> Runbook:
        if ref == runbook.name:
            return runbook
        if ref not in found:
            path = resolve_runbook_ref(ref, base_dir)
            if path is None:
                raise RunbookError(f"nested runbook {ref!r}: no such file in {base_dir}")
            found[ref] = load_runbook(path, registry=registry)
        return found[ref]

    todo = [runbook]
    while todo:
        current = todo.pop()
        if current.name in edges:
            continue
        kids = []
        for task in current.tasks:
            if task.template == "runbook":
                kids.append(load(str(task.args["runbook"])))
                if kids[-1].restore_runbook:
                    kids.append(load(kids[-1].restore_runbook))
        edges[current.name] = [k.name for k in kids]
        todo.extend(kids)
    problem = nesting_problem(runbook.name, edges)
    if problem is not None:
        raise RunbookError(f"runbook {runbook.name}: {problem}")
    return found
