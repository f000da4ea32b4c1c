"""The data axis: one deterministic synthetic task per model family, with a known loss floor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gradeff.data.dataset import IGNORE_INDEX, SPECIAL_TOKENS, Dataset, epoch_order
from gradeff.data.images import image_captioning, image_classification
from gradeff.data.text import causal_lm, masked_lm
from gradeff.hparams import HParams
from gradeff.registry import Registry

__all__ = ["IGNORE_INDEX", "SPECIAL_TOKENS", "TASKS", "Dataset", "TaskSpec", "epoch_order", "make_dataset"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    """A synthetic task: which hyper-parameters it reads and how to build it."""

    key: str
    description: str
    build: Callable[..., Dataset]
    fields: tuple[str, ...]


TASKS: Registry[TaskSpec] = Registry(
    "task",
    (
        TaskSpec(key="causal_lm", description="next token of Markov-chain text", build=causal_lm,
                 fields=("num_states", "seq_len")),
        TaskSpec(key="masked_lm", description="15 % masked tokens of Markov-chain text", build=masked_lm,
                 fields=("num_states", "seq_len")),
        TaskSpec(key="image_classification", description="class of a noisy template image",
                 build=image_classification, fields=("num_classes", "image_size")),
        TaskSpec(key="image_captioning", description="caption (class token + Markov text) of a noisy template",
                 build=image_captioning, fields=("num_classes", "image_size", "caption_len", "num_states")),
    ),
)


def make_dataset(task: str, hp: HParams, seed: int) -> Dataset:
    """Build a task's training set from the hyper-parameters; same (task, hp, seed) → same tensors."""
    spec = TASKS[task]
    missing = [name for name in spec.fields if getattr(hp, name) is None]
    if missing:
        raise ValueError(f"task {task!r} needs hyper-parameters {missing}")
    return spec.build(num_samples=hp.train_samples, seed=seed, **{name: getattr(hp, name) for name in spec.fields})
