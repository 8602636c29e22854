"""YAML text to runbook models, remembering the line of every key and list item.

Parsing never raises on bad input: YAML errors, duplicate keys and schema errors
all become :class:`Finding` s with the line they concern, so lint can report
everything at once and a hostile file cannot crash the CLI.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.exceptions import RunbookError
from orchestrator.runbook.findings import Finding
from orchestrator.runbook.spec import Parameter, Runbook, Task
from orchestrator.runbook.types import PARAM_REF_PATTERN, check_runbook_ref

__all__ = [
    "MAX_RUNBOOK_BYTES",
    "LineMap",
    "Parsed",
    "RunbookTooLarge",
    "parse_text",
    "read_text",
    "resolve_runbook_ref",
]

Path_ = tuple[str | int, ...]
#: The largest runbook text read or parsed. Shipped runbooks are under 8 KiB, and parsing
#: costs about a hundred times the text in time and memory (a 10 MiB file took 23 s and
#: 723 MB to lint), so a runbook past this is refused before its YAML is read.
MAX_RUNBOOK_BYTES = 256 * 1024
#: Enough for any real runbook; bounds the walk over alias-heavy ("billion laughs") input.
_MAX_NODES = 200_000
_MAX_DEPTH = 200


class LineMap:
    """The 1-based line of each data path (``("tasks", 2, "args", "ratio")``) in a YAML text."""

    def __init__(self) -> None:
        self._lines: dict[Path_, int] = {(): 1}

    def set(self, path: Path_, line: int) -> None:
        self._lines.setdefault(path, line)

    def line(self, path: Sequence[str | int]) -> int:
        """The line of ``path``, or of its nearest ancestor that has one."""
        key = tuple(path)
        while key not in self._lines:
            key = key[:-1]
        return self._lines[key]


@dataclass
class Parsed:
    """What parsing a runbook text produced; fields are None where parsing stopped."""

    source: str
    lines: LineMap
    findings: list[Finding] = field(default_factory=list)
    data: dict[str, Any] | None = None
    runbook: Runbook | None = None
    #: every task that validates on its own, with its index in the file
    tasks: list[tuple[int, Task]] = field(default_factory=list)
    #: every parameter that validates on its own
    parameters: dict[str, Parameter] = field(default_factory=dict)

    def task_label(self, index: int) -> str:
        raw = self.raw_tasks[index] if index < len(self.raw_tasks) else None
        if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"]:
            return str(raw["id"])
        return f"tasks[{index}]"

    @property
    def raw_tasks(self) -> list[Any]:
        tasks = (self.data or {}).get("tasks")
        return tasks if isinstance(tasks, list) else []

    def add(self, path: Sequence[str | int], code: str, message: str) -> None:
        task = None
        if len(path) >= 2 and path[0] == "tasks" and isinstance(path[1], int):
            task = self.task_label(path[1])
        self.findings.append(
            Finding(
                file=self.source, line=self.lines.line(path), task=task, code=code, message=message
            )
        )


def _walk(node: yaml.Node, path: Path_, parsed: Parsed, budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0 or len(path) > _MAX_DEPTH:
        return
    if isinstance(node, yaml.MappingNode):
        seen: set[Any] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = key_node.value
            line = key_node.start_mark.line + 1
            parsed.lines.set((*path, key), line)
            if key in seen:
                parsed.lines.set((*path, key, "#dup"), line)
                parsed.add(
                    (*path, key, "#dup"),
                    "yaml",
                    f"duplicate key {key!r} (the later one would silently win)",
                )
            seen.add(key)
            _walk(value_node, (*path, key), parsed, budget)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            parsed.lines.set((*path, index), item.start_mark.line + 1)
            _walk(item, (*path, index), parsed, budget)


def _too_big(data: Any, limit: int) -> bool:
    """Whether ``data`` expands (aliases followed) past ``limit`` values or nests too deep."""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > limit or depth > _MAX_DEPTH:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def _yaml_finding(source: str, exc: Exception) -> Finding:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0] or type(exc).__name__
    return Finding(file=source, line=line, task=None, code="yaml", message=f"YAML: {problem}")


def _clean_loc(loc: Sequence[str | int], data: Any, error_type: str) -> Path_:
    """The part of a pydantic error location that indexes into the data (drops union tags)."""
    path: list[str | int] = []
    current = data
    for position, part in enumerate(loc):
        indexes_dict = isinstance(current, dict) and part in current
        indexes_list = (
            isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        )
        if indexes_dict or indexes_list:
            current = current[part]
        else:
            if error_type == "missing" and position == len(loc) - 1:
                path.append(part)  # a missing key: still worth naming
            break
        path.append(part)
    return tuple(path)


def _message(error: Any) -> str:
    text = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def _is_ref_alternative(error: Any) -> bool:
    ctx = error.get("ctx") or {}
    return bool(
        error["type"] == "string_pattern_mismatch" and ctx.get("pattern") == PARAM_REF_PATTERN
    )


def validation_findings(
    parsed: Parsed, exc: ValidationError, data: Any, prefix: Path_ = (), code: str = "schema"
) -> None:
    """Add one finding per field of ``exc`` (a union's alternatives joined into one line)."""
    by_path: dict[Path_, list[str]] = {}
    errors = exc.errors()
    for error in errors:
        if _is_ref_alternative(error) and any(
            e["loc"][:-1] == error["loc"][:-1] and not _is_ref_alternative(e) for e in errors
        ):
            continue  # "not a ${params.x} reference" only adds noise next to the real reason
        path = (*prefix, *_clean_loc(error["loc"], data, error["type"]))
        messages = by_path.setdefault(path, [])
        message = _message(error)
        if message not in messages:
            messages.append(message)
    for path, messages in by_path.items():
        shown_path = path[2:] if len(path) > 2 and path[0] == "tasks" else path
        where = ".".join(str(p) for p in shown_path) or "runbook"
        shown = "; or ".join(messages[:3])
        parsed.add(path, code, f"{where}: {shown}")


class RunbookTooLarge(ValueError):
    """A runbook text past :data:`MAX_RUNBOOK_BYTES`; the message gives its size."""

    def __init__(self, size: int | None) -> None:
        shown = f"{size / 1024:.0f} KiB" if size is not None else "larger than that"
        super().__init__(
            f"runbook is {shown}; a runbook may be at most {MAX_RUNBOOK_BYTES // 1024} KiB"
        )


def parse_text(text: str, source: str = "<string>") -> Parsed:
    """Parse ``text`` into a :class:`Parsed`; problems become findings, never exceptions."""
    parsed = Parsed(source=source, lines=LineMap())
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_RUNBOOK_BYTES:
        parsed.findings.append(
            Finding(file=source, line=1, code="size", message=str(RunbookTooLarge(size)))
        )
        return parsed
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        parsed.findings.append(_yaml_finding(source, exc))
        return parsed
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # SafeConstructor raises these for e.g. impossible dates or unhashable keys.
        parsed.findings.append(_yaml_finding(source, exc))
        return parsed
    if _too_big(data, _MAX_NODES):
        parsed.findings.append(
            Finding(
                file=source,
                line=1,
                code="yaml",
                message=f"YAML: document expands past {_MAX_NODES} values (alias bomb?)",
            )
        )
        return parsed
    if isinstance(data, dict):
        parsed.data = data  # lets findings found while walking name their task
    if node is not None:
        _walk(node, (), parsed, [_MAX_NODES])
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        parsed.add((), "schema", f"a runbook is a mapping with name, kind and tasks (got {kind})")
        return parsed
    parsed.data = data
    try:
        parsed.runbook = Runbook.model_validate(data)
    except ValidationError as exc:
        validation_findings(parsed, exc, data)
    except RecursionError:
        parsed.add((), "schema", "runbook: structure nested too deeply")
        return parsed
    if parsed.runbook is not None:
        parsed.tasks = list(enumerate(parsed.runbook.tasks))
        parsed.parameters = dict(parsed.runbook.parameters)
        return parsed
    # Keep the parts that are valid so lint can still check the graph around a typo.
    for index, raw in enumerate(parsed.raw_tasks):
        with contextlib.suppress(ValidationError, RecursionError):
            parsed.tasks.append((index, Task.model_validate(raw)))
    raw_params = data.get("parameters")
    if isinstance(raw_params, dict):
        for name, raw in raw_params.items():
            with contextlib.suppress(ValidationError, RecursionError):
                parsed.parameters[str(name)] = Parameter.model_validate(raw)
    return parsed


def read_text(path: Path) -> str:
    """The file's text, read no further than :data:`MAX_RUNBOOK_BYTES` (and one byte).

    Raises ``OSError``, ``UnicodeDecodeError`` or :class:`RunbookTooLarge` for the caller
    to report.
    """
    with path.open("rb") as handle:
        data = handle.read(MAX_RUNBOOK_BYTES + 1)
        if len(data) > MAX_RUNBOOK_BYTES:
            size = os.fstat(handle.fileno()).st_size
            raise RunbookTooLarge(size if size > MAX_RUNBOOK_BYTES else None)
    return data.decode("utf-8")


def resolve_runbook_ref(ref: str, base_dir: Path) -> Path | None:
    """The file a runbook reference names, inside ``base_dir``: a path relative to it, or a
    bare name looked up as ``NAME.yaml``/``NAME.yml`` there. None when there is no such file.

    Raises :class:`RunbookError` for a reference that would read a file outside
    ``base_dir``: an absolute path, a ``..``, or a symlink that leads out.
    """
    try:
        check_runbook_ref(ref)
    except ValueError as exc:
        raise RunbookError(f"runbook {exc}") from None
    candidates = (
        [base_dir / ref]
        if ref.endswith((".yaml", ".yml"))
        else [base_dir / f"{ref}.yaml", base_dir / f"{ref}.yml"]
    )
    root = base_dir.resolve()
    for candidate in candidates:
        if candidate.is_file():
            real = candidate.resolve()
            if not real.is_relative_to(root):
                raise RunbookError(f"runbook {ref!r} leads out of {root} (a symlink?)")
            return real
    return None
