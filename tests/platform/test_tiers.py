"""The two test tiers: a test is in the server tier by the fixtures it uses, and one
that starts a server without saying so fails instead of slipping into the fast tier."""

from __future__ import annotations

import pytest

CONFTEST = """
import pytest

pytest_plugins = ["tests.fixtures.tiers"]


@pytest.fixture
def dev_env():
    yield "a Temporal server would start here"


@pytest.fixture
def through_another(dev_env):
    yield dev_env
"""

TESTS = """
import socket
import subprocess

import pytest


def test_on_dev_env(dev_env):
    pass


def test_through_another_fixture(through_another):
    pass


def test_pure():
    pass


def test_spawns_a_process():
    subprocess.run(["true"], check=True)


def test_listens():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()


@pytest.mark.server
def test_declared():
    subprocess.run(["true"], check=True)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_tiers_sample=TESTS)
    return pytester


def _selected(pytester: pytest.Pytester, marker: str) -> set[str]:
    result = pytester.runpytest("-p", "no:cacheprovider", "-m", marker, "--collect-only", "-q")
    return {line.split("::")[-1] for line in result.outlines if "::" in line}


class TestMarkedByFixture:
    """A test using a server fixture, directly or through another fixture, is in the
    server tier; `-m "not server"` (make test-fast) leaves it out."""

    def test_server_tier(self, suite: pytest.Pytester) -> None:
        assert _selected(suite, "server") == {
            "test_on_dev_env",
            "test_through_another_fixture",
            "test_declared",
        }

    def test_fast_tier(self, suite: pytest.Pytester) -> None:
        assert _selected(suite, "not server") == {
            "test_pure",
            "test_spawns_a_process",
            "test_listens",
        }


# This test's own sample runs a process: a fast-tier test's guard would refuse it.
@pytest.mark.server
class TestUndeclaredServersFail:
    """A test outside the server tier that starts a process or listens on a socket fails,
    naming what it did and how to declare it; a declared one runs."""

    def test_outcomes(self, suite: pytest.Pytester) -> None:
        result = suite.runpytest("-p", "no:cacheprovider", "-k", "spawns or listens or declared")
        result.assert_outcomes(passed=1, failed=2)
        result.stdout.fnmatch_lines(["*starts a process*belongs in the server tier*"])
        result.stdout.fnmatch_lines(["*listens on*belongs in the server tier*"])
