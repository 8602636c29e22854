"""``promtool`` (Debian's prometheus package) as the judge of exposition text and rules."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

PROMTOOL = Path("/usr/bin/promtool")

__all__ = ["PROMTOOL", "check_config", "check_metrics", "check_rules", "test_rules"]


def _promtool(args: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.is_file():
        pytest.fail(f"{PROMTOOL} missing: run scripts/install-system-deps.sh", pytrace=False)
    return subprocess.run(
        [str(PROMTOOL), *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def check_metrics(text: str) -> str:
    """promtool's complaints about ``text`` ('' when it passes)."""
    done = _promtool(["check", "metrics"], text)
    return "" if done.returncode == 0 else (done.stdout + done.stderr or f"exit {done.returncode}")


def check_config(path: Path) -> str:
    """promtool's complaints about the prometheus.yml ``path`` and the rule files it loads
    ('' when they are valid)."""
    done = _promtool(["check", "config", str(path)])
    return "" if done.returncode == 0 else done.stdout + done.stderr


def check_rules(path: Path) -> str:
    """promtool's complaints about the rule file ``path`` ('' when it is valid)."""
    done = _promtool(["check", "rules", str(path)])
    return "" if done.returncode == 0 else done.stdout + done.stderr


def test_rules(files: list[Path]) -> str:
    """``promtool test rules`` over ``files``: '' when every case passes, else its output."""
    done = _promtool(["test", "rules", *map(str, files)])
    return "" if done.returncode == 0 else done.stdout + done.stderr


test_rules.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test
