"""TinyViT image classifier (Wu et al., ECCV 2022) as a transformers model.

"TinyViT: Fast Pretraining Distillation for Small Vision Transformers" (arXiv 2207.10666); the
architecture follows the authors' implementation (microsoft/Cream, ``TinyViT/models/tiny_vit.py``),
which timm's ``tiny_vit.py`` reproduces. A hierarchical, four-stage network:

- **Patch embedding** (stride 4): two 3x3 stride-2 convolutions, each followed by BatchNorm, with a
  GELU between them. Every convolution of the network is bias-free and followed by BatchNorm.
- **Stage 1**: MBConv blocks (1x1 expand x4 -> GELU -> 3x3 depthwise -> GELU -> 1x1 project whose BN
  weight starts at 0 -> stochastic depth -> + shortcut -> GELU).
- **Stages 2-4**: TinyViT blocks on a channel-last grid: pre-norm window attention with a learned
  attention bias per head and per (|dy|, |dx|) offset inside the window (LeViT style, no position
  embedding anywhere), residual; a 3x3 depthwise conv + BN between attention and MLP (no residual
  around it); pre-norm MLP (ratio 4, GELU), residual. Attention and MLP carry their own LayerNorm.
- **Patch merging** between stages (end of stages 1-3): 1x1 conv -> GELU -> 3x3 stride-2 depthwise
  conv -> GELU -> 1x1 conv, each with BN: halves the grid and changes the width.
- **Head**: global average pool over the grid, LayerNorm, linear classifier.

Published variants (224 px, 1000 classes; depths 2-2-6-2 and windows 7-7-14-7 for all three, the
first window entry unused since stage 1 is convolutional): TinyViT-5M (embed dims 64-128-160-320,
heads 2-4-5-10), TinyViT-11M (64-128-256-448, 2-4-8-14) and TinyViT-21M (96-192-384-576, 3-6-12-18),
with 5.4 M, 11 M and 21 M parameters in the model-zoo table of the Cream README; built here they have
5.39 M, 11.00 M and 21.20 M. The "paper" profile is TinyViT-21M. The head width is 32 in every stage
of every variant, and keys and values are as wide as queries (LeViT's ``attn_ratio`` is 1 in TinyViT).
Stochastic depth grows linearly from 0 over all blocks, MBConv included, to ``drop_path_rate``: 0.0 for
5M and 0.1 for 11M and 21M, the rates of Cream's configs (for 21M, the ImageNet-22k distillation and
22k->1k fine-tuning ones; training it from scratch on ImageNet-1k used 0.2). Initialisation as
published: linear weights normal with std 0.02 (timm's ``trunc_normal_``, whose cut at +-2 is absolute)
and zero biases, LayerNorm (1, 0), convolutions at PyTorch's default (Kaiming uniform, a=sqrt(5)),
BatchNorm (1, 0) except the last BN of each MBConv (0, 0), attention biases 0.

Windows larger than the feature map (TinyViT-21M's 7/14/7 windows at 32 px see 4x4, 2x2 and 1x1
grids) are handled as the reference does: the grid is zero-padded at the bottom and right up to a
multiple of the window, the padded positions take part in attention unmasked, and they are cropped
afterwards. Window sizes, and with them the parameter shapes, are thus independent of the input
resolution. The tiny and small profiles use windows that tile their grids exactly.

BatchNorm in training: by default it normalises with the batch statistics, as in pretraining; the
blocks' BNs fold each training batch into their running statistics once even when activation
checkpointing replays the block (see :class:`TinyViTBatchNorm`). ``eval_bn_when_training`` keeps them
in eval mode instead, the option of the authors' fine-tuning configs.
"""

import itertools
import math

import torch
import torch.nn.functional as F
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput

from gradeff.axes.models._layers import DropPath, ReplaySafeBatchNorm2d
from gradeff.axes.models._weights import classifier_builders

__all__ = [
    "CONFIGS",
    "VARIANTS",
    "TinyViTAttention",
    "TinyViTBatchNorm",
    "TinyViTBlock",
    "TinyViTConfig",
    "TinyViTForImageClassification",
    "TinyViTMBConv",
    "TinyViTModel",
    "TinyViTPreTrainedModel",
    "build",
    "config",
]

# The published models (ImageNet, 224 px), from Cream's TinyViT configs; drop_path_rate is the one of
# the ImageNet-22k distillation / 22k->1k fine-tuning configs.
VARIANTS: dict[str, dict] = {
    "5m": dict(image_size=224, embed_dims=(64, 128, 160, 320), depths=(2, 2, 6, 2), num_heads=(2, 4, 5, 10),
               window_sizes=(7, 7, 14, 7), drop_path_rate=0.0, num_labels=1000),
    "11m": dict(image_size=224, embed_dims=(64, 128, 256, 448), depths=(2, 2, 6, 2), num_heads=(2, 4, 8, 14),
                window_sizes=(7, 7, 14, 7), drop_path_rate=0.1, num_labels=1000),
    "21m": dict(image_size=224, embed_dims=(96, 192, 384, 576), depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 18),
                window_sizes=(7, 7, 14, 7), drop_path_rate=0.1, num_labels=1000),
}

CONFIGS: dict[str, dict] = {
    # 32 px -> grids of 8, 4, 2, 1 per stage. Windows mirror the published layout at 224 px (stage 2
    # split into windows, stages 3-4 one window each), so no stage attends to padding. Head width 16
    # instead of 32, so that stages 2-4 keep several heads. One block per stage: at this size the
    # CPU step time is set by the number of small ops (17 conv + BN pairs), hardly by the width;
    # a batch of 16 trains in ~15 ms per AdamW step on two cores.
    # No stochastic depth at this size: a few dozen fine-tuning steps need no regularisation, and without
    # it a step's gradient depends on its batch alone.
    "tiny": dict(image_size=32, embed_dims=(16, 32, 48, 64), depths=(1, 1, 1, 1), num_heads=(1, 2, 3, 4),
                 window_sizes=(2, 2, 2, 1), drop_path_rate=0.0, num_labels=100),
    # 64 px -> grids of 16, 8, 4, 2: stage 2 in 2x2 windows of 4, stages 3-4 global, head width 32 as
    # published; ~0.1 s per AdamW step at batch 32 on two cores.
    "small": dict(image_size=64, embed_dims=(32, 64, 128, 160), depths=(2, 2, 4, 2), num_heads=(1, 2, 4, 5),
                  window_sizes=(4, 4, 4, 2), drop_path_rate=0.1, num_labels=100),
    # TinyViT-21M at 224 px with the ImageNet-1k head: 21.20 M parameters (published: 21 M).
    "paper": dict(VARIANTS["21m"]),
}

@strict
class TinyViTConfig(PreTrainedConfig):
    """Configuration of a TinyViT classifier; the defaults are TinyViT-21M at 224 px (1000 classes).

    Args:
        image_size: input side in pixels (informational: the network accepts any size, see the
            module docstring on windows larger than a grid).
        num_channels: input channels.
        embed_dims: width of each stage; the first is the patch embedding's output width.
        depths: blocks per stage (MBConv for the first stage, TinyViT blocks after).
        num_heads: attention heads per stage (the first entry is unused: stage 1 has no attention).
        window_sizes: attention window side per stage (the first entry is unused).
        mlp_ratio: MLP hidden width over block width.
        mbconv_expand_ratio: MBConv hidden width over block width.
        local_conv_size: kernel of the depthwise conv between attention and MLP.
        hidden_dropout_prob: dropout inside the MLP (``drop_rate`` of the reference, 0 in all
            published configs).
        drop_path_rate: stochastic depth rate of the last block; it grows linearly from 0.
        eval_bn_when_training: keep every BatchNorm in eval mode in training (running statistics used
            and frozen, scale and shift still trained), the switch of the same name in the authors'
            ImageNet-22k->1k and higher-resolution fine-tuning configs. Off: BatchNorm normalises with
            the batch statistics in training, as in pretraining. On, a step's gradient no longer depends
            on how the batch is split, so gradient accumulation equals the large batch.
        layer_norm_eps: epsilon of every LayerNorm.
        initializer_range: std of the truncated-normal linear weights.
    """

    model_type = "gradeff_tinyvit"

    image_size: int = 224
    num_channels: int = 3
    embed_dims: list[int] | tuple[int, ...] = (96, 192, 384, 576)
    depths: list[int] | tuple[int, ...] = (2, 2, 6, 2)
    num_heads: list[int] | tuple[int, ...] = (3, 6, 12, 18)
    window_sizes: list[int] | tuple[int, ...] = (7, 7, 14, 7)
    mlp_ratio: float | int = 4.0
    mbconv_expand_ratio: float | int = 4.0
    local_conv_size: int = 3
    hidden_dropout_prob: float | int = 0.0
    drop_path_rate: float | int = 0.1
    eval_bn_when_training: bool = False
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02

    def __post_init__(self, **kwargs):
        # The paper model classifies ImageNet-1k; PreTrainedConfig alone would default to 2 labels.
        if self.id2label is None:
            kwargs.setdefault("num_labels", 1000)
        # JSON round trips turn tuples into lists; keep one type so saved and built configs compare equal.
        for name in ("embed_dims", "depths", "num_heads", "window_sizes"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))
        stages = len(self.embed_dims)
        if stages < 2 or {len(self.depths), len(self.num_heads), len(self.window_sizes)} != {stages}:
            raise ValueError("embed_dims, depths, num_heads and window_sizes need one entry per stage (>= 2 stages)")
        for dim, heads in zip(self.embed_dims[1:], self.num_heads[1:]):
            if dim % heads:
                raise ValueError(f"stage width {dim} is not divisible by its {heads} heads")
        if any(w < 1 for w in self.window_sizes):
            raise ValueError("window sizes must be positive")
        super().__post_init__(**kwargs)


class TinyViTBatchNorm(ReplaySafeBatchNorm2d):
    """A replay-safe ``BatchNorm2d`` (see :class:`ReplaySafeBatchNorm2d`) with its initial scale.

    ``weight_init`` is 0 for the last BN of an MBConv and 1 elsewhere. It lives on the norm itself
    because transformers initialises model code from outside its own package leaf by leaf: a container
    without parameters of its own is never visited.
    """

    def __init__(self, channels: int, weight_init: float = 1.0):
        super().__init__(channels)
        self.weight_init = weight_init


class TinyViTConvBN(nn.Module):
    """Bias-free convolution followed by BatchNorm, the only convolution type of TinyViT.

    ``bn_weight_init`` is the BN scale at initialisation: 0 for the last BN of an MBConv, so every
    residual conv block starts as the identity (before its final GELU).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1, stride: int = 1, groups: int = 1,
                 bn_weight_init: float = 1.0):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, kernel_size // 2, groups=groups,
                              bias=False)
        self.bn = TinyViTBatchNorm(out_channels, bn_weight_init)

    def forward(self, x: torch.Tensor, pass_index: int | None = None) -> torch.Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H', W')``; ``pass_index`` goes to the BN."""
        return self.bn(self.conv(x), pass_index)


class TinyViTPatchEmbed(nn.Module):
    """Stride-4 stem: conv3x3/2 + BN -> GELU -> conv3x3/2 + BN, to ``embed_dims[0]`` channels."""

    def __init__(self, config: TinyViTConfig):
        super().__init__()
        dim = config.embed_dims[0]
        self.conv1 = TinyViTConvBN(config.num_channels, dim // 2, 3, stride=2)
        self.act = nn.GELU()
        self.conv2 = TinyViTConvBN(dim // 2, dim, 3, stride=2)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(B, C_in, H, W)`` -> ``(B, dim, ceil(H/4), ceil(W/4))``."""
        return self.conv2(self.act(self.conv1(pixel_values)))


class TinyViTMBConv(GradientCheckpointingLayer):
    """Inverted-residual block of stage 1 (MobileNetV2 style, GELU, no squeeze-excite)."""

    def __init__(self, dim: int, expand_ratio: float, drop_path: float):
        super().__init__()
        hidden = int(dim * expand_ratio)
        self.conv1 = TinyViTConvBN(dim, hidden, 1)
        self.act1 = nn.GELU()
        self.conv2 = TinyViTConvBN(hidden, hidden, 3, groups=hidden)
        self.act2 = nn.GELU()
        self.conv3 = TinyViTConvBN(hidden, dim, 1, bn_weight_init=0.0)
        self.drop_path = DropPath(drop_path)
        self.act3 = nn.GELU()

    def forward(self, hidden_states: torch.Tensor, pass_index: int | None = None) -> torch.Tensor:
        """``(B, C, H, W)`` -> same shape; the GELU comes after the residual sum, as published."""
        x = self.act1(self.conv1(hidden_states, pass_index))
        x = self.act2(self.conv2(x, pass_index))
        x = self.drop_path(self.conv3(x, pass_index))
        return self.act3(x + hidden_states)


class TinyViTPatchMerging(nn.Module):
    """Downsampling between stages: 1x1 conv -> GELU -> depthwise 3x3/2 -> GELU -> 1x1 conv, all with BN."""

    def __init__(self, dim: int, out_dim: int):
        super().__init__()
        self.conv1 = TinyViTConvBN(dim, out_dim, 1)
        self.act = nn.GELU()
        self.conv2 = TinyViTConvBN(out_dim, out_dim, 3, stride=2, groups=out_dim)
        self.conv3 = TinyViTConvBN(out_dim, out_dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, dim, H, W)`` -> ``(B, out_dim, ceil(H/2), ceil(W/2))``."""
        x = self.act(self.conv1(x))
        x = self.act(self.conv2(x))
        return self.conv3(x)


def _window_offset_index(window: int) -> torch.Tensor:
    """``(window², window²)`` index of each query/key pair's (|dy|, |dx|) offset into the bias table.

    Offsets are numbered in first-seen order over row-major positions, which for a square window is
    simply ``|dy| * window + |dx|``: the table has ``window²`` entries per head.
    """
    points = list(itertools.product(range(window), range(window)))
    idx = [abs(p[0] - q[0]) * window + abs(p[1] - q[1]) for p in points for q in points]
    return torch.tensor(idx, dtype=torch.long).view(len(points), len(points))


class TinyViTAttention(nn.Module):
    """Pre-norm multi-head self-attention inside one window, with a learned per-offset attention bias.

    The fused ``qkv`` projection is laid out head by head (``[q_h | k_h | v_h]`` for each head h), as in
    the reference, so its weights are interchangeable with published checkpoints.
    """

    def __init__(self, dim: int, num_heads: int, window: int, eps: float):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.window = window
        self.attention_biases = nn.Parameter(torch.zeros(num_heads, window * window))
        # Fully determined by the window size: not serialised, rebuilt by _init_weights after loading.
        self.register_buffer("attention_bias_idxs", _window_offset_index(window), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(windows, window², dim)`` -> same shape."""
        batch, tokens, dim = x.shape
        qkv = self.qkv(self.norm(x)).view(batch, tokens, self.num_heads, 3 * self.head_dim)
        q, k, v = qkv.transpose(1, 2).split(self.head_dim, dim=-1)
        # Explicit softmax rather than scaled_dot_product_attention: the additive bias is a trained
        # parameter (it needs its gradient on every backend) and windows hold at most 196 tokens.
        scores = (q @ k.transpose(-2, -1)) * self.scale + self.attention_biases[:, self.attention_bias_idxs]
        out = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(batch, tokens, dim)
        return self.proj(out)


class TinyViTMlp(nn.Module):
    """Pre-norm MLP: LayerNorm -> fc1 -> GELU -> dropout -> fc2 -> dropout."""

    def __init__(self, dim: int, hidden: int, dropout: float, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., dim)`` -> same shape."""
        return self.drop(self.fc2(self.drop(self.act(self.fc1(self.norm(x))))))


class TinyViTBlock(GradientCheckpointingLayer):
    """Window attention (+ residual) -> depthwise 3x3 conv + BN -> MLP (+ residual)."""

    def __init__(self, config: TinyViTConfig, dim: int, num_heads: int, window: int, drop_path: float):
        super().__init__()
        self.window = window
        self.attn = TinyViTAttention(dim, num_heads, window, config.layer_norm_eps)
        self.local_conv = TinyViTConvBN(dim, dim, config.local_conv_size, groups=dim)
        self.mlp = TinyViTMlp(dim, int(dim * config.mlp_ratio), config.hidden_dropout_prob, config.layer_norm_eps)
        self.drop_path = DropPath(drop_path)

    def _window_attention(self, x: torch.Tensor) -> torch.Tensor:
        """Attention within non-overlapping windows of a ``(B, H, W, C)`` grid, zero-padding ragged edges."""
        batch, height, width, dim = x.shape
        w = self.window
        if height == w and width == w:  # one window holds the whole grid: nothing to partition
            return self.attn(x.reshape(batch, w * w, dim)).view(batch, w, w, dim)
        pad_b, pad_r = -height % w, -width % w
        if pad_b or pad_r:
            x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        rows, cols = (height + pad_b) // w, (width + pad_r) // w
        windows = x.reshape(batch, rows, w, cols, w, dim).transpose(2, 3).reshape(batch * rows * cols, w * w, dim)
        windows = self.attn(windows)
        x = windows.view(batch, rows, cols, w, w, dim).transpose(2, 3).reshape(batch, rows * w, cols * w, dim)
        return x[:, :height, :width] if pad_b or pad_r else x

    def forward(self, hidden_states: torch.Tensor, pass_index: int | None = None) -> torch.Tensor:
        """``(B, H, W, C)`` channel-last grid -> same shape; ``pass_index`` goes to the BN of the local conv."""
        x = hidden_states + self.drop_path(self._window_attention(hidden_states))
        x = self.local_conv(x.permute(0, 3, 1, 2), pass_index).permute(0, 2, 3, 1)
        return x + self.drop_path(self.mlp(x))


class TinyViTConvStage(nn.Module):
    """Stage 1: MBConv blocks on a ``(B, C, H, W)`` map, then patch merging to the next width."""

    def __init__(self, config: TinyViTConfig, drop_paths: list[float], out_dim: int | None):
        super().__init__()
        dim = config.embed_dims[0]
        self.blocks = nn.ModuleList(TinyViTMBConv(dim, config.mbconv_expand_ratio, p) for p in drop_paths)
        self.downsample = TinyViTPatchMerging(dim, out_dim) if out_dim is not None else None

    def forward(self, x: torch.Tensor, pass_index: int | None = None) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, C', H', W')``."""
        for block in self.blocks:
            x = block(x, pass_index=pass_index)
        return self.downsample(x) if self.downsample is not None else x


class TinyViTStage(nn.Module):
    """A transformer stage: TinyViT blocks on a channel-last grid, then patch merging to the next width."""

    def __init__(self, config: TinyViTConfig, index: int, drop_paths: list[float], out_dim: int | None):
        super().__init__()
        dim = config.embed_dims[index]
        self.blocks = nn.ModuleList(
            TinyViTBlock(config, dim, config.num_heads[index], config.window_sizes[index], p) for p in drop_paths
        )
        self.downsample = TinyViTPatchMerging(dim, out_dim) if out_dim is not None else None

    def forward(self, x: torch.Tensor, pass_index: int | None = None) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, C', H', W')``; the blocks work channel-last, where LayerNorm and Linear act."""
        x = x.permute(0, 2, 3, 1)
        for block in self.blocks:
            x = block(x, pass_index=pass_index)
        x = x.permute(0, 3, 1, 2)
        return self.downsample(x) if self.downsample is not None else x


class TinyViTPreTrainedModel(PreTrainedModel):
    """Weight initialisation and the transformers plumbing shared by the TinyViT models."""

    config_class = TinyViTConfig
    config: TinyViTConfig
    base_model_prefix = "tinyvit"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["TinyViTMBConv", "TinyViTBlock", "TinyViTPatchMerging"]
    _input_embed_layer = "patch_embed"

    def train(self, mode: bool = True):
        """Set training mode; with ``config.eval_bn_when_training`` the BatchNorms stay in eval mode."""
        super().train(mode)
        if mode and self.config.eval_bn_when_training:
            for module in self.modules():
                if isinstance(module, nn.BatchNorm2d):
                    module.eval()
        return self

    def _init_weights(self, module: nn.Module) -> None:
        """The published initialisation (module docstring); every parameter type is handled here."""
        if isinstance(module, nn.Linear):
            # As in the reference: cut at +-2 in absolute value, i.e. +-100 std, a plain normal in practice.
            init.trunc_normal_(module.weight, std=self.config.initializer_range, a=-2.0, b=2.0)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.Conv2d):
            # The reference leaves convolutions at PyTorch's default initialisation.
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
        elif isinstance(module, TinyViTBatchNorm):
            init.constant_(module.weight, module.weight_init)
            init.zeros_(module.bias)
            init.zeros_(module.running_mean)
            init.ones_(module.running_var)
            init.zeros_(module.num_batches_tracked)
        elif isinstance(module, TinyViTAttention):
            init.zeros_(module.attention_biases)
            init.copy_(module.attention_bias_idxs, _window_offset_index(module.window))


class TinyViTModel(TinyViTPreTrainedModel):
    """TinyViT backbone: stem, stages, global average pool and the head LayerNorm."""

    def __init__(self, config: TinyViTConfig):
        super().__init__(config)
        self.patch_embed = TinyViTPatchEmbed(config)
        rates = torch.linspace(0, config.drop_path_rate, sum(config.depths), device="cpu").tolist()
        stages, start = [], 0
        for i, depth in enumerate(config.depths):
            drop_paths = rates[start:start + depth]
            start += depth
            out_dim = config.embed_dims[i + 1] if i + 1 < len(config.depths) else None
            if i == 0:
                stages.append(TinyViTConvStage(config, drop_paths, out_dim))
            else:
                stages.append(TinyViTStage(config, i, drop_paths, out_dim))
        self.stages = nn.ModuleList(stages)
        self.norm = nn.LayerNorm(config.embed_dims[-1], eps=config.layer_norm_eps)
        # Training forwards so far: the blocks' BatchNorms use it to recognise checkpoint replays.
        self._training_passes = 0
        self.post_init()

    def forward(self, pixel_values: torch.Tensor, **kwargs) -> BaseModelOutputWithPooling:
        """Tokens of the last stage ``(B, H*W, C)`` and their normalised mean ``(B, C)``."""
        # Channels-last memory from the stem on: the transformer stages work on (B, H, W, C) grids, so
        # every conv then reads and writes the layout its neighbours use and no stage boundary copies.
        x = self.patch_embed(pixel_values.contiguous(memory_format=torch.channels_last))
        pass_index = None
        if self.training and torch.is_grad_enabled():
            self._training_passes += 1
            pass_index = self._training_passes
        for stage in self.stages:
            x = stage(x, pass_index=pass_index)
        tokens = x.flatten(2).transpose(1, 2)
        return BaseModelOutputWithPooling(last_hidden_state=tokens, pooler_output=self.norm(tokens.mean(dim=1)))


class TinyViTForImageClassification(TinyViTPreTrainedModel):
    """TinyViT with a linear classifier on the pooled, normalised features."""

    def __init__(self, config: TinyViTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.tinyvit = TinyViTModel(config)
        self.classifier = nn.Linear(config.embed_dims[-1], config.num_labels)
        self.post_init()

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None,
                **kwargs) -> ImageClassifierOutput:
        """Logits ``(B, num_labels)``; with ``labels``, also the mean cross-entropy."""
        pooled = self.tinyvit(pixel_values).pooler_output
        logits = self.classifier(pooled)
        # The loss in float32 whatever the compute dtype: a half-precision softmax over 1000 classes loses digits.
        loss = F.cross_entropy(logits.float(), labels) if labels is not None else None
        return ImageClassifierOutput(loss=loss, logits=logits)


config, build = classifier_builders(TinyViTForImageClassification, TinyViTConfig, CONFIGS)
