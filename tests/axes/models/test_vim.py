"""Vision Mamba (Vim-S) backbone: published size, training path, scan, checkpointing, weights, 4-bit LoRA."""

import math

import pytest
import torch
import torch.nn.functional as F

from gradeff.axes.models.vim import (
    CONFIGS,
    VimConfig,
    VimForImageClassification,
    build,
)
from gradeff.axes.models.vim_scan import parallel_scan, sequential_scan
from gradeff.meters import ActivationCounter

# Table 1 of Zhu et al., "Vision Mamba" (ICML 2024): #Param of the ImageNet-1K models (224 px, 1000 classes).
PUBLISHED_PARAMETERS = {
    "Vim-Ti": (dict(hidden_size=192), 7e6),
    "Vim-S": (dict(hidden_size=384), 26e6),  # = the "paper" profile
    "Vim-B": (dict(hidden_size=768), 98e6),
}


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _batch(size: int = 2, num_labels: int = CONFIGS["tiny"]["num_labels"]):
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(size, 3, 32, 32, generator=generator)
    labels = torch.randint(0, num_labels, (size,), generator=generator)
    return pixels, labels


def test_paper_profile_has_the_published_size():
    """The paper profile (Vim-S, 224 px, 1000 classes) built on the meta device has 26 M parameters (±3 %)."""
    model = build("paper", device="meta")
    assert model.config.dt_rank == 24 and model.config.intermediate_size == 768
    assert _count(model) == pytest.approx(PUBLISHED_PARAMETERS["Vim-S"][1], rel=0.03)


@pytest.mark.parametrize("variant", sorted(PUBLISHED_PARAMETERS))
def test_published_variants_have_their_published_sizes(variant):
    """Vim-Ti / Vim-S / Vim-B (depth 24, widths 192 / 384 / 768) match Table 1's parameter counts (±3 %)."""
    kwargs, published = PUBLISHED_PARAMETERS[variant]
    with torch.device("meta"):
        model = VimForImageClassification(VimConfig(**kwargs, num_labels=1000))
    assert _count(model) == pytest.approx(published, rel=0.03)


def test_tiny_model_returns_logits_a_finite_loss_and_gradients():
    """A tiny forward gives (2, num_labels) logits and a finite scalar loss that reaches every trainable weight."""
    torch.manual_seed(0)
    model = build("tiny")
    pixels, labels = _batch()
    out = model(pixel_values=pixels, labels=labels)
    assert out.logits.shape == (2, model.config.num_labels)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert missing == []
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_loss_is_the_mean_cross_entropy_of_the_middle_class_token():
    """The logits come from the class token at position num_patches // 2 and the loss is their mean CE."""
    torch.manual_seed(0)
    model = build("tiny").eval()
    pixels, labels = _batch(3)
    out = model(pixel_values=pixels, labels=labels)
    hidden = model.vim(pixels).last_hidden_state
    assert model.vim.embeddings.cls_position == model.config.num_patches // 2 == 8
    torch.testing.assert_close(out.logits, model.classifier(hidden[:, 8]))
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))


def test_initialisation_follows_the_reference():
    """S4D-real A, unit D, softplus(dt bias) in [dt_min, dt_max], out_proj scaled by 1/sqrt(depth), zero head bias."""
    torch.manual_seed(0)
    model = build("small")
    cfg = model.config
    mixer = model.vim.layers[0].mixer
    s4d = torch.log(torch.arange(1, cfg.state_size + 1, dtype=torch.float32)).expand(cfg.intermediate_size, -1)
    assert torch.equal(mixer.A_log, s4d) and torch.equal(mixer.A_b_log, s4d)
    assert torch.equal(mixer.D, torch.ones(cfg.intermediate_size))
    for dt_proj in (mixer.dt_proj, mixer.dt_proj_b):
        dt = F.softplus(dt_proj.bias)
        assert dt.min() >= cfg.dt_min * 0.999 and dt.max() <= cfg.dt_max * 1.001
        assert dt_proj.weight.abs().max() <= cfg.dt_rank**-0.5
    bound = 1 / math.sqrt(cfg.intermediate_size * cfg.num_hidden_layers)
    assert mixer.out_proj.weight.abs().max() <= bound < mixer.in_proj.weight.abs().max()
    assert torch.equal(model.classifier.bias, torch.zeros_like(model.classifier.bias))
    assert model.classifier.weight.std().item() == pytest.approx(cfg.initializer_range, rel=0.2)


@pytest.mark.parametrize("length", [1, 3, 5, 16, 17, 24, 65])
def test_parallel_scan_matches_the_sequential_recurrence(length):
    """The pscan path (one call, or a power-of-two head + carried tail) equals the step-by-step scan, with grads."""
    generator = torch.Generator().manual_seed(length)
    decay = torch.rand(2, length, 1, 12, generator=generator, dtype=torch.float64).requires_grad_()
    inputs = torch.randn(2, length, 1, 12, generator=generator, dtype=torch.float64).requires_grad_()
    upstream = torch.randn(2, length, 1, 12, generator=generator, dtype=torch.float64)
    fast = parallel_scan(decay, inputs)
    slow = sequential_scan(decay, inputs)
    torch.testing.assert_close(fast, slow)
    # (At length 1 the state is the input alone: decay's gradient is zero, materialised as such.)
    for a, b in zip(torch.autograd.grad(fast, (decay, inputs), upstream, materialize_grads=True),
                    torch.autograd.grad(slow, (decay, inputs), upstream, materialize_grads=True), strict=True):
        torch.testing.assert_close(a, b)


def _reference_mixer(mixer, hidden):
    """Vim's bimamba-v2 mixer written out literally: each direction on its own (the backward one on the
    flipped ``xz``), nn.Conv1d modules, a per-token recurrence, outputs flipped back, averaged, projected."""
    length = hidden.shape[1]
    xz = mixer.in_proj(hidden)
    outs = []
    for seq, conv, x_proj, dt_proj, a_log, d in (
            (xz, mixer.conv1d, mixer.x_proj, mixer.dt_proj, mixer.A_log, mixer.D),
            (xz.flip(1), mixer.conv1d_b, mixer.x_proj_b, mixer.dt_proj_b, mixer.A_b_log, mixer.D_b)):
        x, z = seq.chunk(2, dim=-1)
        x = F.silu(conv(x.transpose(1, 2))[..., :length]).transpose(1, 2)
        dt, b, c = x_proj(x).split([mixer.dt_rank, mixer.state_size, mixer.state_size], dim=-1)
        delta = F.softplus(dt_proj(dt))
        a = -torch.exp(a_log)
        state = torch.zeros(hidden.shape[0], mixer.d_inner, mixer.state_size)
        ys = []
        for t in range(length):
            step = delta[:, t, :, None]
            state = torch.exp(step * a) * state + step * b[:, t, None, :] * x[:, t, :, None]
            ys.append((state * c[:, t, None, :]).sum(-1) + d * x[:, t])
        outs.append(torch.stack(ys, dim=1) * F.silu(z))
    return mixer.out_proj((outs[0] + outs[1].flip(1)) / 2)


@pytest.mark.parametrize("length", [17, 24])  # a power-of-two head + carried tail; one padded pscan call
def test_mixer_matches_the_literal_bidirectional_formula(length):
    """The batched mixer (stacked directions, shifted-sum conv, pscan) equals the reference formula step by step."""
    torch.manual_seed(0)
    mixer = build("tiny").vim.layers[1].mixer
    with torch.no_grad():  # the two directions' parameters made to differ
        mixer.A_b_log.add_(torch.rand_like(mixer.A_b_log))
        mixer.D_b.mul_(0.5)
    hidden = torch.randn(3, length, CONFIGS["tiny"]["hidden_size"])
    torch.testing.assert_close(mixer(hidden), _reference_mixer(mixer, hidden), rtol=1e-5, atol=1e-6)


def _checkpointing_run(enable: bool):
    torch.manual_seed(0)
    # Stochastic depth and embedding dropout switched on hard: checkpointing must replay the same masks.
    cfg = VimConfig(**{**CONFIGS["tiny"], "drop_path_rate": 0.5, "hidden_dropout_prob": 0.1})
    model = VimForImageClassification(cfg).train()
    if enable:
        model.activation_checkpointing_enable({"use_reentrant": False})
    dropped = []  # per forward of the last layer's drop path: which samples lost their branch
    model.vim.layers[-1].drop_path.register_forward_hook(
        lambda module, args, out: dropped.append((out.flatten(1) == 0).all(1).tolist()))
    pixels, labels = _batch(4)
    torch.manual_seed(2)
    with ActivationCounter(model) as counter:
        loss = model(pixel_values=pixels, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}, counter.saved_bytes, dropped


def test_activation_checkpointing_gives_bit_identical_gradients():
    """Checkpointing each VimLayer (train mode, drop path 0.5) leaves loss and every gradient bit-identical."""
    loss_plain, grads_plain, saved_plain, dropped_plain = _checkpointing_run(False)
    loss_ckpt, grads_ckpt, saved_ckpt, dropped_ckpt = _checkpointing_run(True)
    # Stochastic depth really acted (some samples dropped, not all); equal gradients then mean the
    # backward's recomputation of the layers replayed the same draws.
    assert any(dropped_plain[0]) and not all(dropped_plain[0])
    assert dropped_ckpt[0] == dropped_plain[0]
    assert torch.equal(loss_plain, loss_ckpt)
    assert grads_plain.keys() == grads_ckpt.keys()
    unequal = [n for n in grads_plain if not torch.equal(grads_plain[n], grads_ckpt[n])]
    assert unequal == []
    # The checkpointed forward keeps only the layers' inputs: far fewer bytes saved for backward.
    assert saved_ckpt < saved_plain / 2






