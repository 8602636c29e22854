"""Every relative link in README.md, CONTRIBUTING.md and docs/*.md resolves: the file exists,
and a ``#anchor`` names a heading of the file it points at (GitHub's anchors)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(text: str) -> str:
    """The text without code: a link or heading inside a code block or span is not one."""
    return _FENCE.sub("", text)


def links(text: str) -> list[str]:
    return _LINK.findall(_INLINE_CODE.sub("", prose(text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated heading gets ``-1``, ``-2``... as on GitHub."""
    seen: Counter[str] = Counter()
    out = set()
    for heading in _HEADING.findall(prose(text)):
        base = slug(heading)
        out.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return out


def broken_links(page: Path) -> list[str]:
    """The links of ``page`` that do not resolve, each with the reason."""
    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if _SCHEME.match(target):
            continue  # http(s), mailto: not this test's business (no network in the fast tier)
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif (
            anchor
            and file.suffix == ".md"
            and anchor not in anchors(file.read_text(encoding="utf-8"))
        ):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    return broken


class TestTheCheckerItself:
    """The checker finds links and anchors the way GitHub renders them, or it proves nothing."""

    def test_slugs_as_github_makes_them(self) -> None:
        assert slug("Running it by hand") == "running-it-by-hand"
        assert slug("Versioning a workflow change") == "versioning-a-workflow-change"
        assert slug("`GET /v1/audit`: the log") == "get-v1audit-the-log"
        assert slug("CLI and configuration") == "cli-and-configuration"

    def test_repeated_headings_are_numbered(self) -> None:
        assert anchors("# A\n## B\n## B\n") == {"a", "b", "b-1"}

    def test_code_is_not_a_link_or_a_heading(self) -> None:
        text = "[a](a.md)\n```sh\n# not a heading\n[b](b.md)\n```\n`[c](c.md)` [d](d.md#x)\n"
        assert links(text) == ["a.md", "d.md#x"]
        assert anchors(text) == set()

    def test_a_broken_file_and_anchor_are_found(self, tmp_path: Path) -> None:
        (tmp_path / "other.md").write_text("# Title\n\n## Part one\n")
        page = tmp_path / "page.md"
        page.write_text(
            "# Page\n[ok](other.md#part-one) [self](#page) [web](https://example.com/x)\n"
            "[gone](missing.md) [bad](other.md#part-two) [badself](#nope)\n"
        )
        assert broken_links(page) == [
            "missing.md: no such file",
            "other.md#part-two: no heading #part-two in other.md",
            "#nope: no heading #nope in page.md",
        ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_every_doc_is_linked_from_the_readme() -> None:
    """A page under docs/ that the README does not link is one a newcomer never finds."""
    linked = {t.partition("#")[0] for t in links((ROOT / "README.md").read_text(encoding="utf-8"))}
    missing = [p.name for p in PAGES if p.parent.name == "docs" and f"docs/{p.name}" not in linked]
    assert missing == []
