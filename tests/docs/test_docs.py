"""The user documentation in docs/ names what the code has, so it cannot go stale silently."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import orchestrator.fleet.http as fleet_http
from benchmarks.__main__ import TABLE_END, TABLE_START
from orchestrator.models import API_VERSION
from orchestrator.runbook.spec import Task
from orchestrator.runbook.templates import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: string literals in the client that are fleet paths: "/topology", "/actions/config", "/v1/..."
_PATH_LITERAL = re.compile(r"""["'](/[a-z][a-z0-9_\-]*(?:/[a-z0-9_\-]+)*)["']""")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _fleet_paths() -> set[str]:
    """Every fleet path HttpFleet calls, as served: ``/v1/...``."""
    source = Path(fleet_http.__file__).read_text(encoding="utf-8")
    prefix = f"/{API_VERSION}"
    return {
        path if path.startswith(prefix + "/") else prefix + path
        for path in _PATH_LITERAL.findall(source)
    }


def _documentation_section(readme: str) -> str:
    start = readme.index("\n## Documentation\n")
    end = readme.find("\n## ", start + 1)
    return readme[start : end if end > 0 else None]


class TestDocsMatchTheCode:
    """Every Task field and template is in docs/runbooks.md, every fleet path HttpFleet calls
    is in docs/fleet-contract.md, and every link of the README's Documentation section
    points at a file that exists."""

    def test_every_task_field_is_documented(self) -> None:
        text = _read("runbooks.md")
        missing = [name for name in Task.model_fields if f"`{name}`" not in text]
        assert not missing, f"Task fields not in docs/runbooks.md: {missing}"

    def test_every_template_is_documented(self) -> None:
        text = _read("runbooks.md")
        missing = [name for name in REGISTRY.names() if f"`{name}`" not in text]
        assert not missing, f"templates not in docs/runbooks.md: {missing}"

    def test_every_fleet_path_is_documented(self) -> None:
        paths = _fleet_paths()
        # the extraction itself must find the client's paths, or this test proves nothing
        assert {"/v1/topology", "/v1/routing", "/v1/actions/service-weight"} <= paths
        text = _read("fleet-contract.md")
        missing = sorted(p for p in paths if f"`{p}`" not in text)
        assert not missing, f"fleet paths not in docs/fleet-contract.md: {missing}"

    def test_documentation_links_exist(self) -> None:
        section = _documentation_section((ROOT / "README.md").read_text(encoding="utf-8"))
        links = [
            target.split("#", 1)[0]
            for target in _LINK.findall(section)
            if not re.match(r"^[a-z]+:", target) and not target.startswith("#")
        ]
        assert len(links) >= 5, f"expected the five docs linked, found {links}"
        broken = [link for link in links if not (ROOT / link).is_file()]
        assert not broken, f"README Documentation links to missing files: {broken}"


class TestCliReference:
    """docs/cli.md's command table names every command of the CLI, and every command of each
    group."""

    def test_every_command_is_in_the_table(self) -> None:
        import typer
        from typer.core import TyperGroup

        from orchestrator.cli import app
        from orchestrator.commands.lazy import all_commands

        text = _read("cli.md")
        start = text.index("\n## Commands\n")
        end = text.find("\n## ", start + 1)
        table = text[start : end if end > 0 else None]
        rows = [line for line in table.splitlines() if line.startswith("| `orchestrator ")]
        missing = []
        for name, command in all_commands(typer.main.get_command(app)).items():
            mine = [r for r in rows if f"`orchestrator {name}" in r]
            if not mine:
                missing.append(name)
            subs = all_commands(command) if isinstance(command, TyperGroup) else {}
            for sub in subs:
                if not any(re.search(rf"\b{re.escape(sub)}\b", r) for r in mine):
                    missing.append(f"{name} {sub}")
        assert missing == []


class TestReadme:
    """The README's architecture is the import-linter layers contract, and docs/benchmarks.md
    shows the table `make bench` generated last."""

    def test_architecture_draws_the_enforced_layers_in_order(self) -> None:
        layers = _layers_contract()
        drawn = _drawn_modules((ROOT / "README.md").read_text(encoding="utf-8"))
        level = {module: i for i, layer in enumerate(layers) for module in layer}
        assert sorted(level) == sorted(m for m in drawn if m in level), "layers not drawn"
        order = [level[m] for m in drawn if m in level]
        assert order == sorted(order), f"drawn out of the contract's order: {drawn}"

    def test_benchmark_table_is_the_generated_one(self) -> None:
        text = _read("benchmarks.md")
        start = text.index(TABLE_START) + len(TABLE_START)
        table = text[start : text.index(TABLE_END)]
        generated = (ROOT / "benchmarks" / "results" / "summary.md").read_text(encoding="utf-8")
        assert table.strip() == generated.strip()


def _layers_contract() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers")
    return [[m.strip() for m in layer.split("|")] for layer in contract["layers"]]


def _drawn_modules(readme: str) -> list[str]:
    """The modules of the Architecture diagram, top to bottom: ``orchestrator/lab/ |
    promhealth/`` is ``orchestrator.lab``, ``orchestrator.promhealth`` (a line's first path
    names the package of the others); a line starting with spaces continues a description."""
    section = readme[readme.index("\n## Architecture\n") :]
    block = section[section.index("```\n") + 4 :]
    block = block[: block.index("```")]
    modules = []
    for line in block.splitlines():
        if not line or line[0].isspace():
            continue
        paths = re.split(r"\s*[|,]\s*", re.split(r"\s{2,}", line.strip())[0])
        names = [path.rstrip("/").removesuffix(".py") for path in paths]
        package = names[0].rpartition("/")[0]
        for name in names:
            if package and "/" not in name:
                name = f"{package}/{name}"
            modules.append(name.replace("/", "."))
    return modules
