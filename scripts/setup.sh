#!/usr/bin/env bash
# Create .venv and install gradeff with everything it needs, from scratch or on top of an existing venv.
# torch is installed first, by pip, as the CPU build: pip finds that wheel on this machine's disk (pip's
# find-links), and with torch already satisfied no dependency can pull a multi-GB CUDA build.
# The other ~70 packages go through uv when it can be installed: it downloads and unpacks them in parallel
# (about 15 s where pip takes about a minute, the same versions); pip is the fallback.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${GRADEFF_TORCH:-torch==2.13.0}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet "$TORCH_SPEC"
if .venv/bin/python -m pip install --quiet uv; then
    .venv/bin/uv pip install --quiet --python .venv/bin/python -e ".[dev]"
else
    echo "setup: uv could not be installed; installing with pip" >&2
    .venv/bin/python -m pip install --quiet -e ".[dev]"
fi
