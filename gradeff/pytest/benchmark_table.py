"""pytest-benchmark's own table, left out of a session that runs gradeff cells unless the user asks for it.

pytest-benchmark prints a table of every timed test, about 200 columns wide, above gradeff's own summary: for a
cell it times the epochs, which the summary already shows (``s/epoch``) beside what the cell learned. So a session
that selected cells sets pytest-benchmark quiet, its own switch (``--benchmark-quiet``) that hides the table and
nothing else: ``--benchmark-json``, ``--benchmark-save`` and ``--benchmark-compare-fail`` work as before. Any of
pytest-benchmark's options about its report, given by the user, keeps the table.
"""

from __future__ import annotations

import os
import shlex

import pytest

__all__ = ["REPORT_OPTIONS", "asks_for_table", "quiet_benchmark_table"]

# pytest-benchmark's options that shape or ask for its table: one of them given, the table stays.
REPORT_OPTIONS = ("--benchmark-verbose", "--benchmark-columns", "--benchmark-sort", "--benchmark-group-by",
                  "--benchmark-histogram", "--benchmark-cprofile", "--benchmark-compare", "--benchmark-name",
                  "--benchmark-enable", "--benchmark-only")


def asks_for_table(args: list[str]) -> bool:
    """Whether ``args`` (a command line) give one of :data:`REPORT_OPTIONS` (``--benchmark-sort=mean`` too)."""
    return any(arg.split("=", 1)[0] in REPORT_OPTIONS for arg in args)


def _given(config: pytest.Config) -> list[str]:
    """Everything the user gave pytest: the command line, ``PYTEST_ADDOPTS`` and the ini file's ``addopts``."""
    return [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.getini("addopts")]


def quiet_benchmark_table(config: pytest.Config) -> bool:
    """Set pytest-benchmark quiet for this session unless the user asked for its table.

    Returns:
        Whether the table was switched off (``False`` without pytest-benchmark, or when asked for).
    """
    session = config.pluginmanager.get_plugin("pytest-benchmark")
    if session is None or not hasattr(session, "quiet") or asks_for_table(_given(config)):
        return False
    session.quiet = True
    return True
