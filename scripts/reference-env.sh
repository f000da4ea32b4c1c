#!/usr/bin/env bash
# The reference environment: gradeff beside timm, for the equivalence tests (tests/reference/) that build
# ViT-S/16 and TinyViT-21M with timm (and Vim-S and MambaVision-T with their official code, where
# $GRADEFF_VIM_REPO and $GRADEFF_MAMBAVISION_REPO name checkouts of github.com/hustvl/Vim and
# github.com/NVlabs/MambaVision) and compare their logits with gradeff's models loaded from the same state dict.
# timm imports torchvision, whose only wheels here are CUDA builds that do not load beside the CPU torch of .venv,
# so this is a venv of its own (.venv-reference): `pip install timm` brings torch and torchvision as one matching
# pair (a CUDA build, ~3 GB, which runs on a CPU), then gradeff is installed on top of that torch. einops is
# what the official Mamba code imports besides timm.
# Usage: bash scripts/reference-env.sh [pytest args]   (default: -q -s, the figures printed)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV="${GRADEFF_REFERENCE_VENV:-.venv-reference}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet timm einops
"$VENV/bin/python" -m pip install --quiet -e .
if [ $# -eq 0 ]; then
    set -- -q -s
fi
"$VENV/bin/python" -m pytest tests/reference -p no:cacheprovider -rs "$@"
