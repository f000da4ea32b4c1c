#!/usr/bin/env bash
# The GPU check, run blind once on an H100/H200-class GPU (under 13 minutes), its output pasted into a note:
#   1. the GPU-path tests (allocator peaks, NVML, energy, a step loop without host synchronisation, bf16 MFU);
#   2. a one-epoch `paper`-profile llm cell (Llama-3.2-1B shape) in bf16, standard and checkpoint, eager and then
#      compiled (inductor) with the fused AdamW kernel, printing GPU utilisation, MFU (side by side at the end),
#      the allocator's peak against the memory breakdown, and NVML energy;
#   3. the official Mamba kernels against gradeff's Vim-S and MambaVision-T (skipped, with the reason, unless
#      mamba-ssm is built and $GRADEFF_VIM_REPO / $GRADEFF_MAMBAVISION_REPO name the official checkouts);
#   4. the PEFT study at the paper profile on one backbone: ViT-S/16 from a timm-layout checkpoint (random
#      weights, through the key map) x five methods x three strategies, one short epoch (512 local images):
#      the dry run's predictions first, then each cell's live and allocator peaks against the 2 GiB budget.
# Usage: scripts/device-check.sh [OUTDIR]   (default: $OUT if set, else ./device-check)
# Python packages the machine lacks can be brought as wheels in .whl/; they are installed into a private
# folder, never into the system's Python.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-device-check}}
mkdir -p "$out"
exec > >(tee "$out/device-check.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gradeff-site \
        .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/gradeff-site:$PWD"
fi
started=$(date +%s)
step() { echo; echo "== $1 ($(( $(date +%s) - started )) s)"; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv
python3 -c 'import torch, transformers, peft, bitsandbytes, datasets; print("torch", torch.__version__, "cuda",
torch.version.cuda, "| transformers", transformers.__version__, "| peft", peft.__version__, "| bitsandbytes",
bitsandbytes.__version__, "| datasets", datasets.__version__, "| bf16", torch.cuda.is_bf16_supported())'

step "1. GPU-path tests"
timeout 240 python3 -m pytest tests/test_gpu_paths.py -s -q -p no:cacheprovider -W ignore::DeprecationWarning

step "2. paper-profile llm, bf16, one epoch: standard and checkpoint"
timeout 330 python3 -m pytest benchmarks/test_grid.py -q -p no:cacheprovider --benchmark-disable \
    --gradeff-profile paper --gradeff-precision bf16 --gradeff-epochs 1 --gradeff-device cuda \
    --gradeff-models llm --gradeff-optimizers adamw --gradeff-strategies standard,checkpoint \
    --gradeff-results "$out/paper-llm.jsonl"

step "2b. the same cells compiled (inductor) with the fused AdamW kernel"
timeout 330 python3 -m pytest benchmarks/test_grid.py -q -p no:cacheprovider --benchmark-disable \
    --gradeff-profile paper --gradeff-precision bf16 --gradeff-epochs 1 --gradeff-device cuda \
    --gradeff-models llm --gradeff-optimizers adamw --gradeff-strategies standard,checkpoint \
    --gradeff-compile inductor --gradeff-fused --gradeff-results "$out/paper-llm-compiled-fused.jsonl"

step "3. official Mamba kernels against gradeff's Vim-S and MambaVision-T"
timeout 300 python3 -m pytest tests/reference/test_mamba_equivalence.py -k cuda -q -s -rs -p no:cacheprovider

step "4. PEFT study, paper profile: ViT-S/16 x 5 methods x 3 strategies, one short epoch"
python3 scripts/device_peft_inputs.py "$out"
peft=(benchmarks/test_peft_grid.py -q -p no:cacheprovider --benchmark-disable --gradeff-profile paper
      --gradeff-device cuda --gradeff-epochs 1 --gradeff-models vit_s --gradeff-datasets cifar100
      --gradeff-data "cifar100=$out/peft-images" --gradeff-weights "vit_s=$out/vit_s-timm.safetensors"
      --gradeff-cache "$out/cache")
timeout 240 python3 -m pytest "${peft[@]}" --gradeff-dry-run
timeout 420 python3 -m pytest "${peft[@]}" --gradeff-results "$out/paper-peft.jsonl"
python3 scripts/device_peft_inputs.py "$out" --report "$out/paper-peft.jsonl"

step "figures"
python3 - "$out/paper-llm.jsonl" "$out/paper-llm-compiled-fused.jsonl" <<'EOF'
import json
import os
import sys

GIB = 2**30


def show(r, variant):
    m = r.get("meters", {})
    gpu, energy, compute, memory = m.get("gpu", {}), m.get("energy", {}), m.get("compute", {}), m.get("memory", {})
    plan, hparams = r.get("plan") or {}, r.get("hparams") or {}
    print(f"\n{r['cell']} [{variant}] [{r['status']}] {r.get('detail', '')[:200]}")
    print(f"  compile {plan.get('compile_backend')} ({plan.get('compile_seconds')} s), "
          f"optimizer kernel {hparams.get('optimizer_kernel')}")
    print(f"  device {gpu.get('device_name')}, epoch seconds {[round(e['seconds'], 2) for e in r.get('epochs', [])]}, "
          f"loss {[round(e['loss'], 4) for e in r.get('epochs', [])]}")
    print(f"  GPU utilisation mean {gpu.get('util_mean_percent')} %, max {gpu.get('util_max_percent')} %, "
          f"power {gpu.get('power_mean_w')} W, samples {gpu.get('samples')}")
    if compute:
        print(f"  model FLOPs/sample {compute['flops_per_sample']:.4g}, achieved "
              f"{(compute['achieved_flops_per_s'] or 0) / 1e12:.1f} TFLOP/s, peak {compute['peak_source']}, "
              f"MFU {compute['mfu']}")
    if memory:
        resident = memory["parameter_bytes"] + memory["gradient_bytes"] + memory["optimizer_state_bytes"]
        predicted = resident + memory["activation_bytes"]
        peak = memory.get("peak_bytes")
        print(f"  breakdown: params {memory['parameter_bytes'] / GIB:.2f} GiB, grads {memory['gradient_bytes'] / GIB:.2f}, "
              f"state {memory['optimizer_state_bytes'] / GIB:.2f}, activations {memory['activation_bytes'] / GIB:.2f}, "
              f"sum {predicted / GIB:.2f} GiB, live peak {peak / GIB if peak else None} GiB")
        alloc = gpu.get("alloc_peak_bytes")
        if alloc:
            print(f"  allocator peak {alloc / GIB:.2f} GiB (reserved {gpu['reserved_peak_bytes'] / GIB:.2f}): "
                  f"{alloc / peak if peak else None} x the live peak, {alloc / predicted:.3f} x the breakdown's sum")
    print(f"  energy {energy.get('joules')} J from {energy.get('source')}")
    return compute.get("mfu") if compute else None


mfu = {}
for path in sys.argv[1:]:
    variant = "compiled + fused" if "compiled" in path else "eager"
    for line in open(path) if os.path.exists(path) else []:
        record = json.loads(line)
        mfu[(variant, record["cell"])] = show(record, variant)
print("\nMFU side by side (one epoch, bf16):")
for cell in sorted({cell for _, cell in mfu}):
    print(f"  {cell}: eager {mfu.get(('eager', cell))}, compiled + fused {mfu.get(('compiled + fused', cell))}")
EOF
step "done"
