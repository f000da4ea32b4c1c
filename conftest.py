"""Root conftest of the checkout.

The gradeff plugin is not loaded here: its ``pytest11`` entry point loads it in every session of an
environment gradeff is installed in (``bash scripts/setup.sh`` installs this checkout). A checkout run
without that install gets one clear line instead of a screen of "unknown option" errors.
"""

from importlib.metadata import entry_points

import pytest


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("gradeff.pytest_plugin"):
        installed = any(point.name == "gradeff.pytest_plugin" for point in entry_points(group="pytest11"))
        reason = ("plugin autoloading is off (PYTEST_DISABLE_PLUGIN_AUTOLOAD or --disable-plugin-autoload)"
                  if installed else "gradeff is not installed in this Python environment")
        raise pytest.UsageError(f"the gradeff pytest plugin is not loaded: {reason}; run `bash scripts/setup.sh` "
                                f"and .venv/bin/python, or pass -p gradeff.pytest_plugin")
