"""Image tasks: noisy class templates (classification) and image → caption, with exact loss floors.

An image is a smooth class template plus Gaussian noise. With equal priors and isotropic noise the
Bayes posterior is a softmax of -‖x - μ_c‖² / 2σ², so the best achievable loss (and the Bayes
classifier's accuracy) is computed exactly on the very samples drawn.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

from gradeff.data.dataset import IGNORE_INDEX, SPECIAL_TOKENS, Dataset
from gradeff.data.markov import make_chain
from gradeff.data.text import FIRST_STATE_TOKEN

__all__ = ["image_captioning", "image_classification", "make_templates", "noisy_templates", "sample_images"]

_TEMPLATE_GRID = 4  # templates vary on a 4×4 grid of blocks: structure a patch model can pick up
_NOISE_STD = 1.0


def make_templates(*, num_classes: int, image_size: int, rng: np.random.Generator, snr: float = 4.0,
                   grid: int | tuple[int, ...] = _TEMPLATE_GRID) -> np.ndarray:
    """Class means: a random value per (channel, block) of a ``grid × grid`` block pattern.

    Args:
        snr: template amplitude × √(pixels) / σ; the distance between two class means is about
            snr·√2 noise standard deviations, whatever the image size or grid, so difficulty does
            not change between profiles.
        grid: blocks per side; a finer grid makes a texture-like pattern of smaller blocks. Several
            grids split the classes between them (class c uses ``grid[c % len(grid)]``).

    Returns:
        ``(K, 3, S, S)`` float64 templates.
    """
    grids = (grid,) if isinstance(grid, int) else tuple(grid)
    if any(image_size % g for g in grids):
        raise ValueError(f"image_size must be a multiple of the template grid {grid}, got {image_size}")
    pixels = 3 * image_size * image_size
    templates = np.empty((num_classes, 3, image_size, image_size))
    for i, g in enumerate(grids):
        block = image_size // g
        coarse = rng.standard_normal((len(range(i, num_classes, len(grids))), 3, g, g))
        templates[i::len(grids)] = coarse.repeat(block, axis=2).repeat(block, axis=3)
    return templates * (snr / np.sqrt(pixels))


def sample_images(templates: np.ndarray, num_samples: int, rng: np.random.Generator):
    """Images of uniformly random classes, and the exact Bayes log-posterior of every class.

    Returns:
        ``(images (N,3,S,S) float32, classes (N,), log_posterior (N,K))``.
    """
    num_classes = templates.shape[0]
    classes = rng.integers(0, num_classes, num_samples)
    images = templates[classes] + _NOISE_STD * rng.standard_normal((num_samples, *templates.shape[1:]))
    flat_images = images.reshape(num_samples, -1)
    flat_templates = templates.reshape(num_classes, -1)
    # ‖x - μ‖² expanded: one (N, K) product instead of an (N, K, pixels) array, which at 224 px and
    # 100 classes would not fit in memory.
    sq_dist = ((flat_images**2).sum(axis=1)[:, None] - 2 * flat_images @ flat_templates.T
               + (flat_templates**2).sum(axis=1)[None, :])
    logits = -sq_dist / (2 * _NOISE_STD**2)
    log_posterior = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    return images.astype(np.float32), classes, log_posterior


def noisy_templates(*, num_classes: int, image_size: int, num_samples: int, rng: np.random.Generator,
                    snr: float = 4.0):
    """Templates drawn from ``rng``, then ``num_samples`` images of them (see :func:`sample_images`)."""
    templates = make_templates(num_classes=num_classes, image_size=image_size, rng=rng, snr=snr)
    return sample_images(templates, num_samples, rng)


def _classification_split(task: str, images, classes, log_post, info: dict) -> Dataset:
    n = len(classes)
    bayes_correct = log_post.argmax(axis=1) == classes
    return Dataset(
        task=task,
        tensors={"pixel_values": torch.from_numpy(images), "labels": torch.from_numpy(classes)},
        targets=torch.ones(n, dtype=torch.long),
        loss_floor=float(-log_post[np.arange(n), classes].mean()),
        floor_note="Bayes loss: exact class posterior under the known templates and Gaussian noise",
        info=info | {"bayes_accuracy": float(bayes_correct.mean())},
    )


def image_classification(*, num_classes: int, image_size: int, num_samples: int, seed: int,
                         heldout_samples: int = 0, template_grid: int | tuple[int, ...] = _TEMPLATE_GRID,
                         salt: str | None = None,
                         snr: float = 4.0, task: str = "image_classification") -> Dataset:
    """Classify noisy templates; floor = Bayes cross-entropy on the samples.

    Args:
        heldout_samples: size of a held-out split drawn from the same classes after the training
            samples (so adding it leaves the training samples unchanged); it is never trained on.
        template_grid: blocks per side of the templates (4: coarse shapes; 8: texture-like), or
            several, splitting the classes between them.
        salt: a name mixed into the seed, so that two datasets built with the same seed have
            different classes (``None``: the seed alone, as the main study's task always had).
        snr: how far apart the classes are (see :func:`make_templates`).
        task: the task key recorded on the dataset.

    Returns:
        The training split; its ``heldout`` holds the held-out split when one was asked for.
    """
    rng = np.random.default_rng(seed if salt is None else [seed, zlib.crc32(salt.encode())])
    templates = make_templates(num_classes=num_classes, image_size=image_size, rng=rng, grid=template_grid, snr=snr)
    info = {"num_classes": num_classes, "image_size": image_size, "template_grid": template_grid}
    train = _classification_split(task, *sample_images(templates, num_samples, rng), info)
    if heldout_samples:
        heldout = _classification_split(task, *sample_images(templates, heldout_samples, rng), info)
        train = train.with_heldout(heldout)
    return train


def image_captioning(*, num_classes: int, image_size: int, caption_len: int, num_states: int, num_samples: int,
                     seed: int, heldout_samples: int = 0) -> Dataset:
    """Caption a noisy template: the first caption token names the class, the rest is Markov text.

    The decoder must read the image to get the first token right and model the chain for the
    rest. Floor = (Bayes class loss + Σ -log P(s_t | s_{t-1})) / caption_len on the samples.

    Args:
        heldout_samples: image-caption pairs of a held-out split, drawn after everything else.
    """
    if num_classes > num_states:
        raise ValueError("image_captioning needs num_states >= num_classes (one start state per class)")
    rng = np.random.default_rng(seed)
    templates = make_templates(num_classes=num_classes, image_size=image_size, rng=rng)
    sampled = sample_images(templates, num_samples, rng)
    chain = make_chain(num_states, rng)
    start_states = rng.permutation(num_states)[:num_classes]
    info = {"num_classes": num_classes, "image_size": image_size, "caption_len": caption_len, "num_states": num_states}
    train = _captioning_split(*sampled, chain, start_states, caption_len, rng, info)
    if not heldout_samples:
        return train
    heldout = sample_images(templates, heldout_samples, rng)
    return train.with_heldout(_captioning_split(*heldout, chain, start_states, caption_len, rng, info))


def _captioning_split(images, classes, log_post, chain, start_states, caption_len: int, rng: np.random.Generator,
                      info: dict) -> Dataset:
    num_samples = len(classes)
    states = chain.sample(rng, num_samples, caption_len, first=start_states[classes])
    caption = states + FIRST_STATE_TOKEN
    bos = np.full((num_samples, 1), SPECIAL_TOKENS["bos"])
    # Inputs are [BOS, s1..sL]; the decoder shifts labels, so BOS's position predicts s1.
    input_ids = np.concatenate([bos, caption], axis=1)
    labels = np.concatenate([np.full((num_samples, 1), IGNORE_INDEX), caption], axis=1)
    first = -log_post[np.arange(num_samples), classes]
    rest = -np.log(chain.transition[states[:, :-1], states[:, 1:]]).sum(axis=1)
    return Dataset(
        task="image_captioning",
        tensors={"pixel_values": torch.from_numpy(images), "input_ids": torch.from_numpy(input_ids),
                 "labels": torch.from_numpy(labels)},
        targets=torch.full((num_samples,), caption_len),
        loss_floor=float(((first + rest) / caption_len).mean()),
        floor_note="Bayes loss: class posterior for the first caption token, Markov chain for the rest",
        info=info,
    )
