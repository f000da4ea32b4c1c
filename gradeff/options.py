"""Moved to :mod:`gradeff.pytest.options`. This earlier name stays for existing imports and is that very module
(not a copy), so a patch through either name reaches the same code."""

import sys

from gradeff.pytest import options

sys.modules[__name__] = options
