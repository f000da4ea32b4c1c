"""Shared fixtures of the test suite."""

import pytest

pytest_plugins = ["pytester"]

GRID_FILE = "benchmarks/test_grid.py"


@pytest.fixture
def grid_pytester(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> pytest.Pytester:
    """A pytester directory holding a copy of the benchmark grid module."""
    source = request.config.rootpath / GRID_FILE
    pytester.makepyfile(test_grid=source.read_text())
    return pytester
