"""The data axis: deterministic synthetic tasks with known loss floors, one registry entry each.

The main study trains each model on its own task; the PEFT study varies the dataset
(``cifar100``, ``dtd``: synthetic stand-ins with the real datasets' class counts, until real
copies are given with ``--gradeff-data``). Real tasks (``digits``, ``pydoc`` on every machine;
``images``, ``text``, ``mmimdb``, ``mmimdb_genres`` from local copies) are read by
:mod:`gradeff.axes.data.real` and have no known floor. A task's ``kind`` says which models can train on it.

This module stays light (no torch, no numpy): the registry is read when the grid is collected,
and a task's builder is imported only when a cell builds its data.

May import: :mod:`gradeff.specs`, :mod:`gradeff.meters` and the other axes (never in a cycle).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradeff.specs.registry import Registry

if TYPE_CHECKING:
    from gradeff.axes.data.dataset import Dataset
    from gradeff.specs.profiles import HParams

__all__ = ["BATCH_KEYS", "IGNORE_INDEX", "SPECIAL_TOKENS", "TASKS", "Dataset", "TaskSpec", "data_sizes", "epoch_order",
           "make_dataset"]

# The tensors of a batch of each task kind (``TaskSpec.kind``), which every cell passes as ``model(**batch)``: the
# arguments a model's ``forward`` takes (or a ``**kwargs`` that holds them). ``pixel_values`` are float images of
# shape (batch, 3, image_size, image_size); ``input_ids`` token ids (batch, seq_len); ``labels`` class ids (batch,)
# for classification, else token ids with -100 where no loss is taken; ``attention_mask`` 1 where a token is read.
BATCH_KEYS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType({
    "image_classification": ("pixel_values", "labels"),
    "causal_lm": ("input_ids", "labels"),
    "masked_lm": ("input_ids", "attention_mask", "labels"),
    "image_captioning": ("pixel_values", "input_ids", "labels"),
})

# Re-exported from gradeff.axes.data.dataset on first use (PEP 562), so importing the registry stays light.
_LAZY = {"IGNORE_INDEX", "SPECIAL_TOKENS", "Dataset", "epoch_order"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("gradeff.axes.data.dataset"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    """A synthetic task: which hyper-parameters it reads and how to build it.

    Attributes:
        key: registry key; the ``dataset`` axis of a cell.
        name: human-readable name used in reports.
        description: what a sample is and what the loss floor means.
        builder: ``"module:function"`` (or the function itself, for a dataset registered from a user's
            project) called as ``function(num_samples=, seed=, **fields, **options)``.
        fields: the task sizes it reads from the cell's hyper-parameters.
        options: fixed keyword arguments of the builder (what makes this dataset this dataset).
        kind: what it asks of a model (``image_classification``, ``causal_lm``, ``masked_lm``,
            ``image_captioning``); a model trains on every task of its own task's kind.
        sizes: profile → fields of :class:`gradeff.specs.profiles.HParams` that are the dataset's own (CIFAR-100's 100
            classes, its split sizes at paper): they replace the model's where a cell trains on this dataset.
    """

    key: str
    name: str
    description: str
    builder: str | Callable[..., Dataset]
    fields: tuple[str, ...]
    kind: str
    options: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    sizes: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "sizes", MappingProxyType({profile: MappingProxyType(dict(fields))
                                                            for profile, fields in self.sizes.items()}))

    def build(self, **kwargs) -> Dataset:
        """Import the builder and build the dataset."""
        if callable(self.builder):
            return self.builder(**kwargs, **self.options)
        module, _, function = self.builder.partition(":")
        return getattr(importlib.import_module(module), function)(**kwargs, **self.options)


_SPLITS = ("heldout_samples", "validation_samples")
_CLASSIFICATION_FIELDS = ("num_classes", "image_size", *_SPLITS)
_IMAGES = "gradeff.axes.data.images"
_STANDINS = "gradeff.axes.data.standins"
_TEXT = "gradeff.axes.data.text"
# Topic text: 16 peaked topics (Dirichlet 0.05 over the states) whose tokens a model reads off the whole sequence
# (the masked task) or off the prefix (the causal task); a count of neighbouring tokens reads little of it.
_TOPICS = {"num_topics": 16, "concentration": 0.05}
# ModernBERT's own pre-training masks 30 % of tokens (twice BERT's 15 %): twice the targets per sequence.
_MASKED_LM = {**_TOPICS, "mask_prob": 0.3}
# 16 motifs, each class a Dirichlet(0.5) mixture of them: a few motifs dominate a class, and 16 blocks an image
# leave the Bayes classifier short of 100 % on a few (a floor above 0).
_MOTIFS = {"num_motifs": 16, "concentration": 0.5}
# The real data every machine has: enough steps at tiny for a random-initialised model to learn what a trivial
# baseline of the same split does not (gradeff.axes.data.trivial), all the data at the larger profiles. Real data's test
# and validation splits are its own or carved out (gradeff.axes.data.real), these sizes caps; its cells are evaluated at
# the epochs' ends. At tiny, batches of 8 for a local dataset, which may hold only a few dozen rows.
_TINY_REAL = {"batch_size": 8, "eval_every": 0}
_REAL_SIZES = {
    # digits: 1,797 rows → 360 to test, 144 to validate, 1,293 to train on (1,280 in whole steps). At tiny the ViT
    # reads them at their own 8 px (gradeff.axes.models.vit: 2 × 2 patches of 4 px, each a stroke); 5 epochs of
    # all 1,280 in batches of 32 (200 steps) at 5e-4 (AdamW at 1e-3: 91 and 94 % at seeds 0 and 1, at 5e-4 95
    # and 97 %). At 512 digits resampled to 32 px, 192 steps of 8 at 1e-3, the ViT stood at 27 % test accuracy
    # where a logistic regression on the pixels reaches 97 %.
    "digits": {"tiny": dict(num_classes=10, train_samples=1_280, heldout_samples=360, image_size=8, batch_size=32,
                            epochs=5, lr=5e-4, eval_every=0),
               "small": dict(num_classes=10, train_samples=1_280, heldout_samples=360, eval_every=0),
               "paper": dict(num_classes=10, train_samples=1_280, heldout_samples=360, eval_every=0)},
    # pydoc: byte-level tokens at tiny (gradeff.axes.data.real_tensors.BPE_VOCAB), 1,024 windows of 32 in batches of 8
    # (384 steps). At 256 windows of a 512-token BPE (96 steps), the LLM's test loss (5.13) stood above a bigram count's
    # (4.42): each token came a few dozen times in the training text, too few for a tiny model to learn its
    # embedding in 96 steps, and the loss sat on the unigram's plateau. In batches of 16 (192 steps) one seed in three
    # still stayed on that plateau longer than its steps (2.56 against the bigram's 2.54).
    "pydoc": {"tiny": dict(train_samples=1_024, heldout_samples=128, **_TINY_REAL),
              "small": dict(train_samples=1_024, heldout_samples=256, eval_every=0)},
}

TASKS: Registry[TaskSpec] = Registry(
    "dataset",
    (
        # The main study's tasks, one per model. What each is and why it is built so is in its builder's
        # docstring; in short, each is learnable *and generalises* within the tiny profile's seconds per cell:
        # enough training samples (drawn once, the same every epoch) that no model memorises them in its steps,
        # and structure a tiny model picks up early.
        TaskSpec(key="causal_lm", name="Topic text (synthetic, next token)",
                 description="next token of text whose tokens each sequence draws from one of 16 topics",
                 builder=f"{_TEXT}:causal_lm", fields=("num_states", "seq_len", *_SPLITS), kind="causal_lm",
                 options=_TOPICS),
        TaskSpec(key="masked_lm", name="Topic text (synthetic, masked)",
                 description="30 % masked tokens of text whose tokens each sequence draws from one of 16 topics",
                 builder=f"{_TEXT}:masked_lm", fields=("num_states", "seq_len", *_SPLITS), kind="masked_lm",
                 options=_MASKED_LM),
        TaskSpec(key="image_classification", name="Bags of motifs (synthetic)",
                 description="class of an image whose blocks show motifs drawn from the class's own mixture",
                 builder=f"{_IMAGES}:motif_classification", fields=_CLASSIFICATION_FIELDS,
                 kind="image_classification", options=_MOTIFS),
        TaskSpec(key="image_captioning", name="Motif captions (synthetic)",
                 description="caption of a bag-of-motifs image: words of its class's own topic",
                 builder=f"{_IMAGES}:image_captioning",
                 fields=("num_classes", "image_size", "caption_len", "num_states", *_SPLITS),
                 kind="image_captioning", options=_MOTIFS),
        # The PEFT study's datasets. Until real copies are given they are synthetic stand-ins with the real
        # class counts whose classes need features (gradeff.axes.data.standins): CIFAR-100's 100 object classes as
        # two-colour shapes at a random pose over clutter, DTD's 47 texture classes as Gaussian random fields
        # of their own spectra, seen rotated and scaled. Matching raw pixels fails on both (the sanity
        # baseline, a 1-nearest-neighbour classifier on pixels, is recorded with every cell); the Bayes
        # classifier is exact, so the ceiling shown is what it reaches on the very split. Each has its own
        # classes (the salt) for the same seed.
        TaskSpec(key="cifar100", name="CIFAR-100-like (synthetic)",
                 description="100 object classes at a random position, rotation and scale over clutter, "
                             "stratified test and validation splits",
                 builder=f"{_STANDINS}:objects", fields=_CLASSIFICATION_FIELDS, kind="image_classification",
                 # 50,000 training images (49,920: whole steps of 64 × 4 under every strategy) and 10,000 test
                 # images; no validation split of its own: 5,000 validation images (real data: carved out of the
                 # training rows).
                 sizes={"tiny": {"num_classes": 100}, "small": {"num_classes": 100},
                        "paper": dict(num_classes=100, train_samples=49_920, heldout_samples=10_000,
                                      validation_samples=5_000)}),
        TaskSpec(key="dtd", name="DTD-like (synthetic textures)",
                 description="47 texture classes (random fields of their own spectra) at a random rotation, "
                             "scale and phase, stratified test and validation splits",
                 builder=f"{_STANDINS}:textures", fields=_CLASSIFICATION_FIELDS, kind="image_classification",
                 # 47 textures, 1,880 images per split (training: 1,792 = 7 steps of 64 × 4), its own validation
                 # split.
                 sizes={"tiny": {"num_classes": 47}, "small": {"num_classes": 47},
                        "paper": dict(num_classes=47, train_samples=1_792, heldout_samples=1_880,
                                      validation_samples=1_880)}),
        # Real data (gradeff.axes.data.real), read with Hugging Face datasets from local files. digits and pydoc are
        # on every machine (scikit-learn's digits, Python's own help topics); the others need
        # --gradeff-data KEY=PATH, as do cifar100 and dtd to replace their synthetic stand-ins.
        *(TaskSpec(key=key, name=name, description=description, builder="gradeff.axes.data.real:build_task",
                   fields=(), kind=kind, options={"key": key}, sizes=_REAL_SIZES.get(key, {"tiny": _TINY_REAL}))
          for key, name, kind, description in (
              ("digits", "Digits (real, 8×8 handwritten)", "image_classification",
               "scikit-learn's 1,797 handwritten digits, 10 classes; 20 % held out"),
              ("pydoc", "Python help topics (real text)", "causal_lm",
               "next token of the English help text that ships with Python (pydoc_data), BPE-tokenised"),
              ("images", "Local images (real)", "image_classification", "--gradeff-data images=PATH"),
              ("text", "Local text (real)", "causal_lm", "--gradeff-data text=PATH"),
              ("mmimdb", "MM-IMDb (real, poster → plot)", "image_captioning",
               "--gradeff-data mmimdb=PATH: a poster captioned with its plot"),
              ("mmimdb_genres", "MM-IMDb (real, poster → genres)", "image_classification",
               "--gradeff-data mmimdb_genres=PATH: a poster's genres, multi-label (micro/macro-F1)"),
          )),
    ),
)


def data_sizes(task: str, hp: HParams) -> tuple[tuple[str, Any], ...]:
    """The hyper-parameters a task's data depends on (training samples and the task's fields), as a hashable key:
    cells that differ only in rate, epochs or batch share their data."""
    spec = TASKS[task]
    missing = [name for name in spec.fields if getattr(hp, name) is None]
    if missing:
        raise ValueError(f"task {task!r} needs hyper-parameters {missing}")
    return (("num_samples", hp.train_samples), *((name, getattr(hp, name)) for name in spec.fields))


def make_dataset(task: str, hp: HParams, seed: int) -> Dataset:
    """Build a task's training set (with its test and validation splits) from the hyper-parameters.

    Same (task, :func:`data_sizes`, seed) → same tensors.
    """
    return TASKS[task].build(seed=seed, **dict(data_sizes(task, hp)))
