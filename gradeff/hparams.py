"""Hyper-parameters of every (model, profile): the one place where sizes and rates are set.

``paper`` rows are the main paper's section 3: learning rates and batch sizes per model, the
same values for every optimizer and strategy ("no hyperparameters were altered between
optimizer-technique combinations"), accumulation over 4 micro-batches (effective batch 4×),
warm-up ratio 0.03 for the LLM, sequences of 512 tokens, 224 px images, 128-token captions and
25 epochs. ``tiny`` and ``small`` keep the same structure at CPU sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradeff.models import MODELS
from gradeff.profiles import validate_profile

__all__ = ["HPARAMS", "HParams", "hparams_for"]


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
        warmup_ratio: fraction of optimizer steps with a linear learning-rate warm-up.
        seq_len / num_states / num_classes / image_size / caption_len: task sizes
            (``None`` where the task has no such thing).
    """

    lr: float
    batch_size: int
    accum_steps: int = 4
    epochs: int
    train_samples: int
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
        if self.train_samples % (self.batch_size * self.accum_steps):
            raise ValueError(
                f"train_samples ({self.train_samples}) must be a multiple of batch_size × accum_steps "
                f"({self.batch_size} × {self.accum_steps}) so every strategy sees the same samples"
            )
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")


_TINY_TEXT = dict(seq_len=32, num_states=124)  # model vocab 128 = 4 special ids + 124 states
_TINY_IMAGE = dict(image_size=32, num_classes=10)

HPARAMS: dict[tuple[str, str], HParams] = {
    # tiny: 3 epochs × 64 samples; 0.2–0.4 s per cell on two quiet CPU cores (median per model over two
    # runs: vit 0.17–0.21, modernbert 0.19–0.31, llm 0.21–0.33, vlm 0.36–0.41 s); a loaded machine takes longer.
    ("vit", "tiny"): HParams(lr=1e-3, batch_size=8, epochs=3, train_samples=64, **_TINY_IMAGE),
    ("modernbert", "tiny"): HParams(lr=1e-3, batch_size=8, epochs=3, train_samples=64, **_TINY_TEXT),
    ("llm", "tiny"): HParams(lr=1e-3, batch_size=8, epochs=3, train_samples=64, warmup_ratio=0.03, **_TINY_TEXT),
    ("vlm", "tiny"): HParams(lr=1e-3, batch_size=8, epochs=3, train_samples=64, caption_len=16, num_states=124,
                             **_TINY_IMAGE),
    # small: minutes per cell on a CPU.
    ("vit", "small"): HParams(lr=3e-4, batch_size=16, epochs=5, train_samples=512, image_size=64, num_classes=10),
    ("modernbert", "small"): HParams(lr=3e-4, batch_size=16, epochs=5, train_samples=512, seq_len=128,
                                     num_states=1020),
    ("llm", "small"): HParams(lr=3e-4, batch_size=16, epochs=5, train_samples=512, warmup_ratio=0.03, seq_len=128,
                              num_states=1020),
    ("vlm", "small"): HParams(lr=3e-4, batch_size=16, epochs=5, train_samples=512, image_size=64, num_classes=10,
                              caption_len=32, num_states=1020),
    # paper: section 3 of the main paper.
    ("vit", "paper"): HParams(lr=3e-4, batch_size=64, epochs=25, train_samples=4096, image_size=224,
                              num_classes=100),
    ("modernbert", "paper"): HParams(lr=1e-4, batch_size=32, epochs=25, train_samples=4096, seq_len=512,
                                     num_states=2048),
    ("llm", "paper"): HParams(lr=2e-5, batch_size=16, epochs=25, train_samples=2048, warmup_ratio=0.03,
                              seq_len=512, num_states=2048),
    ("vlm", "paper"): HParams(lr=5e-5, batch_size=32, epochs=25, train_samples=4096, image_size=224,
                              num_classes=100, caption_len=128, num_states=2048),
}


def hparams_for(model: str, profile: str, *, epochs: int | None = None) -> HParams:
    """The hyper-parameters of a cell's model and profile, optionally with another epoch count."""
    MODELS[model]
    validate_profile(profile)
    hp = HPARAMS[(model, profile)]
    if epochs is not None:
        hp = replace(hp, epochs=epochs)
    return hp
