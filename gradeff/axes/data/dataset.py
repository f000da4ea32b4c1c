"""The in-memory dataset every synthetic task produces, and the epoch order shared by all cells."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

__all__ = ["IGNORE_INDEX", "SPECIAL_TOKENS", "Dataset", "epoch_order"]

# Labels equal to this are skipped by every transformers loss.
IGNORE_INDEX = -100
# Token ids reserved in every synthetic vocabulary; Markov states start after them.
SPECIAL_TOKENS = {"pad": 0, "mask": 1, "bos": 2, "sep": 3}


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """All samples of a task, as tensors whose first dimension is the sample.

    Attributes:
        task: task key.
        tensors: model inputs by keyword (``input_ids``, ``pixel_values``, ``labels`` ...).
        targets: ``(N,)`` number of loss targets (tokens or images) per sample; the training loop
            weights micro-batches by it so accumulated gradients equal the large-batch gradient.
        loss_floor: mean cross-entropy of the Bayes-optimal predictor on these very samples
            (nats per target), or ``None`` when unknown. A model can only go below it by memorising.
        floor_note: how the floor was computed.
        info: task parameters worth recording (vocabulary, classes, lengths).
        heldout: the **test** split: samples of the same task that are never trained on and never tuned on,
            the split every reported held-out figure comes from, with its own exact floor; ``None`` when the
            task has none.
        validation: the **validation** split: samples of the same task, never trained on, that tuning and early
            decisions read (the learning-rate search, the tuned-rate table), so the test split stays unseen
            until it is reported; ``None`` when the task has none.
        decode: tensor name → ``(scale, offset)`` applied to a batch of it as ``x.float() * scale + offset``:
            real images are kept as ``uint8`` (a quarter of the memory and of the cache file) and
            normalised only for the batch a step reads.
    """

    task: str
    tensors: dict[str, torch.Tensor]
    targets: torch.Tensor
    loss_floor: float | None
    floor_note: str
    info: dict = field(default_factory=dict)
    heldout: Dataset | None = None
    validation: Dataset | None = None
    decode: dict = field(default_factory=dict)

    def __post_init__(self):
        sizes = {name: t.shape[0] for name, t in self.tensors.items()} | {"targets": self.targets.shape[0]}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"tensors disagree on the number of samples: {sizes}")

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def with_heldout(self, heldout: Dataset) -> Dataset:
        """This split with ``heldout`` attached as its held-out (test) split."""
        self._check_split(heldout, "a held-out split")
        return replace(self, heldout=heldout)

    def with_validation(self, validation: Dataset) -> Dataset:
        """This split with ``validation`` attached as its validation split."""
        self._check_split(validation, "a validation split")
        return replace(self, validation=validation)

    def _check_split(self, split: Dataset, what: str) -> None:
        if split.task != self.task or set(split.tensors) != set(self.tensors):
            raise ValueError(f"{what} must be of the same task, with the same tensors")

    def batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        """The model inputs of the samples at ``indices``."""
        batch = {name: _gather(t, indices) for name, t in self.tensors.items()}
        for name, (scale, offset) in self.decode.items():
            batch[name] = batch[name].float() * scale + offset
        return batch

    def head(self, count: int) -> Dataset:
        """The first ``count`` samples (the held-out and validation splits stay whole)."""
        return replace(self, tensors={name: t[:count] for name, t in self.tensors.items()},
                       targets=self.targets[:count])


def _gather(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``tensor[indices]`` along the first dimension, as fast as a copy of those rows can be.

    ``index_select`` copies the same rows as advanced indexing, whose general path costs ~6x as much per image batch
    on a CPU (98 vs 17 us for 32 tiny images), a cost a bare training loop would not pay. It returns them in the
    default (contiguous) layout, though, where advanced indexing keeps the source's layout within a sample (a
    stand-in's images stored sample-minor come out channels-last), and a convolution's arithmetic, hence its last
    bits, depends on its input's layout. So the rows are selected from the tensor's dimensions in the order of its
    strides and put back: the batch has the layout ``tensor[indices]`` would have, and the same numbers follow.
    """
    if tensor.is_contiguous():
        return tensor.index_select(0, indices)  # every step of a contiguous dataset: no stride sorting in Python
    order = [0, *sorted(range(1, tensor.dim()), key=lambda dim: -tensor.stride(dim))]
    restore = [order.index(dim) for dim in range(tensor.dim())]
    return tensor.permute(order).index_select(0, indices).permute(restore)


def epoch_order(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The sample order of one epoch: a permutation fixed by (seed, epoch) alone.

    Every optimizer and strategy of a model sees the same samples in the same order, so
    differences between cells come from the optimisation, not from the data.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_samples, generator=generator)
