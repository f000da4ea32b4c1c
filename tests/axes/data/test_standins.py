"""The PEFT stand-ins: stratified splits, and a Bayes ceiling that is the exact posterior's on the split itself."""

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from gradeff.axes.data import standins
from gradeff.axes.data.standin_objects import object_classes
from gradeff.axes.data.standin_textures import texture_classes
from gradeff.axes.data.standins import objects, stratified_classes, textures

BUILDERS = {"objects": objects, "textures": textures}


@given(classes=st.integers(1, 40), samples=st.integers(0, 300), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_stratified_classes_are_as_equal_as_the_size_allows(classes, samples, seed):
    """Each class ⌊n/K⌋ or ⌈n/K⌉ times: every class present as soon as n ≥ K, counts within 1 of each other."""
    labels = stratified_classes(classes, samples, np.random.default_rng(seed))
    counts = Counter(labels.tolist())
    assert len(labels) == samples and set(counts) <= set(range(classes))
    full = [counts.get(c, 0) for c in range(classes)]
    assert max(full) - min(full) <= (1 if samples % classes else 0)
    assert min(full) == samples // classes


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_every_split_holds_every_class_in_equal_shares(family):
    """Train, test and validation: every class in each, counts within 1; the splits share no image."""
    data = BUILDERS[family](num_classes=7, image_size=8, num_samples=30, seed=3, heldout_samples=20,
                            validation_samples=9)
    splits = {"train": data, "test": data.heldout, "validation": data.validation}
    assert {name: len(split) for name, split in splits.items()} == {"train": 30, "test": 20, "validation": 9}
    for name, split in splits.items():
        counts = Counter(split.tensors["labels"].tolist())
        assert sorted(counts) == list(range(7)), name
        assert max(counts.values()) - min(counts.values()) <= 1, name
    flat = {name: split.tensors["pixel_values"].flatten(1) for name, split in splits.items()}
    for first, second in (("train", "test"), ("train", "validation"), ("test", "validation")):
        assert not (flat[first][:, None] == flat[second][None]).all(dim=2).any(), (first, second)


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_asking_for_more_splits_leaves_the_earlier_ones_unchanged(family):
    """Train, then test, then validation are drawn in that order: none depends on whether a later one is asked for."""
    build = BUILDERS[family]
    alone = build(num_classes=4, image_size=8, num_samples=12, seed=1)
    tested = build(num_classes=4, image_size=8, num_samples=12, seed=1, heldout_samples=8, validation_samples=0)
    full = build(num_classes=4, image_size=8, num_samples=12, seed=1, heldout_samples=8, validation_samples=4)
    for name in ("pixel_values", "labels"):
        assert torch.equal(alone.tensors[name], full.tensors[name])
        assert torch.equal(tested.heldout.tensors[name], full.heldout.tensors[name])


def test_the_validation_split_defaults_to_the_test_splits_size_and_none_is_possible():
    assert len(objects(num_classes=3, image_size=8, num_samples=6, seed=0, heldout_samples=6).validation) == 6
    alone = textures(num_classes=3, image_size=8, num_samples=6, seed=0)
    assert alone.heldout is None and alone.validation is None


def _operator(filters: np.ndarray) -> np.ndarray:
    """The dense matrix of ``x ↦ ifft2(filters(f) · fft2(x))`` on ``(3, S, S)`` images: ``(D, D)``."""
    size = filters.shape[0]
    basis = np.eye(3 * size * size).reshape(-1, 3, size, size)
    spectrum = np.fft.fft2(basis, norm="ortho")
    mapped = np.fft.ifft2(np.einsum("yxij,njyx->niyx", filters, spectrum), norm="ortho").real
    return mapped.reshape(len(basis), -1).T


def _gaussian_logpdf(images: np.ndarray, means: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """``log N(x; μ, Σ)`` up to ``D/2 log 2π`` for every image × mean: ``(N, M)``, by a dense Cholesky factor."""
    factor = np.linalg.cholesky(covariance)
    residual = images[:, None, :] - means[None, :, :]
    solved = np.linalg.solve(factor, residual.reshape(-1, residual.shape[-1]).T).T
    quadratic = (solved**2).sum(axis=1).reshape(residual.shape[:2])
    return -0.5 * quadratic - np.log(np.diag(factor)).sum()


def _ceiling(log_likelihood: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    posterior = log_likelihood - logsumexp(log_likelihood, axis=1, keepdims=True)
    return float((posterior.argmax(axis=1) == labels).mean()), float(-posterior[np.arange(len(labels)), labels].mean())


def _recorded(split) -> tuple[float, float]:
    return split.info["bayes_accuracy"], split.loss_floor


def test_object_ceiling_is_the_brute_force_posterior_on_the_split():
    """Dense Gaussian likelihoods, summed over every pose and position, give the split's recorded Bayes accuracy
    and floor: the ceiling is what the exact classifier reaches on these very samples."""
    data = objects(num_classes=4, image_size=8, num_samples=8, seed=5, heldout_samples=48, validation_samples=0)
    parts, order, world = standins._object_world(5)
    classes = object_classes(parts, order[:4], 8, world)
    covariance = (lambda h: h @ h.T)(_operator(np.linalg.cholesky(classes.background)))
    means = np.stack([[[np.roll(template, tuple(offset), axis=(-2, -1)).reshape(-1) for offset in classes.offsets]
                       for template in poses] for poses in classes.templates])  # (K, V, T, D)
    test = data.heldout
    images, labels = (test.tensors["pixel_values"].double().numpy().reshape(len(test), -1),
                      test.tensors["labels"].numpy())
    flat = _gaussian_logpdf(images, means.reshape(-1, means.shape[-1]), covariance)
    per_class = logsumexp(flat.reshape(len(images), 4, -1), axis=2)
    accuracy, floor = _ceiling(per_class, labels)
    recorded_accuracy, recorded_floor = _recorded(test)
    assert recorded_accuracy == accuracy
    assert recorded_floor == pytest.approx(floor, rel=1e-3, abs=1e-6)
    # The training split's own ceiling is its own, not the test split's.
    assert _recorded(data)[1] != pytest.approx(recorded_floor, rel=1e-3)


def test_texture_ceiling_is_the_brute_force_posterior_on_the_split():
    """Each class a mixture over rotation and scale of zero-mean Gaussians with dense covariances: the split's
    recorded Bayes accuracy and floor are that posterior's."""
    data = textures(num_classes=3, image_size=8, num_samples=6, seed=2, heldout_samples=30, validation_samples=0)
    parts, order = standins._texture_world(2)
    classes = texture_classes(parts, order[:3], 8)
    test = data.heldout
    images, labels = (test.tensors["pixel_values"].double().numpy().reshape(len(test), -1),
                      test.tensors["labels"].numpy())
    zero = np.zeros((1, images.shape[1]))
    per_nuisance = np.array([[_gaussian_logpdf(images, zero,
                                               (lambda h: h @ h.T)(_operator(np.linalg.cholesky(s))))[:, 0]
                              for s in spectra] for spectra in classes.spectra])  # (K, V, N)
    per_class = logsumexp(per_nuisance, axis=1).T - np.log(per_nuisance.shape[1])
    accuracy, floor = _ceiling(per_class, labels)
    recorded_accuracy, recorded_floor = _recorded(test)
    assert recorded_accuracy == accuracy
    assert recorded_floor == pytest.approx(floor, rel=1e-6, abs=1e-9)


def test_the_stand_ins_record_their_pixel_baseline_on_the_test_split():
    """The test split carries the raw-pixel 1-NN accuracy against this very training split."""
    from gradeff.axes.data.sanity import pixel_nearest_neighbour_accuracy

    data = objects(num_classes=5, image_size=8, num_samples=20, seed=1, heldout_samples=15, validation_samples=5)
    assert data.heldout.info["sanity_accuracy"] == pixel_nearest_neighbour_accuracy(data, data.heldout)
    assert "sanity_accuracy" not in data.validation.info
