"""Shared fixtures. Plugin modules in tests/fixtures/ are listed here, one per concern."""

pytest_plugins: list[str] = [
    "tests.fixtures.temporal",
    "tests.fixtures.lab",
    "tests.fixtures.tiers",
    "tests.fixtures.ordering",
    "tests.fixtures.ports",
    "pytester",  # tests/platform/test_tiers.py runs pytest on small test files
]
