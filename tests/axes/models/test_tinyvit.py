"""TinyViT backbone: published sizes, gradients, activation checkpointing, local weights, 4-bit + LoRA."""

import copy

import pytest
import torch
from torch import nn

from gradeff.axes.models import MODELS, tinyvit
from gradeff.axes.models.tinyvit import (
    CONFIGS,
    VARIANTS,
    TinyViTBlock,
    TinyViTConfig,
    TinyViTForImageClassification,
    build,
)
from gradeff.meters import ActivationCounter

# Published parameter counts at 224 px with the ImageNet-1k head: the "#Params" column of the model zoo
# table in microsoft/Cream TinyViT/README.md (the authors' release of Wu et al., ECCV 2022).
PUBLISHED_PARAMETERS = {"5m": 5.4e6, "11m": 11e6, "21m": 21e6}


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("variant", sorted(PUBLISHED_PARAMETERS))
def test_published_variants_have_the_published_size(variant):
    """TinyViT-5M/11M/21M built on the meta device have their published parameter counts (±3 %)."""
    with torch.device("meta"):
        model = TinyViTForImageClassification(TinyViTConfig(**VARIANTS[variant]))
    assert _count(model) == pytest.approx(PUBLISHED_PARAMETERS[variant], rel=0.03)


def test_paper_profile_is_tinyvit_21m():
    """The paper profile is TinyViT-21M at 224 px with 1000 classes, and builds on the meta device."""
    model = build("paper", device="meta")
    assert model.config.image_size == 224 and model.config.num_labels == 1000
    assert model.config.embed_dims == (96, 192, 384, 576) and model.config.drop_path_rate == 0.1
    assert _count(model) == pytest.approx(PUBLISHED_PARAMETERS["21m"], rel=0.03)
    assert model.classifier.weight.device.type == "meta"


def test_initialisation_is_the_published_one():
    """Linears ~ trunc-normal(0.02) with zero bias, last BN of each MBConv at scale 0, attention biases at 0."""
    torch.manual_seed(0)
    model = build("small")
    qkv = model.tinyvit.stages[2].blocks[0].attn.qkv
    assert qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert not qkv.bias.any()
    for block in model.tinyvit.stages[0].blocks:
        assert not block.conv3.bn.weight.any() and torch.equal(block.conv1.bn.weight, torch.ones(32 * 4))
    assert all(not m.attention_biases.any() for m in model.modules() if isinstance(m, tinyvit.TinyViTAttention))
    # The positional-bias index is |dy| * window + |dx|.
    idx = model.tinyvit.stages[1].blocks[0].attn.attention_bias_idxs
    assert idx.shape == (16, 16) and idx[0, 5].item() == 1 * 4 + 1 and idx[5, 0].item() == 5


def _batch(num_labels: int, size: int = 32, batch: int = 2, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, size, size, generator=gen), torch.randint(0, num_labels, (batch,), generator=gen)


def test_tiny_forward_gives_logits_loss_and_every_gradient():
    """A (2,3,32,32) batch gives (2, num_labels) logits, a finite scalar loss, and a grad for every weight."""
    torch.manual_seed(0)
    model = build("tiny", num_labels=7)
    pixels, labels = _batch(7)
    out = model(pixels, labels=labels)
    assert out.logits.shape == (2, 7)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    assert torch.allclose(out.loss, nn.functional.cross_entropy(out.logits, labels))
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert missing == []
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_windows_larger_than_the_grid_are_padded():
    """TinyViT-21M's 7/14/7 windows work at 32 px, where the stage grids are only 4, 2 and 1 wide."""
    torch.manual_seed(0)
    cfg = dict(CONFIGS["tiny"], window_sizes=VARIANTS["21m"]["window_sizes"], num_labels=5)
    model = TinyViTForImageClassification(TinyViTConfig(**cfg))
    assert {m.attn.attention_biases.shape[1] for m in model.modules() if isinstance(m, TinyViTBlock)} == {49, 196}
    pixels, labels = _batch(5)
    out = model(pixels, labels=labels)
    assert out.logits.shape == (2, 5) and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_window_attention_stays_inside_its_window():
    """With 2x2 windows on a 4x4 grid, changing one window's tokens changes that window's output only."""
    torch.manual_seed(0)
    block = TinyViTBlock(TinyViTConfig(**CONFIGS["tiny"]), dim=32, num_heads=2, window=2, drop_path=0.0).eval()
    grid = torch.randn(1, 4, 4, 32)
    other = grid.clone()
    other[:, 2:, :2] += torch.randn(1, 2, 2, 32)  # the bottom-left window (a constant shift would vanish in LayerNorm)
    with torch.no_grad():
        a, b = block._window_attention(grid), block._window_attention(other)
    changed = (a - b).abs().amax(dim=-1)[0] > 1e-6
    expected = torch.zeros(4, 4, dtype=torch.bool)
    expected[2:, :2] = True
    assert torch.equal(changed, expected)


def _grads_after_step(model: nn.Module, seed: int, *, checkpoint: bool) -> tuple[dict, dict, int]:
    pixels, labels = _batch(model.config.num_labels, batch=4)
    if checkpoint:
        model.activation_checkpointing_enable({"use_reentrant": False})
    torch.manual_seed(seed)
    with ActivationCounter(model) as counter:
        loss = model(pixels, labels=labels).loss
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}, dict(model.named_buffers()), counter.saved_bytes


def test_activation_checkpointing_gives_identical_gradients_and_saves_memory():
    """Checkpointing each block keeps gradients and BN statistics bit-identical (stochastic parts on) and saves less."""
    torch.manual_seed(0)
    cfg = TinyViTConfig(**dict(CONFIGS["tiny"], drop_path_rate=0.5, hidden_dropout_prob=0.2))
    model = TinyViTForImageClassification(cfg).train()
    plain, plain_stats, plain_bytes = _grads_after_step(copy.deepcopy(model), seed=1, checkpoint=False)
    ckpt, ckpt_stats, ckpt_bytes = _grads_after_step(copy.deepcopy(model), seed=1, checkpoint=True)
    reseeded, _, _ = _grads_after_step(copy.deepcopy(model), seed=2, checkpoint=False)
    assert all(torch.equal(plain[n], ckpt[n]) for n in plain), [n for n in plain if not torch.equal(plain[n], ckpt[n])]
    # The replay had to reproduce random draws: another seed gives other gradients.
    assert any(not torch.equal(plain[n], reseeded[n]) for n in plain)
    # The replayed BatchNorms did not fold the batch into their running statistics a second time.
    assert all(torch.equal(plain_stats[n], ckpt_stats[n]) for n in plain_stats)
    assert ckpt_stats["tinyvit.stages.0.blocks.0.conv1.bn.num_batches_tracked"].item() == 1
    assert ckpt_bytes < 0.8 * plain_bytes


def _accumulation_error(model: nn.Module) -> float:
    """Relative gradient difference between one batch of 8 and two micro-batches of 4 (loss halved)."""
    pixels, labels = _batch(model.config.num_labels, batch=8)
    model.zero_grad(set_to_none=True)
    model(pixels, labels=labels).loss.backward()
    large = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    for part in (slice(0, 4), slice(4, 8)):
        (model(pixels[part], labels=labels[part]).loss / 2).backward()
    diff = torch.cat([(p.grad - g).flatten() for p, g in zip(model.parameters(), large)])
    return (diff.norm() / torch.cat([g.flatten() for g in large]).norm()).item()


def test_eval_bn_when_training_freezes_statistics_and_makes_accumulation_exact():
    """With BN in eval mode while training, stats stay put, BN affines still train, and micro-batches sum exactly."""
    torch.manual_seed(0)
    cfg = dict(CONFIGS["tiny"], drop_path_rate=0.0)
    batch_stats = TinyViTForImageClassification(TinyViTConfig(**cfg)).train()
    frozen = TinyViTForImageClassification(TinyViTConfig(**cfg, eval_bn_when_training=True)).train()
    assert frozen.training and frozen.tinyvit.stages[1].blocks[0].training
    bn = frozen.tinyvit.stages[1].blocks[0].local_conv.bn
    assert not bn.training
    before = bn.running_mean.clone()
    assert _accumulation_error(frozen) < 1e-5
    assert torch.equal(bn.running_mean, before) and bn.bias.grad is not None and bn.bias.grad.abs().sum() > 0
    # With batch statistics the gradient depends on how the batch is split.
    assert _accumulation_error(batch_stats) > 1e-3








def test_config_rejects_inconsistent_stages():
    """Per-stage lists of different lengths, or a width not divisible by its heads, fail at config time."""
    with pytest.raises(ValueError, match="one entry per stage"):
        TinyViTConfig(depths=(2, 2, 6))
    with pytest.raises(ValueError, match="divisible"):
        TinyViTConfig(num_heads=(3, 6, 12, 17))


def test_module_exports_the_suite_interface():
    """Profiles, LoRA targets, a Linear ``classifier``, checkpointable blocks and the 1000-class default."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    assert set(CONFIGS) == {"tiny", "small", "paper"} and CONFIGS["tiny"]["image_size"] == 32
    assert CONFIGS["small"]["image_size"] == 64
    assert MODELS["tinyvit"].lora_targets == ("qkv", "proj", "fc1", "fc2")
    assert tinyvit.TinyViTConfig.model_type == "gradeff_tinyvit"
    assert TinyViTConfig().num_labels == 1000 and TinyViTConfig(num_labels=10).num_labels == 10
    model = build("small", device="meta")
    assert type(model.classifier) is nn.Linear
    blocks = [m for m in model.modules() if isinstance(m, (tinyvit.TinyViTMBConv, TinyViTBlock))]
    assert len(blocks) == sum(CONFIGS["small"]["depths"])
    assert all(isinstance(b, GradientCheckpointingLayer) for b in blocks)
    # Every linear the blocks hold is a LoRA target, so none is left out by a naming slip.
    linears = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)} - {"classifier"}
    assert linears == set(MODELS["tinyvit"].lora_targets)
