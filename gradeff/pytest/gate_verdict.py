"""The gate's one-line verdict, printed after everything else a gated session prints.

pytest ends a session on its own count (``24 passed in 231 s``), after every plugin's terminal summary; a gated
session that failed on regressions would end on that line and exit 1. So the verdict line is written by a wrapper
around pytest's end of session, outside the terminal reporter's: it follows pytest's count and is the last line.
"""

from __future__ import annotations

import pytest

__all__ = ["HEADLINE", "LastWord"]

# The gate's verdict line and whether it failed, set at the end of a gated session (gradeff.gate.compare.headline).
HEADLINE = pytest.StashKey[tuple[str, bool]]()


class LastWord:
    """A plugin that prints the gate's verdict line after pytest's own last line."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus):
        result = yield
        found = self.config.stash.get(HEADLINE, None)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if found is not None and reporter is not None:
            line, failed = found
            reporter.write_line(line, red=failed, green=not failed, bold=True)
        return result
