"""Stand-ins for CIFAR-100 and DTD whose classes need features: objects and textures under nuisance variation.

A class is never one fixed image plus noise, so matching raw pixels against the training set fails:

- **objects** (``cifar100``): a two-colour star-shaped object per class, drawn at a random position, rotation
  and scale over a cluttered, coloured Gaussian background with a random colour cast and pixel noise;
- **textures** (``dtd``): a stationary Gaussian random field per class, its power spectrum (dominant
  frequencies, orientations, colours) the class and its phase random, seen at a random rotation and scale
  and under a random colour cast.

Both are Gaussian given the class and a finite set of nuisance values (pose; rotation and scale), so the
Bayes classifier is exact: the class posterior sums the Gaussian likelihood over every nuisance value,
which the Fourier basis makes cheap (the background's and the textures' covariances are block-circulant,
and a translated template is a product in frequency). The loss floor and the Bayes accuracy of each split
are computed on its very samples.

Splits are stratified: every split holds every class, in proportions as equal as its size allows, so a
held-out sample never belongs to a class the training split lacks.

This module owns the tasks (the stand-ins, the backbones' source task and their splits); the classes are drawn and
scored in :mod:`gradeff.axes.data.standin_objects` and :mod:`gradeff.axes.data.standin_textures`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np
import torch

from gradeff.axes.data.dataset import Dataset
from gradeff.axes.data.sanity import PIXEL_BASELINE, pixel_nearest_neighbour_accuracy
from gradeff.axes.data.standin_objects import OUTLINES, ObjectParts, object_classes, object_parts
from gradeff.axes.data.standin_textures import TextureParts, texture_classes, texture_parts

__all__ = ["Mixture", "objects", "source_task", "stratified_classes", "textures"]


def stratified_classes(num_classes: int, num_samples: int, rng: np.random.Generator) -> np.ndarray:
    """``num_samples`` labels, each class ⌊n/K⌋ or ⌈n/K⌉ times (the extra ones to random classes), shuffled."""
    base, extra = divmod(num_samples, num_classes)
    counts = np.full(num_classes, base)
    counts[rng.choice(num_classes, extra, replace=False)] += 1
    return rng.permutation(np.repeat(np.arange(num_classes), counts))


def _split(task: str, images: np.ndarray, classes: np.ndarray, loglik: np.ndarray | None, info: dict,
           note: str) -> Dataset:
    """A split's :class:`Dataset`; with the classes' log-likelihoods ``(N, K)``, its exact floor and Bayes accuracy."""
    n = len(classes)
    floor, bayes = None, None
    if loglik is not None:
        log_posterior = loglik - np.logaddexp.reduce(loglik, axis=1, keepdims=True)
        floor = float(-log_posterior[np.arange(n), classes].mean())
        bayes = float((log_posterior.argmax(axis=1) == classes).mean())
    return Dataset(
        task=task,
        tensors={"pixel_values": torch.from_numpy(images.astype(np.float32)),
                 "labels": torch.from_numpy(classes.astype(np.int64))},
        targets=torch.ones(n, dtype=torch.long),
        loss_floor=floor,
        floor_note=note if loglik is not None else "not computed for this split",
        info=info | ({"bayes_accuracy": bayes} if bayes is not None else {}),
    )


def _splits(task: str, classes, num_classes: int, num_samples: int, heldout_samples: int,
            validation_samples: int | None, rng: np.random.Generator, info: dict, note: str, *,
            train_floor: bool = True) -> Dataset:
    """Train, then test (``heldout``) and validation splits, each stratified, drawn in that order.

    Args:
        validation_samples: ``None``: as many as the test split.
        train_floor: compute the training split's exact floor (a large source task skips it: only its
            held-out Bayes accuracy is recorded).
    """

    def split(count: int, exact: bool = True) -> Dataset:
        labels = stratified_classes(num_classes, count, rng)
        images = classes.sample(labels, rng)
        return _split(task, images, labels, classes.log_likelihood(images) if exact else None, info, note)

    train = split(num_samples, train_floor)
    if heldout_samples:
        test = split(heldout_samples)
        baseline = pixel_nearest_neighbour_accuracy(train, test)
        train = train.with_heldout(replace(test, info=test.info | {PIXEL_BASELINE: baseline}))
    validation = heldout_samples if validation_samples is None else validation_samples
    if validation:
        train = train.with_validation(split(validation))
    return train


@dataclass(frozen=True, slots=True)
class Mixture:
    """Several families' classes as one label space: labels ``0..K1-1`` are the first family's, and so on."""

    parts: tuple

    @property
    def sizes(self) -> list[int]:
        return [len(part) for part in self.parts]

    def sample(self, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        images, start = None, 0
        for part, size in zip(self.parts, self.sizes, strict=True):
            where = np.flatnonzero((classes >= start) & (classes < start + size))
            drawn = part.sample(classes[where] - start, rng)
            if images is None:
                images = np.empty((len(classes), *drawn.shape[1:]))
            images[where] = drawn
            start += size
        return images

    def log_likelihood(self, images: np.ndarray) -> np.ndarray:
        return np.concatenate([part.log_likelihood(images) for part in self.parts], axis=1)


def source_task(*, num_classes: int, image_size: int, num_samples: int, seed: int, heldout_samples: int = 0,
                salt: str = "pretrain", task: str = "pretrain") -> Dataset:
    """The backbones' pretraining task: objects and textures, half of each, of classes the stand-ins do not have.

    Its classes are other combinations of the same parts (shapes and colour schemes; spectral patterns and
    colour mixes) under the same nuisance variation: a backbone that learns them has seen every part the
    stand-ins' classes are made of, but none of their classes, as ImageNet's categories share parts with
    CIFAR-100's and DTD's. Only the held-out split's floor is computed.
    """
    object_parts_, object_order, world = _object_world(seed)
    texture_parts_, texture_order = _texture_world(seed)
    half = num_classes // 2
    mixture = Mixture((
        object_classes(object_parts_, _source_combinations(object_order, _OBJECT_LIMIT, num_classes - half),
                       image_size, world),
        texture_classes(texture_parts_, _source_combinations(texture_order, _TEXTURE_LIMIT, half),
                        image_size)))
    rng = np.random.default_rng([seed, zlib.crc32(salt.encode())])
    info = {"num_classes": num_classes, "image_size": image_size, "families": {"objects": mixture.sizes[0],
                                                                               "textures": mixture.sizes[1]}}
    note = "Bayes loss: exact class posterior over the objects' and the textures' classes"
    return _splits(task, mixture, num_classes, num_samples, heldout_samples, 0, rng, info, note, train_floor=False)


def _combinations(first: int, second: int, rng: np.random.Generator) -> np.ndarray:
    """Every ``(i, j)`` of ``first × second`` parts, in a random order: ``(first·second, 2)``."""
    pairs = np.stack(np.meshgrid(np.arange(first), np.arange(second), indexing="ij"), axis=-1).reshape(-1, 2)
    return pairs[rng.permutation(len(pairs))]


def _source_combinations(order: np.ndarray, reserved: int, count: int) -> np.ndarray:
    """``count`` combinations for the source task from the end of ``order``, never one of its first ``reserved``
    (the stand-in's classes), every part of the vocabulary among them as soon as possible."""
    pool = order[reserved:][::-1]
    if count > len(pool):
        raise ValueError(f"the vocabulary has {len(order)} combinations: {reserved} for the stand-in leave "
                         f"{len(pool)}, not {count}")
    seen: tuple[set, set] = (set(), set())
    first, rest = [], []
    for pair in pool:
        new = pair[0] not in seen[0] or pair[1] not in seen[1]
        (first if new else rest).append(pair)
        if new:
            seen[0].add(pair[0])
            seen[1].add(pair[1])
    return np.array((first + rest)[:count])


# The vocabularies: each family's combinations of parts in the seed's random order; the first ones (up to a
# limit) are the stand-in's classes, the source task takes its classes from the end, so the two never share a
# class but share every part.
_OBJECT_VOCABULARY = (len(OUTLINES), 12)  # shapes × schemes: 144 combinations
_OBJECT_LIMIT = 108  # the stand-in's classes at most (CIFAR-100 needs 100): 36 left for the source task
_TEXTURE_VOCABULARY = (12, 12)  # patterns × colour mixes: 144 combinations
_TEXTURE_LIMIT = 72  # DTD needs 47: 72 left for the source task


def _object_world(seed: int) -> tuple[ObjectParts, np.ndarray, np.random.Generator]:
    """The objects' parts, their combinations in order, and the generator the background is drawn from."""
    rng = np.random.default_rng([seed, zlib.crc32(b"objects")])
    parts = object_parts(rng, _OBJECT_VOCABULARY[1])
    return parts, _combinations(*_OBJECT_VOCABULARY, rng), rng


def _texture_world(seed: int) -> tuple[TextureParts, np.ndarray]:
    rng = np.random.default_rng([seed, zlib.crc32(b"textures")])
    return texture_parts(rng, *_TEXTURE_VOCABULARY), _combinations(*_TEXTURE_VOCABULARY, rng)


def _stand_in_combinations(order: np.ndarray, num_classes: int, limit: int, family: str) -> np.ndarray:
    if num_classes > limit:
        raise ValueError(f"the {family} stand-in has at most {limit} classes, not {num_classes}")
    return order[:num_classes]


def objects(*, num_classes: int, image_size: int, num_samples: int, seed: int, heldout_samples: int = 0,
            validation_samples: int | None = None, salt: str = "cifar100", task: str = "cifar100") -> Dataset:
    """The CIFAR-100 stand-in: two-colour objects at a random pose over clutter, under a colour cast."""
    parts, order, world = _object_world(seed)
    classes = object_classes(parts, _stand_in_combinations(order, num_classes, _OBJECT_LIMIT, "objects"),
                             image_size, world)
    rng = np.random.default_rng([seed, zlib.crc32(salt.encode())])
    info = {"num_classes": num_classes, "image_size": image_size, "positions": len(classes.offsets),
            "poses": classes.templates.shape[1]}
    note = "Bayes loss: exact class posterior, the Gaussian likelihood summed over rotation, scale and position"
    return _splits(task, classes, num_classes, num_samples, heldout_samples, validation_samples, rng, info, note)


def textures(*, num_classes: int, image_size: int, num_samples: int, seed: int, heldout_samples: int = 0,
             validation_samples: int | None = None, salt: str = "dtd", task: str = "dtd") -> Dataset:
    """The DTD stand-in: textures whose class is their spectrum, under rotation, scale, phase and colour cast."""
    parts, order = _texture_world(seed)
    classes = texture_classes(parts, _stand_in_combinations(order, num_classes, _TEXTURE_LIMIT, "textures"), image_size)
    rng = np.random.default_rng([seed, zlib.crc32(salt.encode())])
    info = {"num_classes": num_classes, "image_size": image_size, "nuisance_values": len(classes.nuisances)}
    note = "Bayes loss: exact class posterior, the Gaussian likelihood summed over rotation and scale"
    return _splits(task, classes, num_classes, num_samples, heldout_samples, validation_samples, rng, info, note)
