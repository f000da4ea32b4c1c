"""Shared fixtures of the test suite."""

import pytest

pytest_plugins = ["pytester"]

GRID_FILES = ("benchmarks/test_grid.py", "benchmarks/test_peft_grid.py", "benchmarks/test_memory_grid.py",
              "benchmarks/test_baselines_grid.py")


@pytest.fixture
def grid_pytester(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> pytest.Pytester:
    """A pytester directory holding copies of the benchmark grid modules (every grid)."""
    for path in GRID_FILES:
        source = request.config.rootpath / path
        pytester.makepyfile(**{source.stem: source.read_text()})
    return pytester
