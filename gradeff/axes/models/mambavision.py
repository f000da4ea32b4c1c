"""MambaVision-T: a hybrid Mamba-Transformer image classifier in plain PyTorch.

Architecture (Hatamizadeh & Kautz, "MambaVision: A Hybrid Mamba-Transformer Vision Backbone", CVPR 2025;
reference implementation NVlabs/MambaVision ``mambavision/models/mamba_vision.py``):

* **Stem** (``patch_embed``): two 3x3 stride-2 convolutions without bias, each followed by BatchNorm
  (eps 1e-4) and ReLU: ``3 -> in_dim -> dim`` channels at 1/4 resolution.
* **Stages 1-2**: residual ``ConvBlock``s (3x3 conv with bias, BatchNorm, tanh-GELU, 3x3 conv, BatchNorm,
  optional layer scale, stochastic depth) at widths ``dim`` and ``2 dim``.
* **Downsample** after stages 1-3: a 3x3 stride-2 convolution without bias that doubles the width.
* **Stages 3-4**: the feature map is cut into ``window x window`` windows (zero-padded on the right and
  bottom when the map is not a multiple, then cropped back, as the reference does); every window is a
  token sequence for pre-norm blocks ``x + mixer(LN(x))``, ``x + MLP(LN(x))``. The first half of a stage's
  blocks (``ceil(depth / 2)`` of them) use the ``MambaVisionMixer``, the rest multi-head self-attention.
  The mixer projects to ``x`` and ``z``, runs a non-causal depthwise conv1d + SiLU on each branch, a
  selective scan on ``x`` only, and concatenates the ungated ``z`` branch back before the output
  projection: ``out_proj(cat(scan(x), z))``.
* **Head**: BatchNorm over the last feature map, global average pooling, linear ``classifier``.

Published numbers and where they come from: the ``mamba_vision_T`` factory of the reference code gives
``dim 80, in_dim 32, depths (1, 3, 8, 4), num_heads (2, 4, 8, 16), window_size (8, 8, 14, 7), mlp_ratio 4,
drop_path_rate 0.2`` at 224 px; the Block constructor fixes the mixer at ``d_state 8, d_conv 3, expand 1``;
the model defaults give ``qkv_bias=True`` and no layer scale for -T. The reference README's table of
ImageNet-1K models (and the paper) gives MambaVision-T 31.8 M parameters with a 1000-class head; this
module builds 31.79 M (and -T2/-S/-B/-L/-L2 at their shapes match their published sizes to 0.1 %).

At 224 px the stage-3 map is 14x14 and the stage-4 map 7x7, so the published windows (14, 7) are each a
whole map. The small profiles keep that property: their stage-3/4 windows equal the (smaller) maps
instead of padding a 2x2 map to a mostly-zero 14x14 window. Padding still works for any window size.

Every ConvBlock and hybrid block is a ``GradientCheckpointingLayer``. The conv blocks' BatchNorms keep
their running statistics from being updated a second time when checkpointing replays a block in the
backward pass (see :class:`ReplaySafeBatchNorm2d`), so training with or without checkpointing gives
bit-identical gradients and statistics.

The selective scan is pure PyTorch: ``mambapy.pscan.pscan`` (a Blelloch parallel scan that pads the
sequence to a power of two internally), so the model runs on CPU and on any GPU without mamba-ssm.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from mambapy.pscan import pscan
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput

from gradeff.axes.models._layers import ReplaySafeBatchNorm2d, drop_path
from gradeff.axes.models._weights import classifier_builders

__all__ = [
    "CONFIGS",
    "MambaVisionConfig",
    "MambaVisionForImageClassification",
    "MambaVisionModel",
    "build",
    "config",
    "window_partition",
    "window_reverse",
]

CONFIGS: dict[str, dict] = {
    # 32 px (CIFAR's own size): the stem leaves 8x8, then 4x4, 2x2 and 1x1 maps. Every published kind of
    # stage and block is kept (one ConvBlock per conv stage, one Mamba and one attention block per hybrid
    # stage); the stage-3/4 windows cover their whole maps, as the published 14 and 7 do at 224 px.
    # Widths 16-32-64-128 (a 16-channel stem), 64-wide attention heads: a training step of 32 in ~27 ms of CPU on
    # one thread. At widths 8-16-32-64 (8 channels through the stem and stage 1 for an object's shape and two
    # colours) pretraining reached 49 % held-out source accuracy, its features a linear probe's 16 % on the
    # CIFAR-100 stand-in and its fine-tuning cells at most 9 % there (the pixel 1-NN: 8 %), in ~21 ms a step;
    # at these widths 81 %, 26 % and 18-20 %.
    # No stochastic depth at this size (a few dozen fine-tuning steps need no regularisation).
    "tiny": dict(image_size=32, in_dim=16, dim=16, depths=(1, 1, 2, 2), num_heads=(1, 1, 1, 2),
                 window_size=(8, 8, 2, 1), drop_path_rate=0.0, num_labels=100),
    # 64 px: 16x16 -> 8x8 -> 4x4 -> 2x2 maps; about half the published depths (1, 3, 8, 4) and widths/2.5.
    "small": dict(image_size=64, in_dim=16, dim=32, depths=(1, 2, 4, 2), num_heads=(1, 2, 4, 8),
                  window_size=(8, 8, 4, 2), num_labels=100),
    # mamba_vision_T of the reference code at 224 px with the ImageNet head: 31.8 M parameters.
    "paper": dict(image_size=224, in_dim=32, dim=80, depths=(1, 3, 8, 4), num_heads=(2, 4, 8, 16),
                  window_size=(8, 8, 14, 7), num_labels=1000),
}

_NUM_STAGES = 4  # the reference hard-wires stages 1-2 as convolutional and 1-3 as downsampling


class MambaVisionConfig(PretrainedConfig):
    """Configuration of a MambaVision classifier; the defaults are MambaVision-T at 224 px.

    Field names follow the reference code. ``window_size`` has one entry per stage (the entries of the
    convolutional stages 1-2 are unused, as in the reference). ``d_state``, ``d_conv`` and ``expand`` are
    the Mamba mixer's state size, conv1d kernel and expansion (fixed in the reference's Block).
    ``layer_scale`` / ``layer_scale_conv`` enable per-channel layer scale in the hybrid / conv blocks
    (None for -T, 1e-5 for -B and -L). ``attention_dropout`` and ``hidden_dropout`` are the reference's
    ``attn_drop_rate`` and ``drop_rate`` (0 in every published model).
    """

    model_type = "gradeff_mambavision_t"

    image_size: int = 224
    num_channels: int = 3
    in_dim: int = 32
    dim: int = 80
    depths: list[int] | tuple[int, ...] = (1, 3, 8, 4)
    num_heads: list[int] | tuple[int, ...] = (2, 4, 8, 16)
    window_size: list[int] | tuple[int, ...] = (8, 8, 14, 7)
    mlp_ratio: float | int = 4.0
    drop_path_rate: float | int = 0.2
    qkv_bias: bool = True
    attention_dropout: float | int = 0.0
    hidden_dropout: float | int = 0.0
    layer_scale: float | None = None
    layer_scale_conv: float | None = None
    d_state: int = 8
    d_conv: int = 3
    expand: int = 1
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02

    def __post_init__(self, **kwargs):
        for name in ("depths", "num_heads", "window_size"):
            if len(getattr(self, name)) != _NUM_STAGES:
                raise ValueError(f"{name} needs one entry per stage ({_NUM_STAGES}), got {getattr(self, name)}")
        for stage in (2, 3):
            width = self.dim * 2**stage
            if width % self.num_heads[stage]:
                raise ValueError(f"stage {stage + 1} width {width} is not divisible by {self.num_heads[stage]} heads")
            if (width * self.expand) % 2:
                raise ValueError(f"stage {stage + 1} mixer width {width * self.expand} must be even (x and z halves)")
        super().__post_init__(**kwargs)

    @property
    def num_features(self) -> int:
        """Width of the last stage, i.e. of the pooled features the classifier reads."""
        return self.dim * 2 ** (_NUM_STAGES - 1)


def window_partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """Cut a ``(batch, C, H, W)`` map (H, W multiples of ``window``) into ``(batch * windows, window², C)``.

    Tokens of a window are in row-major order; windows are ordered row-major per image.
    """
    batch, channels, height, width = x.shape
    x = x.view(batch, channels, height // window, window, width // window, window)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(-1, window * window, channels)


def window_reverse(windows: torch.Tensor, window: int, height: int, width: int) -> torch.Tensor:
    """Inverse of :func:`window_partition`: ``(batch * windows, window², C)`` back to ``(batch, C, H, W)``."""
    channels = windows.shape[-1]
    batch = windows.shape[0] // ((height // window) * (width // window))
    x = windows.view(batch, height // window, width // window, window, window, channels)
    return x.permute(0, 5, 1, 3, 2, 4).reshape(batch, channels, height, width)


class MambaVisionPatchEmbed(nn.Module):
    """Convolutional stem: two 3x3 stride-2 conv (no bias) + BatchNorm (eps 1e-4) + ReLU, 1/4 resolution."""

    def __init__(self, config: MambaVisionConfig) -> None:
        super().__init__()
        # Indices 0, 1, 3, 4 of this Sequential match the reference's parameter names.
        self.conv_down = nn.Sequential(
            nn.Conv2d(config.num_channels, config.in_dim, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(config.in_dim, eps=1e-4),
            nn.ReLU(),
            nn.Conv2d(config.in_dim, config.dim, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(config.dim, eps=1e-4),
            nn.ReLU(),
        )

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(batch, 3, H, W)`` -> ``(batch, dim, H/4, W/4)``."""
        return self.conv_down(pixel_values)


class MambaVisionConvBlock(GradientCheckpointingLayer):
    """Residual block of stages 1-2: conv3x3 -> BN -> GELU(tanh) -> conv3x3 -> BN (-> layer scale)."""

    def __init__(self, dim: int, drop_path_rate: float, layer_scale: float | None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(dim, dim, 3, padding=1)
        self.norm1 = ReplaySafeBatchNorm2d(dim)
        self.act1 = nn.GELU(approximate="tanh")
        self.conv2 = nn.Conv2d(dim, dim, 3, padding=1)
        self.norm2 = ReplaySafeBatchNorm2d(dim)
        self.gamma = nn.Parameter(torch.full((dim,), float(layer_scale))) if layer_scale is not None else None
        self.drop_path_rate = drop_path_rate

    def forward(self, hidden_states: torch.Tensor, pass_index: int | None = None) -> torch.Tensor:
        """``(batch, dim, H, W)`` in and out; ``pass_index`` goes to the BatchNorms (see ReplaySafeBatchNorm2d)."""
        x = self.act1(self.norm1(self.conv1(hidden_states), pass_index))
        x = self.norm2(self.conv2(x), pass_index)
        if self.gamma is not None:
            x = x * self.gamma.view(1, -1, 1, 1)
        return hidden_states + drop_path(x, self.drop_path_rate, self.training)


class MambaVisionMixer(nn.Module):
    """MambaVision's token mixer: a selective scan on half the channels, the other half only convolved.

    ``in_proj`` maps the ``d_model`` tokens to ``x`` and ``z`` (``d_inner / 2`` each). Each half goes
    through its own non-causal depthwise conv1d (``padding="same"``: an image window has no time
    direction) and SiLU. ``x`` is then scanned by a selective SSM whose ``dt, B, C`` come from ``x``
    itself (``x_proj``, then ``dt_proj`` up to the channel count); ``z`` skips the scan and is
    concatenated to its output (it is not a gate, unlike in Mamba), and ``out_proj`` mixes both halves.

    The step size is ``softplus(dt_proj(dt) + dt_proj.bias)``: the reference applies ``dt_proj`` with
    its bias and hands the same bias to the fused scan kernel as ``delta_bias`` again, so the released
    weights were trained with the bias counted twice; that is kept here.
    """

    def __init__(self, d_model: int, d_state: int, d_conv: int, expand: int) -> None:
        super().__init__()
        self.d_inner = expand * d_model
        self.d_half = self.d_inner // 2
        self.d_state = d_state
        self.dt_rank = math.ceil(d_model / 16)
        # Biases as in the reference: none on in/out/x projections or on the conv1ds
        # (its ``bias=conv_bias // 2`` is 0), one on dt_proj.
        self.in_proj = nn.Linear(d_model, self.d_inner, bias=False)
        self.x_proj = nn.Linear(self.d_half, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_half, bias=True)
        self.A_log = nn.Parameter(torch.empty(self.d_half, d_state))
        self.D = nn.Parameter(torch.empty(self.d_half))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)
        self.conv1d_x = nn.Conv1d(self.d_half, self.d_half, d_conv, padding="same", groups=self.d_half, bias=False)
        self.conv1d_z = nn.Conv1d(self.d_half, self.d_half, d_conv, padding="same", groups=self.d_half, bias=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(batch, length, d_model)`` in and out."""
        # Conv1d wants channels first; the scan and the projections want them last.
        x, z = self.in_proj(hidden_states).transpose(1, 2).chunk(2, dim=1)
        x = F.silu(self.conv1d_x(x)).transpose(1, 2)
        z = F.silu(self.conv1d_z(z)).transpose(1, 2)
        dt, b, c = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt) + self.dt_proj.bias)
        y = self.selective_scan(x, delta, b, c)
        return self.out_proj(torch.cat([y, z], dim=-1))

    def selective_scan(self, x: torch.Tensor, delta: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Discretised SSM ``h_t = exp(delta_t A) h_{t-1} + delta_t B_t x_t``, ``y_t = C_t h_t + D x_t``.

        Shapes: ``x, delta (batch, L, d_half)``, ``b, c (batch, L, d_state)``. The discretisation is the
        one of Mamba's selective-scan kernel (zero-order hold for A, ``delta B`` for B); the recurrence runs
        as a parallel scan over ``(batch, L, d_half, d_state)``.
        """
        a = -torch.exp(self.A_log)  # (d_half, d_state), negative: a decaying state
        decay = torch.exp(delta.unsqueeze(-1) * a)
        inputs = (delta * x).unsqueeze(-1) * b.unsqueeze(2)
        states = pscan(decay, inputs)
        return (states @ c.unsqueeze(-1)).squeeze(-1) + self.D * x


class MambaVisionAttention(nn.Module):
    """Multi-head self-attention over the tokens of a window (no positional bias, as in the reference)."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool, attention_dropout: float,
                 hidden_dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.attention_dropout = attention_dropout
        self.proj_drop = nn.Dropout(hidden_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(batch, length, dim)`` in and out."""
        batch, length, dim = hidden_states.shape
        qkv = self.qkv(hidden_states).view(batch, length, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attention_dropout if self.training else 0.0)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(batch, length, dim)))


class MambaVisionMlp(nn.Module):
    """Two-layer MLP with exact GELU (timm's ``Mlp``: fc1 -> GELU -> dropout -> fc2 -> dropout)."""

    def __init__(self, dim: int, hidden_dim: int, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(..., dim)`` in and out."""
        return self.drop(self.fc2(self.drop(self.act(self.fc1(hidden_states)))))


class MambaVisionBlock(GradientCheckpointingLayer):
    """Hybrid-stage block: ``x + gamma_1 * mixer(LN(x))``, ``x + gamma_2 * MLP(LN(x))``, stochastic depth.

    The mixer is a :class:`MambaVisionMixer` or a :class:`MambaVisionAttention` (``use_attention``).
    """

    def __init__(self, config: MambaVisionConfig, dim: int, num_heads: int, use_attention: bool,
                 drop_path_rate: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        if use_attention:
            self.mixer = MambaVisionAttention(dim, num_heads, config.qkv_bias, config.attention_dropout,
                                              config.hidden_dropout)
        else:
            self.mixer = MambaVisionMixer(dim, config.d_state, config.d_conv, config.expand)
        self.norm2 = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.mlp = MambaVisionMlp(dim, int(dim * config.mlp_ratio), config.hidden_dropout)
        scale = config.layer_scale
        self.gamma_1 = nn.Parameter(torch.full((dim,), float(scale))) if scale is not None else None
        self.gamma_2 = nn.Parameter(torch.full((dim,), float(scale))) if scale is not None else None
        self.drop_path_rate = drop_path_rate

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(windows, tokens, dim)`` in and out."""
        x = self.mixer(self.norm1(hidden_states))
        if self.gamma_1 is not None:
            x = x * self.gamma_1
        hidden_states = hidden_states + drop_path(x, self.drop_path_rate, self.training)
        x = self.mlp(self.norm2(hidden_states))
        if self.gamma_2 is not None:
            x = x * self.gamma_2
        return hidden_states + drop_path(x, self.drop_path_rate, self.training)


class MambaVisionDownsample(nn.Module):
    """3x3 stride-2 convolution without bias that halves the resolution and doubles the width."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.reduction = nn.Sequential(nn.Conv2d(dim, 2 * dim, 3, stride=2, padding=1, bias=False))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(batch, dim, H, W)`` -> ``(batch, 2 dim, ceil(H/2), ceil(W/2))``."""
        return self.reduction(hidden_states)


class MambaVisionLevel(nn.Module):
    """One stage: its blocks (convolutional, or hybrid over windows) and the downsample that follows it."""

    def __init__(self, config: MambaVisionConfig, stage: int, drop_path_rates: list[float]) -> None:
        super().__init__()
        dim = config.dim * 2**stage
        depth = config.depths[stage]
        self.conv = stage < 2
        self.window_size = config.window_size[stage]
        if self.conv:
            blocks = [MambaVisionConvBlock(dim, rate, config.layer_scale_conv) for rate in drop_path_rates]
        else:
            # The reference's split: Mamba mixers for the first ceil(depth / 2) blocks, attention after.
            first_attention = (depth + 1) // 2
            blocks = [MambaVisionBlock(config, dim, config.num_heads[stage], i >= first_attention, rate)
                      for i, rate in enumerate(drop_path_rates)]
        self.blocks = nn.ModuleList(blocks)
        self.downsample = MambaVisionDownsample(dim) if stage < _NUM_STAGES - 1 else None

    def forward(self, hidden_states: torch.Tensor, pass_index: int | None = None) -> torch.Tensor:
        """``(batch, C, H, W)`` -> the next stage's input (or the last feature map)."""
        if self.conv:
            for block in self.blocks:
                hidden_states = block(hidden_states, pass_index=pass_index)
        else:
            height, width = hidden_states.shape[-2:]
            window = self.window_size
            pad_bottom, pad_right = -height % window, -width % window
            if pad_bottom or pad_right:
                hidden_states = F.pad(hidden_states, (0, pad_right, 0, pad_bottom))
            tokens = window_partition(hidden_states, window)
            for block in self.blocks:
                tokens = block(tokens)
            hidden_states = window_reverse(tokens, window, height + pad_bottom, width + pad_right)
            if pad_bottom or pad_right:
                hidden_states = hidden_states[:, :, :height, :width].contiguous()
        if self.downsample is not None:
            hidden_states = self.downsample(hidden_states)
        return hidden_states


class MambaVisionPreTrainedModel(PreTrainedModel):
    """Weight initialisation and checkpointing support shared by the MambaVision models.

    Initialisation as published: the reference applies its ``_init_weights`` to every module after
    construction, so every Linear (``dt_proj`` included, whose Mamba-style dt initialisation this
    overwrites) gets a truncated normal (std 0.02) and a zero bias, LayerNorm and BatchNorm ones and zeros;
    convolutions keep PyTorch's default (Kaiming-uniform with a = sqrt(5)); ``A_log = log(1..d_state)``
    per channel, ``D = 1``; layer-scale gammas start at their configured value.
    """

    config_class = MambaVisionConfig
    config: MambaVisionConfig
    base_model_prefix = "mambavision"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["MambaVisionConvBlock", "MambaVisionBlock"]

    def _init_weights(self, module: nn.Module) -> None:
        """Initialise one module (see the class docstring)."""
        if isinstance(module, nn.Linear):
            init.trunc_normal_(module.weight, std=self.config.initializer_range)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, (nn.Conv1d, nn.Conv2d)):
            # PyTorch's own default for convolutions, which the reference never overrides.
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            if module.bias is not None:
                fan_in = module.weight[0].numel()
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, (nn.LayerNorm, nn.BatchNorm2d)):
            init.ones_(module.weight)
            init.zeros_(module.bias)
            if isinstance(module, nn.BatchNorm2d):
                init.zeros_(module.running_mean)
                init.ones_(module.running_var)
                init.zeros_(module.num_batches_tracked)
        elif isinstance(module, MambaVisionMixer):
            states = torch.arange(1, module.d_state + 1, dtype=module.A_log.dtype, device=module.A_log.device)
            init.copy_(module.A_log, torch.log(states).expand(module.d_half, -1))
            init.ones_(module.D)
        elif isinstance(module, MambaVisionConvBlock) and module.gamma is not None:
            init.constant_(module.gamma, self.config.layer_scale_conv)
        elif isinstance(module, MambaVisionBlock) and module.gamma_1 is not None:
            init.constant_(module.gamma_1, self.config.layer_scale)
            init.constant_(module.gamma_2, self.config.layer_scale)


class MambaVisionModel(MambaVisionPreTrainedModel):
    """The MambaVision backbone: stem, four stages, final BatchNorm and global average pooling."""

    def __init__(self, config: MambaVisionConfig) -> None:
        super().__init__(config)
        self.patch_embed = MambaVisionPatchEmbed(config)
        # Stochastic depth grows linearly over all blocks of all stages, conv blocks included.
        rates = torch.linspace(0, config.drop_path_rate, sum(config.depths), device="cpu").tolist()
        bounds = [sum(config.depths[:i]) for i in range(_NUM_STAGES + 1)]
        self.levels = nn.ModuleList(
            MambaVisionLevel(config, stage, rates[bounds[stage]:bounds[stage + 1]]) for stage in range(_NUM_STAGES)
        )
        self.norm = nn.BatchNorm2d(config.num_features)
        # Training forwards so far; the conv blocks' BatchNorms use it to recognise checkpoint replays.
        self._pass_index = 0
        self.post_init()

    def forward(self, pixel_values: torch.Tensor, **kwargs) -> BaseModelOutputWithPooling:
        """``last_hidden_state``: the normalised last map ``(batch, C, h, w)``; ``pooler_output``: its mean."""
        pass_index = None
        if self.training:
            self._pass_index += 1
            pass_index = self._pass_index
        hidden_states = self.patch_embed(pixel_values)
        for level in self.levels:
            hidden_states = level(hidden_states, pass_index=pass_index)
        hidden_states = self.norm(hidden_states)
        return BaseModelOutputWithPooling(last_hidden_state=hidden_states, pooler_output=hidden_states.mean((2, 3)))


class MambaVisionForImageClassification(MambaVisionPreTrainedModel):
    """MambaVision backbone + linear ``classifier`` on the pooled features; cross-entropy loss."""

    def __init__(self, config: MambaVisionConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.mambavision = MambaVisionModel(config)
        self.classifier = nn.Linear(config.num_features, config.num_labels)
        self.post_init()

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None,
                **kwargs) -> ImageClassifierOutput:
        """Logits ``(batch, num_labels)``; ``loss`` is the mean cross-entropy when ``labels`` are given."""
        pooled = self.mambavision(pixel_values).pooler_output
        logits = self.classifier(pooled)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return ImageClassifierOutput(loss=loss, logits=logits)


config, build = classifier_builders(MambaVisionForImageClassification, MambaVisionConfig, CONFIGS)
