"""The sanity baseline of an image classification task: a 1-nearest-neighbour classifier on raw pixels.

It needs no training and no features: each test image takes the label of the training image nearest to it
in Euclidean distance over its pixel values. A fine-tuned model that does not beat it has learned nothing
that pixel matching did not already give, so its accuracy says nothing about the fine-tuning method; the
PEFT study records it beside every cell's accuracy and flags such cells.
"""

from __future__ import annotations

import torch

from gradeff.axes.data.dataset import Dataset

__all__ = ["PIXEL_BASELINE", "pixel_nearest_neighbour_accuracy"]

# The key of the test split's info (and of a cell's task record) that holds the baseline's accuracy.
PIXEL_BASELINE = "sanity_accuracy"


def _pixels(data: Dataset, indices: torch.Tensor) -> torch.Tensor:
    # Through ``batch`` so stored uint8 images are decoded as a model would see them.
    return data.batch(indices)["pixel_values"].flatten(1).double()


def pixel_nearest_neighbour_accuracy(train: Dataset, test: Dataset, *, chunk: int = 512) -> float:
    """Top-1 accuracy on ``test`` of the label of the nearest ``train`` image (Euclidean, raw pixels).

    Distances are computed in double precision, ``chunk`` test images at a time; a tie goes to the
    training image that comes first.

    Raises:
        ValueError: a split without images or labels, or an empty one.
    """
    for name, split in (("training", train), ("test", test)):
        if not {"pixel_values", "labels"} <= set(split.tensors) or len(split) == 0:
            raise ValueError(f"the 1-NN pixel baseline needs a non-empty {name} split of labelled images")
    reference = _pixels(train, torch.arange(len(train)))
    reference_sq = (reference**2).sum(dim=1)
    labels = train.tensors["labels"]
    correct = 0
    for indices in torch.arange(len(test)).split(chunk):
        queries = _pixels(test, indices)
        # ‖q − r‖² up to ‖q‖², which does not change the nearest r.
        distances = reference_sq[None, :] - 2 * queries @ reference.T
        correct += int((labels[distances.argmin(dim=1)] == test.tensors["labels"][indices]).sum())
    return correct / len(test)
