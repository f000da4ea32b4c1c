"""The model axis: MODELS registry and ``build_model``.

Model modules import transformers; this module does not, so collecting the grid stays
light (the builders are imported by name only when a cell is built).

May import: :mod:`gradeff.specs`, :mod:`gradeff.meters` and the other axes (never in a cycle).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradeff.axes.models.sizes import (
    FINE_TUNING,
    SMALL_MAIN,
    TINY_CAPTION,
    TINY_CLASSIFIER,
    TINY_MAIN,
    TINY_MASKED,
    TINY_TEXT,
)
from gradeff.specs.profiles import HParams, validate_profile
from gradeff.specs.registry import Registry

if TYPE_CHECKING:
    import torch

__all__ = ["MODELS", "ModelSpec", "build_model"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One model family of the grid.

    Attributes:
        key: registry key, also a pytest marker (``-m llm``).
        name: human-readable name used in reports.
        family: architecture family, also a pytest marker (``-m decoder``).
        task: key of its own task (see ``gradeff.axes.data.TASKS``); it can train on any task of that kind.
        module: module that defines ``build(profile, *, vocab_size, num_labels, weights_dir, device)``.
        builder: that ``build`` function itself, instead of a module (a model registered from a user's
            conftest or package); one of ``module`` and ``builder`` is required.
        supports_checkpointing: whether activation checkpointing can be enabled.
        fine_tunes: whether its cells start from pretrained weights (the PEFT study fine-tunes;
            the main study trains from random initialisation).
        has_biases: whether it has bias parameters at all (BitFit trains only biases; a bias-free
            model such as Llama has nothing for it to train).
        head: names of the task-head modules: trained by every fine-tuning method, and freshly
            initialised when a pretrained backbone starts on a new dataset.
        batch_norm: it normalises with batch statistics in training (BatchNorm), so samples of a batch interact:
            accumulating k micro-batches is not the large batch (each micro-batch is normalised by its own
            statistics), and the law holds only with the statistics frozen. Its fine-tuning cells (from pretrained
            weights) freeze them (:func:`gradeff.axes.models._layers.freeze_batch_statistics`); its pretraining does
            not.
        requires: importable modules beyond the default install, with the pip extra that brings
            them, e.g. ``(("peft", "peft"),)``; a cell whose modules are missing is skipped with
            the install hint.
        methods: the fine-tuning methods that make sense for it (a foundation-model baseline is
            evaluated with its own: ``zero_shot``, ``linear_probe``); empty: every method.
        hparams: profile → :class:`gradeff.specs.profiles.HParams` it trains with (rate, batch, epochs, task sizes);
            a profile it does not give uses those of the first model of the same task that gives it (a built-in
            one for a registered model).
        pretraining: profile → fields of :class:`gradeff.studies.hparams.PretrainHParams` this backbone pretrains with
            instead of the profile's (a rate of its own); the source task's samples stay the profile's.
        lora_targets: module-name suffixes of the linears LoRA (AdaLoRA, QLoRA) adapts.
        hub_id: the hub repository of its published weights, what ``--gradeff-weights KEY=hub`` loads (with
            ``--gradeff-allow-hub``).
        needs_weights: its cells run only from given weights (``--gradeff-weights``) and skip with "needs
            weights: ..." without them: a baseline whose random weights would only measure chance and whose
            cost is the published model's only at its published size.
        unavailable: why its cells cannot run even with weights (no implementation here); empty if they can.
        native_image_size: its builder takes ``image_size`` and sizes the model's input for it, so a dataset of its
            own image size (``TaskSpec.sizes``: scikit-learn's 8 px digits) is read at that size; without it every
            dataset is resampled to the model's own size at the profile.
    """

    key: str
    name: str
    family: str
    task: str
    module: str = ""
    builder: Callable[..., torch.nn.Module] | None = None
    supports_checkpointing: bool = True
    fine_tunes: bool = False
    has_biases: bool = True
    head: tuple[str, ...] = ()
    batch_norm: bool = False
    requires: tuple[tuple[str, str], ...] = ()
    methods: tuple[str, ...] = ()
    hparams: Mapping[str, HParams] | None = None
    pretraining: Mapping[str, Mapping[str, Any]] | None = None
    lora_targets: tuple[str, ...] = ()
    hub_id: str = ""
    needs_weights: bool = False
    unavailable: str = ""
    native_image_size: bool = False


# Linears LoRA (and AdaLoRA, QLoRA) adapts, by module-name suffix: every attention projection and MLP layer, the
# usual choice for ViTs in the LoRA and QLoRA papers (adapting all linears comes closest to full fine-tuning).
# Convolutions (patch embeddings, TinyViT's MBConvs, MambaVision's conv stages) are not linears and stay frozen; the
# head trains in full.
_VIT_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2")
_CLIP_LINEARS = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")
# A vision tower and a Llama-style decoder.
_VLM_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "out_proj", "fc1", "fc2", "gate_proj", "up_proj", "down_proj")
# Fused q/k/v, attention output and MLP: 92 % of TinyViT-21M's weights.
_TINYVIT_LINEARS = ("qkv", "proj", "fc1", "fc2")
# The mixer's in/out projections, shared by both scan directions (~85 % of a layer's weights). x_proj and dt_proj
# are already low-rank bottlenecks (dt rank = width / 16): an adapter adds little there.
_VIM_LINEARS = ("in_proj", "out_proj")
# Attention qkv/proj, the Mamba mixer's in/out projections and the MLPs of the hybrid stages: 99.6 % of the blocks'
# linear weights; x_proj and dt_proj left out as in Vim.
_MAMBAVISION_LINEARS = ("qkv", "proj", "in_proj", "out_proj", "fc1", "fc2")

MODELS: Registry[ModelSpec] = Registry(
    "model",
    (
        ModelSpec(key="vit", name="ViT (ViT-B/16 style)", family="vision", task="image_classification",
                  module="gradeff.axes.models.vit", head=("classifier",), lora_targets=_VIT_LINEARS,
                  native_image_size=True,
                  hparams={"tiny": HParams(**TINY_CLASSIFIER),
                           "small": HParams(**SMALL_MAIN, image_size=64, num_classes=10),
                           # paper: section 3 of the main paper, here and for the other three.
                           "paper": HParams(lr=3e-4, batch_size=64, epochs=25, train_samples=4096,
                                            heldout_samples=1024, validation_samples=1024, eval_every=16,
                                            image_size=224, num_classes=100)}),
        ModelSpec(key="modernbert", name="ModernBERT (masked LM)", family="encoder", task="masked_lm",
                  module="gradeff.axes.models.modernbert", lora_targets=("Wqkv", "Wo", "Wi"),
                  hparams={"tiny": HParams(**TINY_MASKED),
                           "small": HParams(**SMALL_MAIN, seq_len=128, num_states=1020),
                           "paper": HParams(lr=1e-4, batch_size=32, epochs=25, train_samples=4096,
                                            heldout_samples=1024, validation_samples=1024, eval_every=32,
                                            seq_len=512, num_states=2048)}),
        ModelSpec(key="llm", name="Llama-3.2-1B-style decoder", family="decoder", task="causal_lm",
                  module="gradeff.axes.models.llm", has_biases=False,
                  lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                  hparams={"tiny": HParams(**TINY_MAIN, warmup_ratio=0.03, **TINY_TEXT),
                           "small": HParams(**SMALL_MAIN, warmup_ratio=0.03, seq_len=128, num_states=1020),
                           "paper": HParams(lr=2e-5, batch_size=16, epochs=25, train_samples=2048,
                                            heldout_samples=512, validation_samples=512, eval_every=32,
                                            warmup_ratio=0.03, seq_len=512, num_states=2048)}),
        ModelSpec(key="vlm", name="nanoVLM-style vision-language model", family="multimodal",
                  task="image_captioning", module="gradeff.axes.models.vlm", lora_targets=_VLM_LINEARS,
                  hparams={"tiny": HParams(**TINY_CAPTION),
                           "small": HParams(**SMALL_MAIN, image_size=64, num_classes=10, caption_len=32,
                                            num_states=1020),
                           "paper": HParams(lr=5e-5, batch_size=32, epochs=25, train_samples=4096,
                                            heldout_samples=1024, validation_samples=1024, eval_every=32,
                                            image_size=224, num_classes=100, caption_len=128, num_states=2048)}),
        # The PEFT study's backbones: two Transformers and two Mamba-based models, fine-tuned.
        ModelSpec(key="vit_s", name="ViT-S/16", family="transformer", task="cifar100",
                  module="gradeff.axes.models.vit_s", fine_tunes=True, head=("classifier",),
                  hub_id="timm/vit_small_patch16_224.augreg_in21k_ft_in1k", lora_targets=_VIT_LINEARS,
                  hparams=FINE_TUNING),
        # At tiny, TinyViT pretrains in 512 steps of 128 (8 epochs of the source task) at 4e-3 instead of 1,024 of
        # 32 at 2e-3, in the same CPU seconds (its step is set by its many small ops more than by the batch): held-out
        # source accuracy 61 % → 81 % (seed 0), a linear probe of its features on the CIFAR-100 stand-in 19 → 28 %.
        ModelSpec(key="tinyvit", name="TinyViT", family="transformer", task="cifar100",
                  module="gradeff.axes.models.tinyvit", fine_tunes=True, head=("classifier",), batch_norm=True,
                  pretraining={"tiny": {"batch_size": 128, "epochs": 8, "lr": 4e-3}},
                  hub_id="timm/tiny_vit_21m_224.dist_in22k_ft_in1k", lora_targets=_TINYVIT_LINEARS,
                  hparams=FINE_TUNING),
        # At tiny, Vim pretrains at twice the shared rate: held-out source accuracy 62.7 % → 78.5 % in the same
        # 1,024 steps (seed 0), where the same change costs TinyViT and MambaVision-T a few points (58 → 55 %,
        # 50 → 48 %).
        ModelSpec(key="vim_s", name="Vision Mamba (Vim-S)", family="mamba", task="cifar100",
                  module="gradeff.axes.models.vim", fine_tunes=True, head=("classifier",),
                  pretraining={"tiny": {"lr": 4e-3}},
                  hub_id="hustvl/Vim-small-midclstok", lora_targets=_VIM_LINEARS, hparams=FINE_TUNING),
        ModelSpec(key="mambavision_t", name="MambaVision-T", family="mamba", task="cifar100",
                  module="gradeff.axes.models.mambavision", fine_tunes=True, head=("classifier",),
                  batch_norm=True, hub_id="nvidia/MambaVision-T-1K", lora_targets=_MAMBAVISION_LINEARS,
                  hparams=FINE_TUNING),
        # The PEFT study's foundation-model baselines, used without training or with a linear probe: two
        # zero-shot contrastive VLMs, DINOv2 read by a linear probe, and two autoregressive VLMs prompted
        # to name the class. Only DINOv2 gets the suite's pretraining: the others classify by their class
        # names, which mean nothing to a synthetic stand-in's classes, so they start from random weights
        # unless real ones are given (--gradeff-weights; their records name the stand-in). PaliGemma and MobileVLM,
        # at billions of parameters, run only from given weights.
        ModelSpec(key="clip", name="CLIP ViT-B/16 (zero-shot)", family="foundation", task="cifar100",
                  module="gradeff.studies.baselines.clip", methods=("zero_shot",),
                  hub_id="openai/clip-vit-base-patch16",
                  lora_targets=_CLIP_LINEARS, hparams=FINE_TUNING),
        ModelSpec(key="siglip", name="SigLIP B/16-224 (zero-shot)", family="foundation", task="cifar100",
                  module="gradeff.studies.baselines.siglip", methods=("zero_shot",),
                  hub_id="google/siglip-base-patch16-224", lora_targets=_CLIP_LINEARS, hparams=FINE_TUNING),
        # At tiny, half the fine-tuned backbones' pretraining (512 steps of 32, ~12 s on one core), which a fresh
        # machine's default run pays for: source accuracy 82 % (93 % at 1,024 steps), its linear probe 29 % / 47 % on
        # the CIFAR-100 / DTD stand-ins (44 % / 57 %; 256 steps: 33 % and 18 % / 14 %, too weak a baseline).
        ModelSpec(key="dinov2", name="DINOv2 ViT-B/14 (linear probe)", family="foundation", task="cifar100",
                  module="gradeff.studies.baselines.dinov2", fine_tunes=True, head=("classifier",),
                  methods=("linear_probe",), hub_id="facebook/dinov2-base", lora_targets=_VIT_LINEARS,
                  pretraining={"tiny": {"epochs": 2}}, hparams=FINE_TUNING),
        ModelSpec(key="smolvlm", name="SmolVLM (prompted)", family="foundation", task="cifar100",
                  module="gradeff.studies.baselines.smolvlm", methods=("zero_shot",),
                  hub_id="HuggingFaceTB/SmolVLM-Instruct", lora_targets=_VLM_LINEARS, hparams=FINE_TUNING),
        ModelSpec(key="vlm_prompt", name="nanoVLM (prompted)", family="foundation", task="cifar100",
                  module="gradeff.studies.baselines.vlm_prompt", methods=("zero_shot",),
                  lora_targets=_VLM_LINEARS, hparams=FINE_TUNING),
        ModelSpec(key="paligemma", name="PaliGemma 3B (prompted)", family="foundation", task="cifar100",
                  module="gradeff.studies.baselines.paligemma", methods=("zero_shot",),
                  hub_id="google/paligemma-3b-pt-224", needs_weights=True, lora_targets=_VLM_LINEARS,
                  hparams=FINE_TUNING),
        ModelSpec(key="mobilevlm", name="MobileVLM V2 1.7B (prompted)", family="foundation", task="cifar100",
                  module="gradeff.studies.baselines.mobilevlm", methods=("zero_shot",),
                  hub_id="mtgv/MobileVLM_V2-1.7B", needs_weights=True, hparams=FINE_TUNING,
                  unavailable="MobileVLM (CLIP ViT-L/14-336, an LDP projector, MobileLLaMA) is not in transformers "
                              "and gradeff runs no repository code (no trust_remote_code), so it has no "
                              "implementation here yet"),
    ),
)


def build_model(
    key: str,
    profile: str,
    *,
    vocab_size: int | None = None,
    num_labels: int | None = None,
    weights_dir: str | Path | None = None,
    device: str | torch.device = "cpu",
    image_size: int | None = None,
) -> torch.nn.Module:
    """Build a model of the registry in a profile's size, random-initialised unless weights are given.

    Args:
        key: model key (see ``MODELS``).
        profile: ``tiny``, ``small`` or ``paper``.
        vocab_size: override the profile's vocabulary (text models), e.g. to match a task.
        num_labels: override the number of classes (``vit``).
        weights_dir: a local directory with ``save_pretrained`` weights; never a hub id.
        device: where to build; ``"meta"`` builds without allocating (parameter counting).
        image_size: the side of the images it will read, for a model that takes a dataset's own
            (:attr:`ModelSpec.native_image_size`); ignored by the others, which take their profile's.

    Returns:
        The model, in training mode.
    """
    spec = MODELS[key]
    validate_profile(profile)
    build = spec.builder if spec.builder is not None else importlib.import_module(spec.module).build
    sized = {"image_size": image_size} if spec.native_image_size and image_size is not None else {}
    model = build(profile, vocab_size=vocab_size, num_labels=num_labels, weights_dir=weights_dir,
                         device=device, **sized)
    model.train()
    return model

