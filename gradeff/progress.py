"""Moved to :mod:`gradeff.pytest.progress`. This earlier name stays for existing imports and is that very module
(not a copy), so a patch through either name reaches the same code."""

import sys

from gradeff.pytest import progress

sys.modules[__name__] = progress
