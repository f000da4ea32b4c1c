"""The plugin's public name: ``-p gradeff.pytest_plugin``, ``pytest_plugins = ["gradeff.pytest_plugin"]`` and the
``pytest11`` entry point all name :mod:`gradeff.pytest.plugin`.

The module is that one, not a copy re-exporting its hooks: pytest registers a plugin once per module object, so a
second module holding the same hook functions would run every hook twice.
"""

import sys

from gradeff.pytest import plugin

sys.modules[__name__] = plugin
