#!/usr/bin/env bash
# The reference environment: gradeff beside timm, for the equivalence tests (tests/reference/) that build
# ViT-S/16 and TinyViT-21M with timm and compare their logits with gradeff's models loaded from the same state
# dict. timm imports torchvision, whose only wheels here are CUDA builds that do not load beside the CPU torch of
# .venv, so this is a venv of its own (.venv-reference): `pip install timm` brings torch and torchvision as one
# matching pair (a CUDA build, which runs on a CPU), then gradeff is installed on top of that torch.
# Usage: bash scripts/reference-env.sh [pytest args]   (default: run tests/reference)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${GRADEFF_REFERENCE_VENV:-.venv-reference}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet timm
"$VENV/bin/python" -m pip install --quiet -e .
"$VENV/bin/python" -m pytest tests/reference -p no:cacheprovider "${@:--q}"
