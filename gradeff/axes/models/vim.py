"""Vision Mamba (Vim) for image classification, in pure PyTorch.

Vim (Zhu et al., "Vision Mamba: Efficient Visual Representation Learning with Bidirectional State Space
Model", ICML 2024; reference code ``hustvl/Vim``, ``vim/models_mamba.py`` and the bidirectional "v2" mixer of
its ``mamba-1p1p1/mamba_ssm/modules/mamba_simple.py``) is a plain isotropic stack, like ViT, whose token mixer
is a bidirectional selective state-space model instead of attention:

* **Patch embedding**: a ``Conv2d`` (kernel ``patch_size``, ``stride``, with bias) turns the image into a
  sequence of ``M`` patch tokens.
* **Middle class token**: one learned token is inserted at position ``M // 2`` (``use_middle_cls_token``),
  so that both scan directions reach it after having seen half of the image; then a learned absolute
  position embedding (``M + 1`` positions) is added.
* **Layers** (``num_hidden_layers``, each a pre-norm residual block): ``x + DropPath(Mixer(RMSNorm(x)))``, the
  residual stream kept in float32 (``residual_in_fp32``). The reference writes the block as
  "add -> norm -> mixer" with the drop path on the *next* block's add and on the final add; unrolled, the
  output of layer ``j`` is dropped with rate ``linspace(0, drop_path_rate, depth)[j]``, which is what the
  pre-norm form here does.
* **Mixer** (bidirectional Mamba-1, ``bimamba_type="v2"``): a shared ``in_proj`` (``d -> 2·d_inner``, no bias)
  gives the SSM input ``x`` and the gate ``z``. Each direction has its own depthwise causal ``conv1d``
  (kernel 4, bias) + SiLU, ``x_proj`` (no bias, ``d_inner -> dt_rank + 2·d_state``: the input-dependent
  step ``Δ``, ``B`` and ``C``), ``dt_proj`` (``dt_rank -> d_inner``, bias; ``Δ = softplus(dt_proj(·))``),
  ``A = -exp(A_log)`` and skip ``D``; the backward direction runs on the flipped sequence and its output is
  flipped back. The two outputs are averaged (``if_devide_out``), gated by ``SiLU(z)`` and projected by the
  shared ``out_proj`` (no bias).
* **Head**: a final RMSNorm, the class token's state, and a linear ``classifier`` (with bias).

The selective scan ``h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t x_t``, ``y_t = C_t · h_t + D x_t`` runs as the parallel
scan of :mod:`gradeff.axes.models.vim_scan`; both directions, stacked on a direction axis, go through one scan call.
Unlike the fused CUDA kernel of ``mamba_ssm``, this path materialises the ``(batch, length, 2, d_state, d_inner)``
discretised inputs and states, which dominate both the step time and the activation memory.

Published numbers: Vim-S uses ``embed_dim=384``, ``depth=24``, patch 16 / stride 16, RMSNorm (eps 1e-5),
``d_state=16``, ``expand=2``, ``d_conv=4``, ``dt_rank = ceil(384 / 16) = 24`` (the reference's
``vim_small_patch16_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2`` and the ``Mamba``
defaults); 26 M parameters at 224 px with 1000 classes (Table 1 of the paper; 25.80 M here); drop path 0.05
in the reference Vim-S ImageNet training script (``vim/scripts/pt-vim-s.sh``; its long-sequence fine-tuning
script ``ft-vim-s.sh`` uses 0). The initialisation follows the reference: PyTorch's default (uniform
``±1/sqrt(fan_in)``) for the mixer's linears and depthwise convs, ``out_proj`` scaled down by
``sqrt(depth)``, ``dt_proj`` weights uniform ``±dt_rank^-0.5`` and bias the inverse softplus of a
log-uniform step in ``[dt_min, dt_max]``, S4D-real ``A_log = log(1..d_state)``, ``D = 1``, LeCun-normal
patch convolution with zero bias, truncated-normal (std 0.02) position embedding, class token and head,
zero head bias.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput

from gradeff.axes.models._layers import DropPath
from gradeff.axes.models._weights import classifier_builders
from gradeff.axes.models.vim_scan import SCANS

__all__ = [
    "CONFIGS",
    "VimConfig",
    "VimForImageClassification",
    "VimLayer",
    "VimMixer",
    "VimModel",
    "build",
    "config",
]

CONFIGS: dict[str, dict] = {
    # The selective scan materialises (batch, length, 2, d_state, d_inner) tensors: width, state size and
    # length set the step time, so the CPU profiles cut d_state besides narrowing and shortening.
    # 32 px images in 8 px patches: 16 patch tokens + the middle class token = 17. Width 48 with d_state 4 costs
    # what width 32 with d_state 8 did (the scan's d_state × d_inner is 384 against 512; step time within 2 %,
    # ~65 ms per AdamW step of 32 on one core) and learns the pretraining source task: held-out accuracy 62.7 %
    # against 13.9 % (seed 0, 1,024 steps); at width 32 the model was too narrow to learn it at the shared rate.
    # No stochastic depth at this size (a few dozen fine-tuning steps need no regularisation).
    "tiny": dict(image_size=32, patch_size=8, stride=8, hidden_size=48, num_hidden_layers=2, state_size=4,
                 drop_path_rate=0.0, num_labels=100),
    # 64 px images in 8 px patches: 64 patch tokens + the class token = 65.
    "small": dict(image_size=64, patch_size=8, stride=8, hidden_size=64, num_hidden_layers=4, state_size=8,
                  num_labels=100),
    # Vim-S at 224 px with an ImageNet head: 196 patches + 1 class token, 25.80 M parameters.
    "paper": dict(image_size=224, patch_size=16, stride=16, hidden_size=384, num_hidden_layers=24, state_size=16,
                  num_labels=1000),
}


class VimConfig(PretrainedConfig):
    """Configuration of a Vision Mamba classifier; the defaults are Vim-S at 224 px.

    Args:
        image_size: side of the square input image, in pixels.
        patch_size: side of the patch-embedding convolution's kernel.
        stride: stride of the patch-embedding convolution (equal to ``patch_size`` in Vim-S).
        num_channels: input image channels.
        hidden_size: model width ``d`` (``embed_dim``).
        num_hidden_layers: number of residual mixer layers (``depth``).
        state_size: SSM state size per channel (``d_state``).
        expand: ``d_inner = expand · hidden_size``.
        conv_kernel: kernel of the depthwise causal convolutions (``d_conv``).
        dt_rank: rank of the step projection; ``None`` means ``ceil(hidden_size / 16)`` as in Mamba.
        dt_min, dt_max, dt_init_floor, dt_scale: initial range of the step ``Δ`` (Mamba defaults).
        rms_norm_eps: epsilon of the RMSNorms.
        drop_path_rate: stochastic-depth rate of the last layer (linearly increasing from 0).
        hidden_dropout_prob: dropout after the position embedding (``drop_rate``, 0 in Vim).
        residual_in_fp32: keep the residual stream in float32 whatever the parameters' dtype.
        divide_output: average (rather than sum) the two directions (``if_devide_out``).
        initializer_range: std of the truncated-normal init of the head and the embeddings.
        scan_impl: ``"parallel"`` (``mambapy.pscan``) or ``"sequential"`` (a step-by-step reference loop).
        **kwargs: ``PretrainedConfig`` arguments, e.g. ``num_labels`` (1000, ImageNet's, unless given).
    """

    model_type = "gradeff_vim_s"

    def __init__(
        self,
        image_size: int = 224,
        patch_size: int = 16,
        stride: int = 16,
        num_channels: int = 3,
        hidden_size: int = 384,
        num_hidden_layers: int = 24,
        state_size: int = 16,
        expand: int = 2,
        conv_kernel: int = 4,
        dt_rank: int | None = None,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        dt_scale: float = 1.0,
        rms_norm_eps: float = 1e-5,
        drop_path_rate: float = 0.05,
        hidden_dropout_prob: float = 0.0,
        residual_in_fp32: bool = True,
        divide_output: bool = True,
        initializer_range: float = 0.02,
        scan_impl: str = "parallel",
        **kwargs,
    ):
        if scan_impl not in SCANS:
            raise ValueError(f"scan_impl must be one of {sorted(SCANS)}, got {scan_impl!r}")
        self.image_size = image_size
        self.patch_size = patch_size
        self.stride = stride
        self.num_channels = num_channels
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.state_size = state_size
        self.expand = expand
        self.conv_kernel = conv_kernel
        self.dt_rank = math.ceil(hidden_size / 16) if dt_rank is None else dt_rank
        self.dt_min = dt_min
        self.dt_max = dt_max
        self.dt_init_floor = dt_init_floor
        self.dt_scale = dt_scale
        self.rms_norm_eps = rms_norm_eps
        self.drop_path_rate = drop_path_rate
        self.hidden_dropout_prob = hidden_dropout_prob
        self.residual_in_fp32 = residual_in_fp32
        self.divide_output = divide_output
        self.initializer_range = initializer_range
        self.scan_impl = scan_impl
        if "num_labels" not in kwargs and "id2label" not in kwargs:
            kwargs["num_labels"] = 1000
        super().__init__(**kwargs)

    @property
    def intermediate_size(self) -> int:
        """``d_inner``: the width of the SSM branch."""
        return self.expand * self.hidden_size

    @property
    def num_patches(self) -> int:
        """Patch tokens per image (the sequence has one more: the class token)."""
        side = (self.image_size - self.patch_size) // self.stride + 1
        return side * side


class VimRMSNorm(nn.Module):
    """RMSNorm computed in float32 (as the fused kernel of the reference does), output in the weight's dtype."""

    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Normalise the last dimension by its root mean square and scale it."""
        out = F.rms_norm(hidden_states.float(), (hidden_states.shape[-1],), self.weight.float(), self.eps)
        return out.to(self.weight.dtype)


class VimEmbeddings(nn.Module):
    """Patch embedding, the class token inserted in the middle of the sequence, absolute position embedding."""

    def __init__(self, config: VimConfig):
        super().__init__()
        self.projection = nn.Conv2d(config.num_channels, config.hidden_size, kernel_size=config.patch_size,
                                    stride=config.stride)
        self.cls_token = nn.Parameter(torch.empty(1, 1, config.hidden_size))
        self.position_embeddings = nn.Parameter(torch.empty(1, config.num_patches + 1, config.hidden_size))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.image_size = config.image_size
        # Both scan directions reach the class token after half of the patches.
        self.cls_position = config.num_patches // 2

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``(batch, channels, H, W)`` -> ``(batch, num_patches + 1, hidden)``."""
        if pixel_values.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"expected {self.image_size}x{self.image_size} images, got {tuple(pixel_values.shape)}")
        patches = self.projection(pixel_values.to(self.projection.weight.dtype)).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(patches.shape[0], -1, -1)
        mid = self.cls_position
        tokens = torch.cat([patches[:, :mid], cls, patches[:, mid:]], dim=1)
        return self.dropout(tokens + self.position_embeddings)


class VimMixer(nn.Module):
    """Bidirectional Mamba-1 mixer (Vim's ``bimamba_type="v2"``), selective scan in pure PyTorch.

    Parameter names follow the reference (``conv1d``/``conv1d_b``, ``x_proj``/``x_proj_b``,
    ``dt_proj``/``dt_proj_b``, ``A_log``/``A_b_log``, ``D``/``D_b``), the ``_b`` set being the backward
    direction's.
    """

    def __init__(self, config: VimConfig):
        super().__init__()
        d_model, d_inner = config.hidden_size, config.intermediate_size
        self.d_inner = d_inner
        self.state_size = config.state_size
        self.dt_rank = config.dt_rank
        self.divide_output = config.divide_output
        self.scan = SCANS[config.scan_impl]
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)

        def conv() -> nn.Conv1d:
            # Depthwise, and causal through kernel-1 padding with the right overhang dropped (as in the
            # reference module; forward computes the same thing, see _causal_conv).
            return nn.Conv1d(d_inner, d_inner, config.conv_kernel, groups=d_inner, padding=config.conv_kernel - 1,
                             bias=True)

        self.conv1d, self.conv1d_b = conv(), conv()
        self.x_proj = nn.Linear(d_inner, config.dt_rank + 2 * config.state_size, bias=False)
        self.x_proj_b = nn.Linear(d_inner, config.dt_rank + 2 * config.state_size, bias=False)
        self.dt_proj = nn.Linear(config.dt_rank, d_inner, bias=True)
        self.dt_proj_b = nn.Linear(config.dt_rank, d_inner, bias=True)
        self.A_log = nn.Parameter(torch.empty(d_inner, config.state_size))
        self.A_b_log = nn.Parameter(torch.empty(d_inner, config.state_size))
        self.D = nn.Parameter(torch.empty(d_inner))
        self.D_b = nn.Parameter(torch.empty(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def _causal_conv(self, xs: torch.Tensor) -> torch.Tensor:
        """Both directions' depthwise causal convolutions on ``(batch, length, 2, d_inner)``, each direction
        in its own token order.

        Written as ``kernel`` shifted multiply-adds of the ``conv1d``/``conv1d_b`` weights (exactly the
        cross-correlation ``nn.Conv1d`` computes with ``kernel - 1`` left padding): for a 4-tap filter this
        is cheaper than two convolution calls, and it needs no transposes to channels-first.
        """
        weight = torch.stack([self.conv1d.weight, self.conv1d_b.weight]).squeeze(2)   # (2, d_inner, K)
        bias = torch.stack([self.conv1d.bias, self.conv1d_b.bias])                    # (2, d_inner)
        kernel, length = weight.shape[-1], xs.shape[1]
        padded = F.pad(xs, (0, 0, 0, 0, kernel - 1, 0))
        out = torch.addcmul(bias, padded[:, :length], weight[..., 0])
        for k in range(1, kernel):
            out = torch.addcmul(out, padded[:, k:k + length], weight[..., k])
        return out

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(batch, length, hidden)`` -> same shape."""
        batch, length, _ = hidden_states.shape
        x, z = self.in_proj(hidden_states).chunk(2, dim=-1)
        # Both directions side by side on a direction axis, the backward one on the flipped sequence; from
        # here on every op handles the two at once (each with its own parameters), so the scan below is a
        # single call: the recurrence is per channel, so stacking directions like channels is exact.
        xs = F.silu(self._causal_conv(torch.stack([x, x.flip(1)], dim=2)))   # (B, L, 2, d_inner)
        deltas, bs, cs = [], [], []
        for x_dir, x_proj, dt_proj in zip(xs.unbind(2), (self.x_proj, self.x_proj_b), (self.dt_proj, self.dt_proj_b),
                                          strict=True):
            dt, b, c = x_proj(x_dir).split([self.dt_rank, self.state_size, self.state_size], dim=-1)
            # softplus(W dt + bias): the reference's fused ``delta_bias`` + ``delta_softplus``.
            deltas.append(F.softplus(dt_proj(dt)))
            bs.append(b)
            cs.append(c)
        # The SSM runs in float32 (like the reference kernel, which also keeps A_log and D in float32)
        # whatever the parameters' dtype.
        xs = xs.float()
        delta, b, c = (torch.stack(t, dim=2).float() for t in (deltas, bs, cs))
        # The SSM tensors are laid out (batch, length, direction, state, channel): the channel axis, the
        # longest, innermost, so the broadcasts below and their reductions in backward run along long
        # contiguous rows rather than along d_state (16) elements at a time.
        a = -torch.exp(torch.stack([self.A_log, self.A_b_log]).float()).transpose(1, 2).contiguous()
        d = torch.stack([self.D, self.D_b]).float()                                       # (2, d_inner)
        decay = torch.exp(delta.unsqueeze(-2) * a)                       # (B, L, 2, N, d_inner), in (0, 1]
        # Δ·x first, then the outer product with B: autograd saves only the small factors.
        inputs = b.unsqueeze(-1) * (delta * xs).unsqueeze(-2)
        # The scan treats every (direction, state, channel) element alike: one flat, contiguous axis gives
        # its element-wise steps long vectorisable rows (and, unless it pads, contiguous states back).
        flat = (batch, length, 1, -1)
        states = self.scan(decay.view(flat), inputs.view(flat)).view(decay.shape)
        # y = C · h + D x: a (1 x N) @ (N x d_inner) product per (sample, token, direction).
        if states.is_contiguous():
            y = (c.unsqueeze(-2) @ states).squeeze(-2)
        else:
            # A padded scan hands back a strided view of its padded states, which it already keeps for
            # backward; a matmul would keep a second, contiguous copy (+40 % activations at 224 px).
            y = (states * c.unsqueeze(-1)).sum(-2)
        y = y + d * xs                                                     # (B, L, 2, d_inner)
        # The backward direction's output is in flipped order: flip it back before combining.
        y_fwd, y_bwd = y.unbind(2)
        y = y_fwd + y_bwd.flip(1)
        if self.divide_output:
            y = y / 2
        # Gating after combining equals gating each direction by its (flipped) z: the gate is element-wise.
        y = y.to(z.dtype) * F.silu(z)
        return self.out_proj(y)


class VimLayer(GradientCheckpointingLayer):
    """Pre-norm residual block ``x + DropPath(Mixer(RMSNorm(x)))``; the unit activation checkpointing recomputes."""

    def __init__(self, config: VimConfig, drop_path_rate: float = 0.0):
        super().__init__()
        self.norm = VimRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mixer = VimMixer(config)
        self.drop_path = DropPath(drop_path_rate)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Residual update; the residual keeps its dtype (float32 when ``residual_in_fp32``)."""
        out = self.mixer(self.norm(hidden_states.to(self.norm.weight.dtype)))
        return hidden_states + self.drop_path(out).to(hidden_states.dtype)


class VimPreTrainedModel(PreTrainedModel):
    """Weight initialisation and checkpointing support shared by the Vim models."""

    config_class = VimConfig
    config: VimConfig
    base_model_prefix = "vim"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["VimEmbeddings", "VimLayer"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """The reference initialisation (see the module docstring), module by module.

        Every write goes through ``transformers.initialization``, which skips tensors already loaded by
        ``from_pretrained``. transformers visits a module after its children, so the mixer's rules (the
        reference leaves its linears at PyTorch's uniform default) override the head's generic
        ``nn.Linear`` rule its linears got first.
        """
        cfg = self.config
        if isinstance(module, VimMixer):
            for linear in (module.in_proj, module.x_proj, module.x_proj_b):
                _default_uniform(linear.weight)
            # GPT-2-style residual rescaling: one residual branch per layer.
            _default_uniform(module.out_proj.weight, scale=1.0 / math.sqrt(cfg.num_hidden_layers))
            for conv in (module.conv1d, module.conv1d_b):
                _default_uniform(conv.weight)
                _default_uniform(conv.bias, fan_in=conv.weight[0].numel())
            dt_std = cfg.dt_rank**-0.5 * cfg.dt_scale
            for dt_proj in (module.dt_proj, module.dt_proj_b):
                init.uniform_(dt_proj.weight, -dt_std, dt_std)
                # softplus(bias) log-uniform in [dt_min, dt_max]; bias = softplus^-1(dt) = dt + log(1 - e^-dt).
                log_dt = torch.rand(module.d_inner, device=dt_proj.bias.device) * (
                    math.log(cfg.dt_max) - math.log(cfg.dt_min)) + math.log(cfg.dt_min)
                dt = torch.exp(log_dt).clamp(min=cfg.dt_init_floor)
                init.copy_(dt_proj.bias, dt + torch.log(-torch.expm1(-dt)))
            # S4D-real: A = -(1, 2, ..., N) for every channel.
            s4d = torch.arange(1, module.state_size + 1, dtype=torch.float32, device=module.A_log.device)
            for a_log in (module.A_log, module.A_b_log):
                init.copy_(a_log, torch.log(s4d).expand_as(a_log))
            init.ones_(module.D)
            init.ones_(module.D_b)
        elif isinstance(module, VimEmbeddings):
            init.lecun_normal_(module.projection.weight)
            init.zeros_(module.projection.bias)
            init.trunc_normal_(module.position_embeddings, std=cfg.initializer_range)
            init.trunc_normal_(module.cls_token, std=cfg.initializer_range)
        elif isinstance(module, VimRMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, nn.Linear):
            # The classifier's rule (the mixer re-initialises its own linears afterwards).
            init.trunc_normal_(module.weight, std=cfg.initializer_range)
            if module.bias is not None:
                init.zeros_(module.bias)


def _default_uniform(tensor: torch.Tensor, *, fan_in: int | None = None, scale: float = 1.0) -> None:
    """PyTorch's default Linear/Conv init, ``U(±1/sqrt(fan_in))`` (``kaiming_uniform_(a=√5)``), times ``scale``."""
    if fan_in is None:
        fan_in = tensor[0].numel()
    bound = scale / math.sqrt(fan_in)
    init.uniform_(tensor, -bound, bound)


class VimModel(VimPreTrainedModel):
    """The Vim backbone: embeddings, the mixer layers and the final norm; pools the middle class token."""

    def __init__(self, config: VimConfig):
        super().__init__(config)
        self.embeddings = VimEmbeddings(config)
        depth = config.num_hidden_layers
        # linspace(0, rate, depth) in plain Python: works on the meta device too.
        rates = [config.drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
        self.layers = nn.ModuleList([VimLayer(config, rate) for rate in rates])
        self.norm_f = VimRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def forward(self, pixel_values: torch.Tensor, **kwargs) -> BaseModelOutputWithPooling:
        """Returns the normalised sequence and, as ``pooler_output``, the class token's state."""
        hidden_states = self.embeddings(pixel_values)
        if self.config.residual_in_fp32:
            hidden_states = hidden_states.float()
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        hidden_states = self.norm_f(hidden_states.to(self.norm_f.weight.dtype))
        pooled = hidden_states[:, self.embeddings.cls_position]
        return BaseModelOutputWithPooling(last_hidden_state=hidden_states, pooler_output=pooled)


class VimForImageClassification(VimPreTrainedModel):
    """Vim backbone + a linear ``classifier`` on the middle class token."""

    def __init__(self, config: VimConfig):
        super().__init__(config)
        self.vim = VimModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None,
                **kwargs) -> ImageClassifierOutput:
        """Logits ``(batch, num_labels)``; with ``labels``, also the mean cross-entropy."""
        pooled = self.vim(pixel_values).pooler_output
        logits = self.classifier(pooled)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float(), labels.to(logits.device))
        return ImageClassifierOutput(loss=loss, logits=logits)


config, build = classifier_builders(VimForImageClassification, VimConfig, CONFIGS)
