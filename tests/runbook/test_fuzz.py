"""Bad input never crashes lint: random text and random structures give findings."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.runbook import Finding, lint_text
from tests.runbook.helpers import runbook_text
from tests.runbook.test_lint import CLEAN

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYS = st.sampled_from(
    [
        "name",
        "kind",
        "tasks",
        "id",
        "template",
        "args",
        "depends_on",
        "weak_depends_on",
        "steps",
        "restore",
        "parameters",
        "triggers",
        "when",
        "gates",
        "restore_runbook",
        "x",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 10),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["drain", "traffic_shift", "${params.region}", "5 x 20%", "auto", "a"]),
)
STRUCTURES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(KEYS, children, max_size=5)
    ),
    max_leaves=25,
)


def check(findings: list[Finding]) -> None:
    for finding in findings:
        assert finding.line >= 1
        assert "\n" not in finding.format()


class TestNeverCrashes:
    """lint_text returns findings for anything; it never raises."""

    @FUZZ
    @given(st.text(max_size=300))
    def test_random_text(self, text: str) -> None:
        check(lint_text(text))

    @FUZZ
    @given(STRUCTURES)
    def test_random_structures(self, data: Any) -> None:
        text = yaml.safe_dump(data, allow_unicode=True)
        findings = lint_text(text)
        check(findings)
        assert findings, "a random structure is never a valid runbook"

    @FUZZ
    @given(st.integers(0, 400), st.text(max_size=8))
    def test_mutated_valid_runbook(self, position: int, insert: str) -> None:
        text = runbook_text(CLEAN)
        cut = position % (len(text) + 1)
        check(lint_text(text[:cut] + insert + text[cut:]))

    def test_hostile_yaml(self) -> None:
        laughs = "a: &a [x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
        nested_bomb = laughs + "tasks:\n  - id: t\n    template: delay\n    args: {d: *i}\n"
        cases = [
            laughs,
            nested_bomb,
            "name: !!python/object:os.system x\n",
            "when: 2024-13-45\n",
            "? [a, b]\n: c\n",
            "\t- tab",
            "a: " + "[" * 500 + "]" * 500,
        ]
        for text in cases:
            findings = lint_text(text)
            check(findings)
            assert findings
