"""Hypothesis strategies for bad input, shared by the fuzz tests and ``benchmarks/fuzz.py``.

Bad input is mostly *nearly* good input: a valid document with one to three
things wrong (a field dropped, a value of the wrong type or range, an unknown
key, a list emptied), because that is what reaches the deep validation code.
The rest is junk: random JSON, random bytes, random YAML, random CLI tokens.

``FUZZ_EXAMPLES`` (environment) sets how many examples each test draws; CI keeps
the default small so the whole fuzz suite stays well under a minute.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = [
    "CI",
    "CLI_VALUES",
    "JSON",
    "JUNK_BYTES",
    "SCALARS",
    "bodies",
    "cli_args",
    "command_table",
    "mutated",
    "paths_of",
]

#: examples per fuzz test in CI; ``benchmarks/fuzz.py`` draws >= 1,000 per boundary
CI_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))

CI = settings(
    max_examples=CI_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=os.environ.get("FUZZ_RANDOM") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

#: values that trip validators: wrong types, edges of ranges, non-finite floats, huge ints
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e-300, 1e300, 0.5, 1.0000001]),
    st.text(max_size=12),
    st.sampled_from(["", " ", "\x00", "\n", "a" * 300, "eu-west", "us-east", "1", "-1", "true"]),
)

JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=12,
)

#: raw request bodies that are not JSON documents at all, or only nearly
JUNK_BYTES = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"{", b"[", b"null", b"[]", b'{"a":', b"\xff\xfe", b'"x"', b"1e999"]),
)

_OPS = (
    "delete",
    "junk",
    "extra_key",
    "empty",
    "negate",
    "huge",
    "stringify",
    "wrap_list",
    "duplicate",
)


def paths_of(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into ``doc`` (dict keys and list indexes), the root included."""
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from paths_of(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from paths_of(value, (*prefix, index))


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _apply(doc: Any, path: tuple[Any, ...], op: str, junk: Any, key: str) -> Any:
    value = _get(doc, path)
    if op == "junk":
        new: Any = junk
    elif op == "empty":
        new = type(value)() if isinstance(value, dict | list | str) else None
    elif op == "negate":
        new = -value if isinstance(value, int | float) and not isinstance(value, bool) else -1
    elif op == "huge":
        new = 10**30 if isinstance(value, int) else 1e308
    elif op == "stringify":
        new = str(value) if not isinstance(value, str) else 12345
    elif op == "wrap_list":
        new = [value]
    elif op == "extra_key":
        new = {**value, key: junk} if isinstance(value, dict) else {key: value}
    elif op == "duplicate":
        new = [*value, *value] if isinstance(value, list) else value
    else:  # delete
        if not path:
            return junk
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
        return doc
    if not path:
        return new
    _get(doc, path[:-1])[path[-1]] = new
    return doc


@st.composite
def mutated(draw: st.DrawFn, valid: Any, max_mutations: int = 3) -> Any:
    """``valid`` with one to ``max_mutations`` targeted corruptions."""
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, max_mutations))):
        path = draw(st.sampled_from(list(paths_of(doc))))
        op = draw(st.sampled_from(_OPS))
        junk = draw(JSON)
        key = draw(st.sampled_from(["x", "extra", "__proto__", "", "id", "name"]))
        doc = _apply(doc, path, op, junk, key)
    return doc


def bodies(*valid: Any) -> st.SearchStrategy[Any]:
    """Nearly-valid documents (mostly) or random JSON, for a boundary taking ``valid``."""
    near = st.sampled_from(valid).flatmap(mutated)
    return st.one_of(near, near, near, JSON)


# --- CLI arguments ---------------------------------------------------------------------

#: tokens a confused operator (or a script with an unset variable) types
CLI_VALUES = st.one_of(
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "nan",
            "inf",
            "1e999",
            "abc",
            "--",
            "-",
            "eu-west",
            "mars",
            "x=y",
            "=y",
            "region",
            "10s",
            "5 x",
            "0 0 * * *",
            "* * *",
            "runbooks/region-drain.yaml",
            "runbooks/region-restore.yaml",
            "examples/rebalance/small.json",
            "/nonexistent/file.yaml",
            "pyproject.toml",
            "rps<=",
            "drill",
            "real",
            "99999999999999999999",
        ]
    ),
    st.text(max_size=10).filter(lambda t: "\x00" not in t),
)


def command_table(app: Any, skip: set[tuple[str, ...]]) -> dict[tuple[str, ...], list[str]]:
    """Every leaf command of a Typer app and its option names, minus ``skip``."""
    import typer.main
    from typer.core import TyperGroup

    from orchestrator.commands.lazy import all_commands

    table: dict[tuple[str, ...], list[str]] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        subs = all_commands(command) if isinstance(command, TyperGroup) else None
        if subs:
            for name, sub in subs.items():
                walk(sub, (*path, name))
        elif path not in skip:
            table[path] = [
                o for p in command.params for o in getattr(p, "opts", []) if o.startswith("-")
            ]

    walk(typer.main.get_command(app), ())
    return table


@st.composite
def cli_args(draw: st.DrawFn, table: dict[tuple[str, ...], list[str]]) -> list[str]:
    """A real command followed by a jumble of its own options, junk values and strays."""
    path = draw(st.sampled_from(sorted(table)))
    options = table[path] or ["--json"]
    token = st.one_of(
        st.sampled_from(options).flatmap(lambda o: st.tuples(st.just(o), CLI_VALUES)).map(list),
        st.sampled_from(options).map(lambda o: [o]),
        CLI_VALUES.map(lambda v: [v]),
        st.sampled_from(["--no-such-option", "--help", "-h", "--json=1"]).map(lambda v: [v]),
    )
    rest = draw(st.lists(token, max_size=5))
    return [*path, *(t for chunk in rest for t in chunk)]
