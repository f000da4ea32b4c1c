"""Inputs and figures of the device check's PEFT step (scripts/device-check.sh, step 4).

``device_peft_inputs.py OUT`` writes what the paper-profile ViT-S/16 cells start from: a checkpoint in timm's
layout (random weights, so the key-map path runs; not a pretrained model) and 512 training and 128 test images
of 10 classes at 224 px as an imagefolder (8 steps of 64 per epoch). ``--report RESULTS`` prints each cell's
live and allocator peaks against the paper profile's 2 GiB budget, the prediction its plan made, and its epoch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

MIB, BUDGET = 2**20, 2 * 2**30


def write_inputs(out: Path) -> None:
    import numpy as np
    import torch
    from PIL import Image
    from safetensors.torch import save_file

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    # Importable once the checkout's root is on sys.path (the line above).
    from gradeff.axes.models import build_model  # noqa: PLC0415
    from tests.axes.models.published import to_reference  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    state = to_reference("vit_s", build_model("vit_s", "paper").state_dict())
    save_file({key: tensor.contiguous() for key, tensor in state.items()}, out / "vit_s-timm.safetensors")
    rng = np.random.default_rng(0)
    for split, count in (("train", 512), ("test", 128)):
        for i in range(count):
            folder = out / "peft-images" / split / f"class{i % 10}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    print(f"{out}: vit_s-timm.safetensors and peft-images/ written")


def _mib(value) -> str:
    return "n/a" if value is None else f"{value / MIB:.1f} MiB"


def report(results: Path) -> None:
    for line in results.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        meters, plan = record.get("meters", {}), record.get("plan", {})
        live = meters.get("memory", {}).get("peak_bytes")
        alloc = meters.get("gpu", {}).get("alloc_peak_bytes")
        verdict = "n/a" if live is None else ("within" if live <= BUDGET else "over")
        weights = record.get("weights", {})
        print(f"{record['cell']:<34} {record['status']:<8} live peak {_mib(live)}, allocator {_mib(alloc)} "
              f"({verdict} the 2 GiB budget); plan predicted {_mib(plan.get('predicted_peak_bytes'))}; epoch "
              f"{[round(e['seconds'], 2) for e in record.get('epochs', [])]} s; weights {weights.get('format')}, "
              f"head {(weights.get('checkpoint') or {}).get('head')} {record.get('detail', '')[:120]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--report", type=Path, default=None, metavar="RESULTS")
    args = parser.parse_args()
    if args.report is not None:
        report(args.report)
    else:
        write_inputs(args.out)


if __name__ == "__main__":
    main()
