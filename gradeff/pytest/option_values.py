"""The values the --gradeff-* options take on the command line: each option's text → its typed value, or an error
naming what is valid (the ``type`` pytest's parser calls), and the default thread count from the environment."""

from __future__ import annotations

import argparse
import math
import os
import re

import pytest

__all__ = ["MAX_SAMPLE_HZ", "MAX_SEED", "byte_size", "carbon_intensity", "default_threads", "duration", "fraction",
           "positive_count", "positive_int", "sample_rate", "seed_number", "thread_count", "usage_error",
           "worker_count"]

# A sampler faster than this spends more time reading /proc and NVML than the cell spends training.
MAX_SAMPLE_HZ = 1000.0


def _number(text: str, kind: type, what: str) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = _number(text, int, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def worker_count(text: str) -> int:
    value = _number(text, int, "a number of worker processes")
    if not 0 <= value <= _MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be in 0 … {_MAX_WORKERS}, got {value}")
    return value


# More DataLoader workers than this is a typo, not a machine.
_MAX_WORKERS = 256
# numpy's seeds are unsigned 32-bit integers: a larger one fails inside every cell, so it is refused here.
MAX_SEED = 2**32 - 1
# More intra-op threads than this is a typo, not a machine.
_MAX_THREADS = 1024


def seed_number(text: str) -> int:
    value = _number(text, int, f"a seed (an integer in 0 … {MAX_SEED})")
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be in 0 … {MAX_SEED} (numpy seeds are unsigned 32-bit), got {value}")
    return value


def thread_count(text: str) -> int:
    value = _number(text, int, "a thread count (an integer >= 1)")
    if not 1 <= value <= _MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be in 1 … {_MAX_THREADS}, got {value}")
    return value


def default_threads(environ: dict | None = None) -> int:
    """torch's intra-op threads per cell without ``--gradeff-threads``: ``$OMP_NUM_THREADS`` (its first level), else 1.

    Never the core count, nor the cores over the pytest-xdist workers: a cell's float sums run in an order set by
    its thread count, so a count that followed the machine or the way pytest was started would change its numbers.

    Raises:
        pytest.UsageError: ``$OMP_NUM_THREADS`` is set to something other than a thread count.
    """
    text = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if not text:
        return 1
    try:
        return thread_count(text)
    except argparse.ArgumentTypeError as exc:
        raise usage_error("$OMP_NUM_THREADS", text, f"{exc} (the default of --gradeff-threads)") from None


def sample_rate(text: str) -> float:
    value = _number(text, float, "a sampling rate in Hz")
    if not 0 < value <= MAX_SAMPLE_HZ:
        raise argparse.ArgumentTypeError(f"must be in (0, {MAX_SAMPLE_HZ:g}] Hz, got {text}")
    return value


def carbon_intensity(text: str) -> float:
    value = _number(text, float, "a carbon intensity in gCO2/kWh")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


_BYTE_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def byte_size(text: str) -> int:
    """A positive size in bytes: ``2147483648``, ``2GiB``, ``160 MiB``, ``512MB``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if unit not in _BYTE_UNITS:
        raise argparse.ArgumentTypeError(f"expected a size like 8MiB, 2GiB or a number of bytes, got {text!r}; "
                                         f"units: B, KiB, MiB, GiB, KB, MB, GB")
    value = int(float(match.group(1)) * _BYTE_UNITS[unit])
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def duration(text: str) -> float:
    """``90s``, ``5m``, ``1.5h`` or plain seconds → seconds."""
    number, unit = (text[:-1], text[-1]) if text and text[-1] in _DURATION_UNITS else (text, "s")
    try:
        seconds = float(number) * _DURATION_UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 5m or 1h, got {text!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {text!r}")
    return seconds


def fraction(text: str) -> float:
    value = _number(text, float, "a number in [0, 1)")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def usage_error(option: str, value: object, problem: str) -> pytest.UsageError:
    """The error that stops a session on a bad option value: the option, the value and what is wrong with it."""
    return pytest.UsageError(f"{option} {value}: {problem}")
