"""The machine a run happened on: versions, device and CPU, recorded once per session."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from functools import cache
from pathlib import Path

__all__ = ["code_version", "environment"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def code_version() -> str:
    """``<version>+<hash>``: gradeff's version and the first 12 hex digits of a hash of its sources.

    Works without git (an installed copy, a tarball); two checkouts with the same code agree.
    """
    import gradeff

    package = Path(gradeff.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return f"{gradeff.__version__}+{digest.hexdigest()[:12]}"


@cache
def environment(device: str = "cpu") -> dict:
    """Versions of the stack, the device and the CPU, as a flat JSON-ready dict.

    Args:
        device: the device cells run on (``cpu`` or ``cuda[:N]``).
    """
    import torch
    import transformers

    info = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        # The instruction set torch's CPU kernels were dispatched for (AVX512, AVX2, ...): another one sums
        # in another order, so losses agree only to float tolerance, not to the last bits.
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "device_name": None,
        "gpu_driver": None,
        # Which GPU, when there is one: torch's index (relative to CUDA_VISIBLE_DEVICES) and the UUID,
        # which names the physical device whatever the numbering.
        "gpu_index": None,
        "gpu_uuid": None,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index
        info["gpu_index"] = index if index is not None else torch.cuda.current_device()
        info["device_name"] = torch.cuda.get_device_name(info["gpu_index"])
        from gradeff.meters._nvml import torch_device_uuid

        info["gpu_uuid"] = torch_device_uuid(info["gpu_index"], torch.cuda.get_device_properties)
        from gradeff.meters._nvml import close_nvml, load_nvml

        nvml = load_nvml()
        if nvml is not None:
            try:
                nvml.nvmlInit()
            except Exception:  # NVML is optional: the version stays unknown, not invented
                nvml = None
        if nvml is not None:
            try:
                info["gpu_driver"] = nvml.nvmlSystemGetDriverVersion()
            except Exception:  # noqa: BLE001 - as above
                pass
            finally:
                close_nvml(nvml)
    else:
        info["device_name"] = info["cpu"]
    return info
