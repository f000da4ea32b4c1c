"""Hyper-parameters of every (model, profile), dataset and fine-tuning method: where sizes and rates are set.

``paper`` rows are the main paper's section 3: learning rates and batch sizes per model, the
same values for every optimizer and strategy ("no hyperparameters were altered between
optimizer-technique combinations"), accumulation over 4 micro-batches (effective batch 4×),
warm-up ratio 0.03 for the LLM, sequences of 512 tokens, 224 px images, 128-token captions and
25 epochs. ``tiny`` and ``small`` keep the same structure at CPU sizes.

The PEFT study's backbones (``vit_s``, ``tinyvit``, ``vim_s``, ``mambavision_t``) are fine-tuned
with AdamW on a dataset of the study (``cifar100``, ``dtd``), whose own sizes (classes, split
sizes at the paper profile) are in ``DATASET_HPARAMS``; the fine-tuning methods' settings (LoRA
rank, alpha, dropout, AdaLoRA's rank schedule, the 4-bit type) are :class:`MethodHParams`, with a method's own
values on its spec (``MethodSpec.hparams``) and the linears LoRA adapts on the model's (``ModelSpec.lora_targets``).
The PEFT paper's abstract gives none of these numbers; the values are the methods' published defaults and are
recorded with every cell.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradeff.methods import METHODS, MethodHParams
from gradeff.models import MODELS
from gradeff.profiles import validate_profile

__all__ = [
    "DATASET_HPARAMS", "HPARAMS", "MEMORY_BUDGETS", "MEMORY_MARGIN", "PRETRAIN_HPARAMS", "HParams", "MethodHParams",
    "PretrainHParams", "hparams_for", "lr_centre", "lr_grid", "method_hparams_for", "pretrain_hparams", "task_default",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class HParams:
    """Training and task sizes of one (model, profile).

    Attributes:
        lr: learning rate, shared by all optimizers (as in the paper).
        batch_size: micro-batch size (the batch of the standard strategy).
        accum_steps: micro-batches per optimizer step under ``accum`` (effective batch k·b).
        epochs: epochs per cell.
        train_samples: samples per epoch; a multiple of ``batch_size * accum_steps`` so every
            strategy sees exactly the same samples.
        heldout_samples: size of the test split (the held-out split every reported figure comes from; 0: none).
        validation_samples: size of the validation split tuning reads (0: none).
        eval_every: optimizer steps between two evaluations of the test split inside an epoch, for time to
            target at step resolution (0: at the epochs' ends only); each runs outside the epoch's clock.
        warmup_ratio: fraction of optimizer steps with a linear learning-rate warm-up.
        seq_len / num_states / num_classes / image_size / caption_len: task sizes
            (``None`` where the task has no such thing).
    """

    lr: float
    batch_size: int
    accum_steps: int = 4
    epochs: int
    train_samples: int
    heldout_samples: int = 0
    validation_samples: int = 0
    eval_every: int = 0
    warmup_ratio: float = 0.0
    seq_len: int | None = None
    num_states: int | None = None
    num_classes: int | None = None
    image_size: int | None = None
    caption_len: int | None = None

    def __post_init__(self):
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if min(self.batch_size, self.accum_steps, self.epochs, self.train_samples) < 1:
            raise ValueError("batch_size, accum_steps, epochs and train_samples must be >= 1")
        if min(self.heldout_samples, self.validation_samples, self.eval_every) < 0:
            raise ValueError(f"heldout_samples, validation_samples and eval_every must be >= 0, got "
                             f"{self.heldout_samples}, {self.validation_samples} and {self.eval_every}")
        if self.train_samples % (self.batch_size * self.accum_steps):
            raise ValueError(
                f"train_samples ({self.train_samples}) must be a multiple of batch_size × accum_steps "
                f"({self.batch_size} × {self.accum_steps}) so every strategy sees the same samples"
            )
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")


# The main study at tiny: every model learns its task and generalises within its few CPU seconds a cell. 768
# training samples, the same each epoch, in batches of 32 (24 steps; 6 under accumulation), 3 epochs: 2,304 samples
# seen, 768
# distinct, far more than a tiny model memorises in these steps (training and test losses stay within a few
# hundredths), and enough steps for the adaptive optimizers to close more than half the gap from the untrained loss
# to the floor. 64 test and 64 validation samples (2,048 tokens each for text; the image tasks' classes in equal
# shares). The test split is evaluated every 12 steps and after each epoch, the validation split once at the end,
# all outside the timed epochs: time to target at half-epoch resolution for a few per cent of a cell's time.
_TINY_SPLITS = dict(heldout_samples=64, validation_samples=64, eval_every=12)
_TINY_MAIN = dict(lr=1e-3, batch_size=32, epochs=3, train_samples=768, **_TINY_SPLITS)
_TINY_TEXT = dict(seq_len=32, num_states=124)  # model vocab 128 = 4 special ids + 124 states
_TINY_IMAGE = dict(image_size=32, num_classes=10)
# small: the same tasks with 4,096 samples an epoch (128 steps of 32), the test split evaluated every 32 steps.
_SMALL_MAIN = dict(lr=3e-4, batch_size=32, epochs=3, train_samples=4096, heldout_samples=512, validation_samples=512,
                   eval_every=32)
# ~0.8 s per cell on two cores (8 steps of 32 per epoch, a held-out pass after each).
_TINY_FINE_TUNE = dict(lr=1e-3, batch_size=32, epochs=3, train_samples=256, heldout_samples=256,
                       validation_samples=128, image_size=32)
_SMALL_FINE_TUNE = dict(lr=3e-4, batch_size=32, epochs=5, train_samples=2048, heldout_samples=1024,
                        validation_samples=512, image_size=64)
# Fine-tuning at 224 px with AdamW, as in the PEFT study; 10 epochs (the abstract gives no count).
_PAPER_FINE_TUNE = dict(lr=1e-4, batch_size=64, epochs=10, train_samples=49_920, heldout_samples=10_000,
                        validation_samples=5_000, eval_every=200, image_size=224)
_PEFT_BACKBONES = ("vit_s", "tinyvit", "vim_s", "mambavision_t")
# The foundation-model baselines are evaluated at the fine-tuning sizes (DINOv2's probe trains like a cell).
_BASELINES = ("clip", "siglip", "dinov2", "smolvlm", "vlm_prompt", "paligemma", "mobilevlm")

HPARAMS: dict[tuple[str, str], HParams] = {
    ("vit", "tiny"): HParams(**_TINY_MAIN, **_TINY_IMAGE),
    ("modernbert", "tiny"): HParams(**_TINY_MAIN, **_TINY_TEXT),
    ("llm", "tiny"): HParams(**_TINY_MAIN, warmup_ratio=0.03, **_TINY_TEXT),
    ("vlm", "tiny"): HParams(**_TINY_MAIN, caption_len=16, num_states=124, **_TINY_IMAGE),
    # small: minutes per cell on a CPU.
    ("vit", "small"): HParams(**_SMALL_MAIN, image_size=64, num_classes=10),
    ("modernbert", "small"): HParams(**_SMALL_MAIN, seq_len=128, num_states=1020),
    ("llm", "small"): HParams(**_SMALL_MAIN, warmup_ratio=0.03, seq_len=128, num_states=1020),
    ("vlm", "small"): HParams(**_SMALL_MAIN, image_size=64, num_classes=10, caption_len=32, num_states=1020),
    # paper: section 3 of the main paper.
    ("vit", "paper"): HParams(lr=3e-4, batch_size=64, epochs=25, train_samples=4096, heldout_samples=1024,
                              validation_samples=1024, eval_every=16, image_size=224, num_classes=100),
    ("modernbert", "paper"): HParams(lr=1e-4, batch_size=32, epochs=25, train_samples=4096, heldout_samples=1024,
                                     validation_samples=1024, eval_every=32, seq_len=512, num_states=2048),
    ("llm", "paper"): HParams(lr=2e-5, batch_size=16, epochs=25, train_samples=2048, heldout_samples=512,
                              validation_samples=512, eval_every=32, warmup_ratio=0.03, seq_len=512, num_states=2048),
    ("vlm", "paper"): HParams(lr=5e-5, batch_size=32, epochs=25, train_samples=4096, heldout_samples=1024,
                              validation_samples=1024, eval_every=32, image_size=224, num_classes=100,
                              caption_len=128, num_states=2048),
} | {
    (model, profile): HParams(**sizes)
    for model in (*_PEFT_BACKBONES, *_BASELINES)
    for profile, sizes in (("tiny", _TINY_FINE_TUNE), ("small", _SMALL_FINE_TUNE), ("paper", _PAPER_FINE_TUNE))
}

_TINY_REAL = dict(batch_size=8, eval_every=0)
# A dataset's own sizes, which replace the model's where the cell trains on that dataset.
DATASET_HPARAMS: dict[tuple[str, str], dict] = {
    ("cifar100", "tiny"): dict(num_classes=100),
    ("cifar100", "small"): dict(num_classes=100),
    # CIFAR-100: 50,000 training images (49,920: whole steps of 64 × 4 under every strategy) and 10,000 test images;
    # no validation split of its own: 5,000 validation images (real data: carved out of the training rows).
    ("cifar100", "paper"): dict(num_classes=100, train_samples=49_920, heldout_samples=10_000,
                                validation_samples=5_000),
    ("dtd", "tiny"): dict(num_classes=47),
    ("dtd", "small"): dict(num_classes=47),
    # DTD: 47 textures, 1,880 images per split (training: 1,792 = 7 steps of 64 × 4), its own validation split.
    ("dtd", "paper"): dict(num_classes=47, train_samples=1_792, heldout_samples=1_880, validation_samples=1_880),
    # The real data every machine has: enough steps at tiny for a random-initialised model to learn something
    # (vit on 512 digits, ~1 s; llm on 256 windows of help text), all the data at the larger profiles.
    # Real data's test and validation splits are its own or carved out (gradeff.data.real), these sizes caps; its
    # cells are evaluated at the epochs' ends. digits: 1,797 rows → 1,293 to train on after the two carve-outs.
    # At tiny, batches of 8 as before the main tasks grew: a local dataset may hold only a few dozen rows.
    ("digits", "tiny"): dict(num_classes=10, train_samples=512, heldout_samples=256, **_TINY_REAL),
    ("digits", "small"): dict(num_classes=10, train_samples=1_280, heldout_samples=360, eval_every=0),
    ("digits", "paper"): dict(num_classes=10, train_samples=1_280, heldout_samples=360, eval_every=0),
    ("pydoc", "tiny"): dict(train_samples=256, heldout_samples=64, **_TINY_REAL),
    ("pydoc", "small"): dict(train_samples=1_024, heldout_samples=256, eval_every=0),
} | {(key, "tiny"): dict(_TINY_REAL) for key in ("images", "text", "mmimdb", "mmimdb_genres")}


def task_default(task: str, profile: str) -> HParams:
    """The hyper-parameters of the first built-in model of ``task`` (else of its kind): a registered model's default."""
    from gradeff.data import TASKS

    rows = [(model, hp) for (model, row_profile), hp in HPARAMS.items() if row_profile == profile]
    for same in (lambda m: MODELS[m].task == task, lambda m: TASKS[MODELS[m].task].kind == TASKS[task].kind):
        for model, hp in rows:
            if same(model):
                return hp
    raise KeyError(f"no built-in model trains on {task!r} data: a model registered for it must give its own hparams")


def hparams_for(model: str, profile: str, *, epochs: int | None = None, dataset: str | None = None) -> HParams:
    """The hyper-parameters of a cell's model and profile, optionally with another epoch count.

    Args:
        dataset: the dataset the cell trains on; its own sizes (``DATASET_HPARAMS``) replace the
            model's. ``None``: the model's own task.
    """
    spec = MODELS[model]
    validate_profile(profile)
    hp = HPARAMS.get((model, profile)) or (spec.hparams or {}).get(profile) or task_default(spec.task, profile)
    sizes = DATASET_HPARAMS.get((dataset or MODELS[model].task, profile), {})
    if epochs is not None:
        sizes = sizes | {"epochs": epochs}
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

    The source task (:func:`gradeff.data.standins.source_task`) is of the same families as the PEFT
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
    (:attr:`gradeff.models.ModelSpec.pretraining`) in place of the profile's."""
    validate_profile(profile)
    own = (MODELS[model].pretraining or {}).get(profile, {})
    unknown = set(own) - set(_OWN_PRETRAINING)
    if unknown:
        raise ValueError(f"{model}: pretraining fields {sorted(unknown)} cannot be a model's own; valid: "
                         f"{', '.join(_OWN_PRETRAINING)} (every backbone of a profile pretrains on the same samples)")
    return replace(PRETRAIN_HPARAMS[profile], **own)


# The memory budget the budget strategies work to unless --gradeff-memory-budget gives one: the PEFT
# paper's on-device budget ("e.g. 2 GB") at paper size, and at the CPU profiles the same pressure scaled
# to their models. Tiny, measured live peaks of one fine-tuning step (full fine-tuning, standard → every
# block checkpointed): ViT-S 12.2 → 6.4 MiB, TinyViT 9.6 → 6.9, MambaVision-T 4.6 → 4.0, Vim-S 23.8 → 15.3.
# 10 MiB (9 MiB after the margin) makes ViT-S and TinyViT choose what to recompute, leaves MambaVision-T
# as it is, and is out of Vim-S's reach: its selective scan materialises each block's (batch, length,
# 2, state, width) states in the forward pass, a peak checkpointing cannot lower.
MEMORY_BUDGETS: dict[str, int] = {"tiny": 10 * 2**20, "small": 160 * 2**20, "paper": 2 * 2**30}
# The share of the budget kept free: allocator fragmentation can run out of memory below the budget.
MEMORY_MARGIN = 0.10


def lr_grid(centre: float, points: int = 5, spread: float = 2.0) -> tuple[float, ...]:
    """``points`` learning rates spaced evenly in log10 over ``centre × 10^[−spread/2, +spread/2]``.

    Fair tuning (``--gradeff-tune lr``) searches each optimizer's rate around its own centre
    (:attr:`gradeff.optim.OptimizerSpec.lr_centre`, see :func:`lr_centre`) instead of sharing one rate across
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
    from gradeff.optim import OPTIMIZERS

    return OPTIMIZERS[optimizer].lr_centre or cell_rate
