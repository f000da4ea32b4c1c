"""The machine a run happened on: versions, device and CPU, recorded once per session, and the numerics probe of the
kernels a cell runs with (:mod:`gradeff.cell.probe`), once per thread count."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from functools import cache
from pathlib import Path

import gradeff
from gradeff.cell.probe import numerics_probe

__all__ = ["code_version", "environment"]


def _cpuinfo() -> dict[str, str]:
    """The first processor's ``key: value`` lines of ``/proc/cpuinfo`` (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor's block ends at the first blank line
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _cpu_model() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


# Variables that choose which kernels run, hence how their float sums are ordered: ATen's instruction set (also
# recorded as cpu_capability), MKL's and oneDNN's, and MKL's conditional numerical reproducibility.
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA",
                    "DNNL_MAX_CPU_ISA")


def _kernel_env() -> str | None:
    """``MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41``: the kernel-choosing variables set (``None``)."""
    found = [f"{name}={os.environ[name]}" for name in KERNEL_VARIABLES if os.environ.get(name)]
    return " ".join(found) or None


def _cpu_id() -> str | None:
    """``GenuineIntel family 6 model 207 stepping 2``: a virtual machine may show two CPU generations under one
    model name ("Intel(R) Xeon(R) Processor"), whose kernels need not sum in the same order."""
    info = _cpuinfo()
    parts = [info.get("vendor_id")] + [f"{key} {info[key]}" for key in ("cpu family", "model", "stepping")
                                       if key in info]
    return " ".join(p for p in parts if p).replace("cpu family", "family") or None


@cache
def code_version() -> str:
    """``<version>+<hash>``: gradeff's version and the first 12 hex digits of a hash of its sources.

    Works without git (an installed copy, a tarball); two checkouts with the same code agree.
    """
    package = Path(gradeff.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return f"{gradeff.__version__}+{digest.hexdigest()[:12]}"


def environment(device: str = "cpu") -> dict:
    """Versions of the stack, the device, the CPU, torch's intra-op thread count now and the numerics probe's digest
    at that count (``numerics_probe``: what the gate keys exactness on), as a flat JSON-ready dict.

    Args:
        device: the device cells run on (``cpu`` or ``cuda[:N]``).
    """
    import torch

    # Read at every call: a cell's thread count is set for the cell (--gradeff-threads), after the session began.
    threads = torch.get_num_threads()
    return _machine(device) | {"torch_threads": threads, "numerics_probe": numerics_probe(threads),
                               "project_commit": project_commit(os.getcwd())}


@cache
def project_commit(folder: str) -> str | None:
    """The git commit checked out where the session runs (a project of one's own, or this checkout), with
    ``+dirty`` when tracked files differ from it; ``None`` outside a git repository or without git.

    What a user's own benchmarks ran on, beside :func:`code_version` (gradeff's own code): read once per process.
    """
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=folder, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 1 else "")


@cache
def _machine(device: str) -> dict:
    import torch
    import transformers

    info = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_id": _cpu_id(),
        "cpu_count": os.cpu_count(),
        # The instruction set torch's CPU kernels were dispatched for (AVX512, AVX2, ...): another one sums
        # in another order, so losses agree only to float tolerance, not to the last bits.
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "kernel_env": _kernel_env(),
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
        # torch, 2.3 s: the plugin imports this module
        from gradeff.meters._nvml import torch_device_uuid  # noqa: PLC0415

        info["gpu_uuid"] = torch_device_uuid(info["gpu_index"], torch.cuda.get_device_properties)
        # torch, 2.3 s: the plugin imports this module
        from gradeff.meters._nvml import close_nvml, load_nvml  # noqa: PLC0415

        nvml = load_nvml()
        if nvml is not None:
            try:
                nvml.nvmlInit()
            except Exception:  # noqa: BLE001 - NVML is optional: the version stays unknown, not invented
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


# The machine part is read once per device; clearing it (a test that fakes a GPU) is clearing the environment's.
environment.cache_clear = _machine.cache_clear
