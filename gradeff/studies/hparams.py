"""Hyper-parameters of a cell: its model's at a profile, its dataset's own sizes, its fine-tuning method's settings.

Every spec holds its own: a model its :class:`HParams` per profile (``ModelSpec.hparams``; the main paper's
section 3 at ``paper``: learning rates and batch sizes per model, the same for every optimizer and strategy,
accumulation over 4 micro-batches, warm-up ratio 0.03 for the LLM, 512 tokens, 224 px, 128-token captions and 25
epochs; ``tiny`` and ``small`` keep the same structure at CPU sizes), a dataset the sizes that are its own
(``TaskSpec.sizes``: CIFAR-100's 100 classes and split sizes), a fine-tuning method its settings
(``MethodSpec.hparams``, fields of :class:`MethodHParams`) and a model the linears LoRA adapts
(``ModelSpec.lora_targets``). The PEFT paper's abstract gives none of the methods' numbers; the values are the
methods' published defaults and are recorded with every cell. A model or dataset registered from a project sets the
same fields, so what is read here is read the same way for it.

Here: how a cell's values are put together from those (:func:`hparams_for`, :func:`method_hparams_for`), the
pretraining recipe, the memory budgets and the learning-rate grid of fair tuning.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradeff.axes.data import TASKS
from gradeff.axes.methods import METHODS, MethodHParams
from gradeff.axes.models import MODELS
from gradeff.axes.optim import OPTIMIZERS
from gradeff.specs.profiles import HParams, validate_profile

__all__ = [
    "MEMORY_BUDGETS", "MEMORY_BUDGET_LEVELS", "MEMORY_MARGIN", "PRETRAIN_HPARAMS", "HParams", "MethodHParams",
    "PretrainHParams", "hparams_for", "largest_caps", "largest_step", "lr_centre", "lr_grid", "method_hparams_for",
    "pretrain_hparams", "task_default",
]


def task_default(task: str, profile: str) -> HParams:
    """The hyper-parameters at ``profile`` of the first model that gives its own and trains on ``task`` (else on a
    task of its kind): a model registered without them trains as the built-in model of its task does."""
    rows = [(key, MODELS[key].hparams[profile]) for key in MODELS if profile in (MODELS[key].hparams or {})]
    for same in (lambda m: MODELS[m].task == task, lambda m: TASKS[MODELS[m].task].kind == TASKS[task].kind):
        for model, hp in rows:
            if same(model):
                return hp
    raise KeyError(f"no built-in model trains on {task!r} data: a model registered for it must give its own hparams")


def hparams_for(model: str, profile: str, *, epochs: int | None = None, dataset: str | None = None) -> HParams:
    """The hyper-parameters of a cell's model and profile, optionally with another epoch count.

    Args:
        dataset: the dataset the cell trains on; its own sizes (``TaskSpec.sizes``) replace the
            model's. ``None``: the model's own task.
    """
    spec = MODELS[model]
    validate_profile(profile)
    hp = (spec.hparams or {}).get(profile) or task_default(spec.task, profile)
    sizes = dict(TASKS[dataset or spec.task].sizes.get(profile, {}))
    if not spec.native_image_size:
        sizes.pop("image_size", None)  # a model of one input size reads every dataset resampled to it
    if epochs is not None:
        sizes["epochs"] = epochs
    return replace(hp, **sizes) if sizes else hp


def method_hparams_for(method: str, model: str, profile: str) -> MethodHParams:
    """The settings of ``method`` (its spec's ``hparams``) on ``model`` at ``profile``, with the model's LoRA
    targets."""
    spec = MODELS[model]
    validate_profile(profile)
    return MethodHParams(**METHODS[method].hparams, target_modules=spec.lora_targets)


@dataclass(frozen=True, slots=True, kw_only=True)
class PretrainHParams:
    """How the suite pretrains a fine-tuning backbone when no pretrained weights are given.

    The source task (:func:`gradeff.axes.data.standins.source_task`) is of the same families as the PEFT
    study's stand-ins, objects and textures under the same nuisance variation, with classes of its own,
    half of each: a backbone that learns it reads shapes and colours wherever an object sits, and
    spectra whatever a texture's phase, as ImageNet features serve CIFAR-100 and DTD; fine-tuning still
    has to learn the new classes.

    Attributes:
        num_classes: the source task's classes (half objects, half textures).
        train_samples / heldout_samples / epochs / batch_size / lr / weight_decay / warmup_ratio:
            AdamW with a linear warm-up and cosine decay.
    """

    num_classes: int
    train_samples: int
    heldout_samples: int
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float = 0.05
    warmup_ratio: float = 0.1


PRETRAIN_HPARAMS: dict[str, PretrainHParams] = {
    # 64 classes (32 objects, 32 textures) in 1,024 steps of 32: ~12 s for the tiny ViT-S, ~30 s for TinyViT on
    # one core. Half as many steps leave the conv and Mamba backbones short of the features (measured at seed 0:
    # source held-out accuracy 0.27 → 0.58 for TinyViT and 0.16 → 0.50 for MambaVision at 512 → 1,024 steps; a
    # head-only fine-tuning on the DTD stand-in 15 % → 27 % and 7 % → 22 %); a higher rate (4e-3) or steps of 16
    # do not make up for it.
    "tiny": PretrainHParams(num_classes=64, train_samples=8192, heldout_samples=512, epochs=4, batch_size=32,
                            lr=2e-3),
    # The source vocabulary leaves 36 object and 72 texture classes for pretraining: 72 classes, half of each.
    "small": PretrainHParams(num_classes=72, train_samples=32_768, heldout_samples=2048, epochs=4,
                             batch_size=64, lr=1e-3),
    "paper": PretrainHParams(num_classes=72, train_samples=256_000, heldout_samples=10_000, epochs=10,
                             batch_size=256, lr=1e-3),
}


# What a backbone may set for itself: how it trains, not the source task it trains on (drawn once per profile).
_OWN_PRETRAINING = ("epochs", "batch_size", "lr", "weight_decay", "warmup_ratio")


def pretrain_hparams(model: str, profile: str) -> PretrainHParams:
    """How ``model`` pretrains at ``profile``: the profile's recipe with the model's own fields
    (:attr:`gradeff.axes.models.ModelSpec.pretraining`) in place of the profile's."""
    validate_profile(profile)
    own = (MODELS[model].pretraining or {}).get(profile, {})
    unknown = set(own) - set(_OWN_PRETRAINING)
    if unknown:
        raise ValueError(f"{model}: pretraining fields {sorted(unknown)} cannot be a model's own; valid: "
                         f"{', '.join(_OWN_PRETRAINING)} (every backbone of a profile pretrains on the same samples)")
    return replace(PRETRAIN_HPARAMS[profile], **own)


# The memory budget the budget strategies work to unless --gradeff-memory-budget gives one: the PEFT paper's
# on-device budget ("e.g. 2 GB") at paper size, and at small the same pressure scaled to its models.
MEMORY_BUDGETS: dict[str, int] = {"small": 160 * 2**20, "paper": 2 * 2**30}
# At tiny, a level instead (gradeff.axes.strategies.prepare.budget_bytes): the budget lies halfway from the cell's own
# predicted peak with every block checkpointed to the one with none, both from its measured pass, so it scales with
# each backbone and method. The tiny models' peaks differ by ten times (a LoRA step of MambaVision-T 2.9 MiB, of
# Vim-S 23.6 MiB): the absolute 10 MiB (9 after the margin) this replaced left 10 of the 20 PEFT budget cells with
# standard's plan (nothing recomputed: their peaks were under it), 3 checkpointed every block as the checkpoint
# cells do, 2 made a plan of their own, and Vim-S's 5 ended oom before training (its scan's states alone exceed it).
MEMORY_BUDGET_LEVELS: dict[str, float] = {"tiny": 0.5}
# The share of the budget kept free: allocator fragmentation can run out of memory below the budget.
MEMORY_MARGIN = 0.10


def lr_grid(centre: float, points: int = 5, spread: float = 2.0) -> tuple[float, ...]:
    """``points`` learning rates spaced evenly in log10 over ``centre × 10^[−spread/2, +spread/2]``.

    Fair tuning (``--gradeff-tune lr``) searches each optimizer's rate around its own centre
    (:attr:`gradeff.axes.optim.OptimizerSpec.lr_centre`, see :func:`lr_centre`) instead of sharing one rate across
    optimizers as the main paper does, which favours the optimizers the shared rate happens to suit.

    Args:
        centre: the grid's geometric middle.
        points: how many rates (an odd number keeps the centre on the grid).
        spread: decades the grid spans.
    """
    if points < 1:
        raise ValueError(f"a learning-rate grid needs at least one point, got {points}")
    if points == 1:
        return (centre,)
    return tuple(centre * 10 ** (spread * (i / (points - 1) - 0.5)) for i in range(points))


def lr_centre(optimizer: str, cell_rate: float) -> float:
    """Where ``optimizer``'s rate search is centred: its spec's ``lr_centre``, else the cell's own rate."""
    return OPTIMIZERS[optimizer].lr_centre or cell_rate


def largest_step(dataset: str, profile: str) -> int:
    """The most samples one optimizer step of ``profile`` takes (``batch_size × accum_steps``) among the models that
    train on ``dataset``'s kind of task: the training rows real data must hold for every such cell to run."""
    kind = TASKS[dataset].kind
    sizes = [hparams_for(model, profile, dataset=dataset) for model, spec in MODELS.items()
             if spec.task in TASKS and TASKS[spec.task].kind == kind]
    return max((hp.batch_size * hp.accum_steps for hp in sizes), default=1)


def largest_caps(dataset: str, profile: str) -> tuple[int, int]:
    """The most training and held-out rows any model's cell of ``profile`` reads from ``dataset``."""
    sizes = [hparams_for(model, profile, dataset=dataset) for model in MODELS]
    return max(hp.train_samples for hp in sizes), max(hp.heldout_samples for hp in sizes)
