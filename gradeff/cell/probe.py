"""The numerics probe: a fixed small computation through the kernels the cells use, hashed.

Two machines repeat a seeded cell bit for bit exactly when their kernels sum in the same order: the same
instruction set path through ATen, MKL and oneDNN, the same thread split, the same library versions. The CPU's
model name does not say that (a virtual machine shows one name over two generations; two vendors' CPUs may take
the same AVX-512 paths, one vendor's may take another path through MKL), so the gate asks the kernels themselves:
every record's environment carries the digest of this probe, run with the cell's thread count and arithmetic
(denormals flushed, as :func:`gradeff.cell.arithmetic.cell_arithmetic` sets them), and the gate judges exactly
wherever a run's probe equals its baseline's (:mod:`gradeff.gate.portability`).

The probe runs what a cell's step runs: matrix products (forward and backward, through a linear layer with
bias), a convolution, softmax, layer norm, GELU, scaled dot-product attention, a cross-entropy loss, a reduction
large enough to be split across threads, and one step each of Adam and AdamW on their default (multi-tensor) path
and of SGD with momentum. Each output's bytes go into one SHA-256. It takes a few milliseconds, once per process
and thread count.
"""

from __future__ import annotations

import hashlib
from functools import cache

__all__ = ["PROBE_VERSION", "numerics_probe"]

# Bump when the computation changes: a probe of another computation must not equal an older one by name.
PROBE_VERSION = 1
# Sizes past ATen's parallel grain (32,768 elements) and MKL's threading threshold, so that a thread count that
# splits the cells' sums splits the probe's too.
_ROWS, _WIDTH, _HIDDEN = 128, 256, 192


@cache
def numerics_probe(threads: int) -> str:
    """``v1:<24 hex digits>``: the probe's digest with ``threads`` intra-op threads (the caller's count restored).

    Args:
        threads: torch's intra-op threads while the probe runs (a cell's ``--gradeff-threads``).

    Returns:
        The probe's version and the first 24 hex digits of the SHA-256 of every output's bytes.
    """
    import torch

    before_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    try:
        outputs = _run(torch)
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(before_threads)
    digest = hashlib.sha256()
    for tensor in outputs:
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return f"v{PROBE_VERSION}:{digest.hexdigest()[:24]}"


def _run(torch) -> list:
    """The probe's computation; every tensor it returns is hashed."""
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(20240611)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    x = draw(_ROWS, _WIDTH)
    weight, bias = draw(_HIDDEN, _WIDTH).requires_grad_(), draw(_HIDDEN).requires_grad_()
    norm_weight, norm_bias = (1 + 0.1 * draw(_HIDDEN)).requires_grad_(), (0.1 * draw(_HIDDEN)).requires_grad_()
    hidden = F.gelu(F.layer_norm(F.linear(x, weight, bias), (_HIDDEN,), norm_weight, norm_bias))
    heads = hidden.view(4, _ROWS // 4, 4, _HIDDEN // 4).transpose(1, 2)
    attended = F.scaled_dot_product_attention(heads, heads, heads, is_causal=True)
    head = draw(_HIDDEN, 16).requires_grad_()
    logits = attended.transpose(1, 2).reshape(_ROWS, _HIDDEN) @ head
    targets = torch.arange(_ROWS) % 16
    loss = F.cross_entropy(logits, targets) + F.softmax(hidden, dim=-1).square().mean()
    loss.backward()
    images = draw(4, 3, 16, 16)
    kernels = draw(8, 3, 3, 3).requires_grad_()
    feature_map = F.conv2d(images, kernels, padding=1)
    feature_map.square().mean().backward()
    large = draw(1 << 17)
    outputs = [hidden, attended, logits, loss, weight.grad, bias.grad, norm_weight.grad, head.grad, feature_map,
               kernels.grad,
               large.sum(), large.square().mean(), torch.cumsum(large[:4096], 0)]
    for optimizer_class, options in ((torch.optim.Adam, {}), (torch.optim.AdamW, {"weight_decay": 0.01}),
                                     (torch.optim.SGD, {"momentum": 0.9})):
        parameters = [weight.detach().clone().requires_grad_(), kernels.detach().clone().requires_grad_()]
        for parameter, gradient in zip(parameters, (weight.grad, kernels.grad)):
            parameter.grad = gradient.clone()
        optimizer = optimizer_class(parameters, lr=1e-3, **options)
        optimizer.step()
        optimizer.step()
        outputs += parameters
    return outputs
