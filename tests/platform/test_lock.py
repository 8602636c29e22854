"""What the project runs on is pinned: every dependency pyproject.toml declares has an exact
version in constraints.txt, and ``make install`` installed exactly that version."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    names = []
    for requirement in requirements:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        assert match is not None, requirement
        names.append(_normal(match.group()))
    return names


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, pinned = line.partition("==")
        assert sep and pinned, f"not an exact pin: {line!r}"
        pins[_normal(name)] = pinned.strip()
    return pins


class TestDependenciesArePinned:
    """constraints.txt pins each declared dependency exactly, and the venv matches it."""

    def test_every_declared_dependency_is_pinned(self) -> None:
        pins = _pins()
        assert [name for name in _declared() if name not in pins] == []

    def test_the_installed_versions_are_the_pinned_ones(self) -> None:
        pins = _pins()
        installed = {name: version(name) for name in _declared()}
        assert {n: v for n, v in installed.items() if v != pins[n]} == {}
