#!/usr/bin/env bash
# Create .venv and install gradeff with everything it needs, from scratch or on top of an existing venv.
# torch is installed first as the CPU build so no dependency can pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${GRADEFF_TORCH:-torch==2.13.0}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "$TORCH_SPEC"
.venv/bin/python -m pip install --quiet -e .
