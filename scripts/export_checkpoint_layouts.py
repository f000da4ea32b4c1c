"""Export the key/shape lists of the published backbones' state dicts, the fixtures of gradeff's key-map tests.

Run in the reference environment (scripts/reference-env.sh builds it; `pip install einops` there for the two
Mamba repositories), with checkouts of the official Vim and MambaVision repositories:

    .venv-reference/bin/python scripts/export_checkpoint_layouts.py \
        --vim PATH/TO/hustvl/Vim --vim-commit SHA --mambavision PATH/TO/NVlabs/MambaVision --mambavision-commit SHA

Each model is built by its own code, on the CPU with random weights, and its ``state_dict()`` keys and shapes are
written to tests/fixtures/checkpoints/<model>.json: timm's ``vit_small_patch16_224.augreg_in21k_ft_in1k`` and
``tiny_vit_21m_224.dist_in22k_ft_in1k`` (the tags of the hub checkpoints, whose head has 1000 classes), Vim's
``vim_small_patch16_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2`` (the model of
``hustvl/Vim-small-midclstok``) and MambaVision's ``mamba_vision_T`` (``nvidia/MambaVision-T-1K``). The two Mamba
repositories import CUDA extensions at module level (``selective_scan_cuda``, ``causal_conv1d_cuda``) that are
only called in ``forward``: they are replaced by empty modules, so every module that builds the parameters is the
official code. Vim's bundled mamba_ssm also imports two output classes that transformers 5 renamed; they are
aliased to their new name.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "checkpoints"


def _write(model: str, reference: str, module, *, how: str) -> None:
    state = module.state_dict()
    payload = {
        "model": model,
        "reference": reference,
        "produced_by": f"scripts/export_checkpoint_layouts.py: {how}",
        "parameters": sum(p.numel() for p in module.parameters()),
        "keys": {key: list(tensor.shape) for key, tensor in state.items()},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{model}.json"
    # One key per line: a reviewer reads a diff of the fixture as a diff of the layout.
    keys = payload.pop("keys")
    head = json.dumps(payload, indent=1)[:-2]
    body = ",\n".join(f"  {json.dumps(key)}: {json.dumps(shape)}" for key, shape in keys.items())
    path.write_text(f'{head},\n "keys": {{\n{body}\n }}\n}}\n', encoding="utf-8")
    print(f"{path}: {len(state)} keys, {sum(p.numel() for p in module.parameters()):,} parameters")


def export_timm() -> None:
    import timm  # noqa: PLC0415 - the reference environment's only (it pulls torchvision)

    for model, name in (("vit_s", "vit_small_patch16_224.augreg_in21k_ft_in1k"),
                        ("tinyvit", "tiny_vit_21m_224.dist_in22k_ft_in1k")):
        module = timm.create_model(name, pretrained=False)
        _write(model, f"timm {timm.__version__} {name}", module, how=f"timm.create_model({name!r}, pretrained=False)")


def _official_imports(vim: Path | None, mambavision: Path | None) -> None:
    for name in ("selective_scan_cuda", "causal_conv1d_cuda"):
        sys.modules.setdefault(name, types.ModuleType(name))
    import transformers.generation as generation

    for old in ("GreedySearchDecoderOnlyOutput", "SampleDecoderOnlyOutput"):
        if not hasattr(generation, old):
            setattr(generation, old, generation.GenerateDecoderOnlyOutput)
    paths = []
    if vim is not None:
        paths += [vim / "vim", vim / "mamba-1p1p1", vim / "causal-conv1d"]
    if mambavision is not None:
        paths.append(mambavision)
        if vim is None:
            raise SystemExit("--mambavision needs --vim too: its mamba_ssm import is served by Vim's bundled copy")
    sys.path[:0] = [str(p) for p in paths]


def export_vim(vim: Path, commit: str) -> None:
    import models_mamba  # noqa: PLC0415 - importable once _official_imports has put its repository on sys.path

    name = "vim_small_patch16_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2"
    module = getattr(models_mamba, name)()
    _write("vim_s", f"hustvl/Vim@{commit} vim/models_mamba.py {name}", module,
           how=f"models_mamba.{name}() with the CUDA extensions stubbed")


def export_mambavision(commit: str) -> None:
    from mambavision.models import mamba_vision  # noqa: PLC0415 - importable once _official_imports has run

    module = mamba_vision.mamba_vision_T()
    _write("mambavision_t", f"NVlabs/MambaVision@{commit} mambavision/models/mamba_vision.py mamba_vision_T", module,
           how="mamba_vision.mamba_vision_T() with the CUDA extensions stubbed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vim", type=Path, help="a checkout of github.com/hustvl/Vim")
    parser.add_argument("--vim-commit", default="unknown")
    parser.add_argument("--mambavision", type=Path, help="a checkout of github.com/NVlabs/MambaVision")
    parser.add_argument("--mambavision-commit", default="unknown")
    args = parser.parse_args()
    export_timm()
    _official_imports(args.vim, args.mambavision)
    if args.vim is not None:
        export_vim(args.vim, args.vim_commit)
    if args.mambavision is not None:
        export_mambavision(args.mambavision_commit)


if __name__ == "__main__":
    main()
