"""Profiles: the size of everything, from CPU seconds (tiny) to the papers' GPU runs (paper), and the
:class:`HParams` a model trains with at one of them.

This module imports no registry: the specs (models, datasets) hold their own ``HParams`` per profile.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_PROFILE", "PROFILES", "HParams", "validate_profile"]

PROFILES: tuple[str, ...] = ("tiny", "small", "paper")
DEFAULT_PROFILE = "tiny"


def validate_profile(profile: str) -> str:
    """Return ``profile`` if known, else raise ``ValueError`` naming the valid profiles."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    return profile


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
