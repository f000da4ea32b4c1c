"""The sanity baseline: a 1-nearest-neighbour classifier on raw pixels, as scikit-learn computes it."""

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier

from gradeff.axes.data.dataset import Dataset
from gradeff.axes.data.sanity import pixel_nearest_neighbour_accuracy


def _images(pixels: np.ndarray, labels: np.ndarray, **extra) -> Dataset:
    return Dataset(task="t", tensors={"pixel_values": torch.from_numpy(pixels), "labels": torch.from_numpy(labels)},
                   targets=torch.ones(len(labels), dtype=torch.long), loss_floor=None, floor_note="", **extra)


@pytest.mark.parametrize("seed", range(3))
def test_accuracy_equals_scikit_learns_1nn(seed):
    """Same predictions as KNeighborsClassifier(n_neighbors=1) on random images of a few classes."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(5, 3, 4, 4))
    train_labels, test_labels = rng.integers(0, 5, 40), rng.integers(0, 5, 31)
    train = centres[train_labels] + 1.5 * rng.normal(size=(40, 3, 4, 4))
    test = centres[test_labels] + 1.5 * rng.normal(size=(31, 3, 4, 4))
    expected = KNeighborsClassifier(n_neighbors=1).fit(train.reshape(40, -1), train_labels).score(
        test.reshape(31, -1), test_labels)
    got = pixel_nearest_neighbour_accuracy(_images(train.astype(np.float32), train_labels),
                                           _images(test.astype(np.float32), test_labels), chunk=7)
    assert got == pytest.approx(expected)
    assert 0 < got < 1  # the case is neither trivial nor hopeless: a wrong neighbour would show


def test_stored_uint8_images_match_as_decoded_floats():
    """Images stored as uint8 with a decode step (as real data is) give scikit-learn's answer on the floats."""
    rng = np.random.default_rng(0)
    train, test = (rng.integers(0, 256, (n, 3, 2, 2), dtype=np.uint8) for n in (30, 25))
    train_labels, test_labels = train[:, 0, 0, 0] // 64, test[:, 0, 0, 0] // 64
    decode = {"pixel_values": (1 / 255, -0.5)}
    expected = KNeighborsClassifier(n_neighbors=1).fit(train.reshape(30, -1) / 255 - 0.5, train_labels).score(
        test.reshape(25, -1) / 255 - 0.5, test_labels)
    got = pixel_nearest_neighbour_accuracy(_images(train, train_labels.astype(np.int64), decode=decode),
                                           _images(test, test_labels.astype(np.int64), decode=decode))
    assert got == pytest.approx(expected) and 0 < got < 1


def test_a_split_without_images_is_refused():
    text = Dataset(task="t", tensors={"input_ids": torch.zeros(2, 3, dtype=torch.long)},
                   targets=torch.ones(2, dtype=torch.long), loss_floor=None, floor_note="")
    images = _images(np.zeros((2, 3, 2, 2), np.float32), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="labelled images"):
        pixel_nearest_neighbour_accuracy(text, images)


def test_a_constructed_case_takes_the_nearest_training_label():
    """Training images at 0 (class 0), 10 (class 1) and 4 (class 2): each test image takes its nearest one's label,
    a tie the first training image's."""
    train = _images(np.array([0.0, 10.0, 4.0], np.float32).reshape(3, 1, 1, 1), np.array([0, 1, 2]))
    test = _images(np.array([1.0, 9.0, 5.0, 2.0, 7.5], np.float32).reshape(5, 1, 1, 1), np.array([0, 1, 2, 2, 2]))
    # Nearest: 0 → 0, 10 → 1, 4 → 2, tie between 0 and 4 → 0 (first), 10 → 1: three of five right.
    assert pixel_nearest_neighbour_accuracy(train, test) == pytest.approx(3 / 5)
