#!/usr/bin/env bash
# Create .venv and install gradeff with everything it needs, from scratch or on top of an existing venv.
# torch is installed first, as the CPU build: it is found on this machine's disk through pip's find-links
# (configuration or $PIP_FIND_LINKS), and with torch already satisfied no dependency can pull a multi-GB
# CUDA build.
# Everything goes through uv when it can be installed: it unpacks and compiles bytecode in parallel (torch in
# about 13 s where pip took 35; the other ~70 packages in about 10 s, 28 s with their bytecode; the same
# versions). pip is the fallback.
# Bytecode: where PYTHONDONTWRITEBYTECODE is set, Python caches no .pyc of its own, so what is not compiled
# here is compiled again by every process that imports it. torch always is (every process imports it). The
# rest (transformers, peft, scipy, ...: about 18 s more) only with GRADEFF_BYTECODE=all, which pays off for
# the test suite's hundreds of subprocesses (.ci/run sets it) and not for a grid run's three processes
# (about 5 s more import each).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${GRADEFF_TORCH:-torch==2.13.0}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
if .venv/bin/python -m pip install --quiet uv; then
    # uv reads no pip configuration: the local wheel folders pip would search are passed on.
    links="${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}"
    find_links=()
    for link in $links; do
        find_links+=(--find-links "$link")
    done
    rest=()
    if [ "${GRADEFF_BYTECODE:-}" = all ]; then
        rest=(--compile-bytecode)
    fi
    .venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python "${find_links[@]}" "$TORCH_SPEC"
    .venv/bin/uv pip install --quiet "${rest[@]}" --python .venv/bin/python -e ".[dev]"
else
    echo "setup: uv could not be installed; installing with pip" >&2
    .venv/bin/python -m pip install --quiet "$TORCH_SPEC"
    .venv/bin/python -m pip install --quiet -e ".[dev]"
fi
