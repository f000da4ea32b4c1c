"""The process-wide arithmetic a cell is built and trained under: torch's intra-op thread count, subnormal floats
flushed to zero, and whether ``torch.compile`` may run at all; each restored after the cell."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from gradeff.axes.strategies import STRATEGIES
from gradeff.cell.config import RunConfig
from gradeff.studies.grid import Cell

__all__ = ["cell_arithmetic", "intra_op_threads"]


@contextmanager
def cell_arithmetic(cell: Cell, config: RunConfig):
    """The conditions a cell is built and trained under, restored after it: its torch thread count
    (:func:`intra_op_threads`), subnormal floats flushed to zero, and, unless the cell is compiled, no
    ``torch.compile`` at all.

    Subnormal floats (gradients and Adam moments of parameters that barely learn, e.g. an unused token) run
    10-100x slower on CPUs; flushing them to zero, as GPUs do, keeps one such tensor from setting a cell's time (a
    tiny DINOv2 step: 2.4 s with them, 0.1 s without). The flag is process-wide, so it is switched back to torch's
    default after the cell: code that runs next (a user's own, a test of exact float laws) gets IEEE arithmetic.

    An eager cell runs eager: a library may ``torch.compile`` its own functions (bitsandbytes compiles its generic
    4-bit dequantisation, used on a CPU for a weight with an odd input width such as Vim's ``dt_proj``), which
    would build C++ kernels inside the cell (20 s of a tiny Vim-S QLoRA cell's first evaluation under ``-n 2``)
    and measure another implementation than the one the cell names. Under ``force_eager`` such a function runs
    as written; a compiled cell (``--gradeff-compile``, the compiler's budget) keeps torch's default stance.
    """
    compiled = config.compile is not None or STRATEGIES[cell.strategy].budget == "compiler"
    torch.set_flush_denormal(True)
    try:
        with intra_op_threads(config.threads), \
                (nullcontext() if compiled else torch.compiler.set_stance("force_eager")):
            yield
    finally:
        torch.set_flush_denormal(False)


@contextmanager
def intra_op_threads(threads: int | None):
    """torch's intra-op thread count set to ``threads`` inside the block (``None``: left alone), then restored.

    The thread count decides how a kernel splits its float sums, hence the last bits of every loss: a cell that
    took its count from the machine or from how pytest was started (serial, ``-n 2``) would not repeat its own
    numbers. The record's environment says the count the cell ran with.
    """
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
