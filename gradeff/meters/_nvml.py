"""Shared NVML plumbing for the GPU and energy meters (private).

Two meters read NVML, so finding the library and the device handle lives in one place.
Everything here swallows NVML's errors and answers ``None``: a machine without the
driver, with a too-old GPU or inside a container without ``libnvidia-ml.so`` is a
machine that cannot measure, not a failed benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["close_nvml", "device_name", "load_nvml", "open_nvml_device", "torch_device_uuid"]


def load_nvml(nvml: Any = None) -> Any:
    """Return the NVML module to use.

    Args:
        nvml: An object with the ``pynvml`` functions (tests pass a fake); ``None`` to
            import ``pynvml`` from nvidia-ml-py.

    Returns:
        ``nvml`` if given, else the ``pynvml`` module, else ``None`` when it is not
        installed.
    """
    if nvml is not None:
        return nvml
    try:
        import pynvml  # noqa: PLC0415 - deferred: meters probe when created, never at import
    except ImportError:
        return None
    return pynvml


def torch_device_uuid(device_index: int, get_device_properties: Callable[[int], Any] | None) -> str | None:
    """UUID of a torch CUDA device as torch reports it, or ``None`` when unknown.

    torch numbers the *visible* devices (``CUDA_VISIBLE_DEVICES``, ordered by
    ``CUDA_DEVICE_ORDER``) while NVML numbers all devices in PCI order, so the same
    index can name two different GPUs. The UUID is the one name both agree on.

    Args:
        device_index: torch's index of the device.
        get_device_properties: ``torch.cuda.get_device_properties`` or a stand-in;
            ``None`` when there is nothing to ask.

    Returns:
        The UUID as a string without prefix, or ``None``.
    """
    if get_device_properties is None:
        return None
    try:
        uuid = getattr(get_device_properties(device_index), "uuid", None)
    except Exception:  # noqa: BLE001 - no CUDA, fake allocator, old torch: all mean "unknown"
        return None
    return None if uuid is None else str(uuid)


def open_nvml_device(nvml: Any, device_index: int, uuid: str | None = None) -> Any:
    """Initialize NVML and return the handle of one device, or ``None`` on any NVML error.

    The caller owns one NVML initialization when a handle is returned and must give it
    back with :func:`close_nvml`; on ``None`` nothing is left initialized.

    Args:
        nvml: The NVML module (see :func:`load_nvml`); ``None`` answers ``None``.
        device_index: NVML index to use when the UUID is unknown or not found.
        uuid: Device UUID from torch, tried first (with NVML's ``GPU-``/``MIG-``
            prefixes) so that the handle names the same GPU as torch's index.

    Returns:
        An NVML device handle, or ``None``.
    """
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    by_uuid = getattr(nvml, "nvmlDeviceGetHandleByUUID", None)
    if uuid and by_uuid is not None:
        candidates = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]
        for candidate in candidates:
            try:
                return by_uuid(candidate)
            except Exception:  # noqa: BLE001 - try the next spelling, then the index
                continue
    try:
        return nvml.nvmlDeviceGetHandleByIndex(device_index)
    except Exception:  # noqa: BLE001
        close_nvml(nvml)
        return None


def close_nvml(nvml: Any) -> None:
    """Give back one NVML initialization; errors are ignored.

    Args:
        nvml: The NVML module; a fake without ``nvmlShutdown`` is accepted.
    """
    shutdown = getattr(nvml, "nvmlShutdown", None)
    if shutdown is None:
        return
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - nothing useful to do about a failed shutdown
        pass


def device_name(nvml: Any, handle: Any) -> str | None:
    """Marketing name of an NVML device (``"NVIDIA H100 80GB HBM3"``), or ``None``.

    Args:
        nvml: The NVML module.
        handle: A handle from :func:`open_nvml_device`.

    Returns:
        The name as ``str`` (old pynvml versions return ``bytes``), or ``None``.
    """
    try:
        name = nvml.nvmlDeviceGetName(handle)
    except Exception:  # noqa: BLE001
        return None
    return name.decode() if isinstance(name, bytes) else str(name)

