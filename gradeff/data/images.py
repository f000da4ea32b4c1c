"""Image tasks: noisy class templates (classification) and image → caption, with exact loss floors.

An image is a smooth class template plus Gaussian noise. With equal priors and isotropic noise the
Bayes posterior is a softmax of -‖x - μ_c‖² / 2σ², so the best achievable loss is computed exactly.
"""

from __future__ import annotations

import numpy as np
import torch

from gradeff.data.dataset import IGNORE_INDEX, SPECIAL_TOKENS, Dataset
from gradeff.data.markov import make_chain
from gradeff.data.text import FIRST_STATE_TOKEN

__all__ = ["image_captioning", "image_classification", "noisy_templates"]

_TEMPLATE_GRID = 4  # templates vary on a 4×4 grid of blocks: structure a patch model can pick up
_NOISE_STD = 1.0


def noisy_templates(*, num_classes: int, image_size: int, num_samples: int, rng: np.random.Generator,
                    snr: float = 4.0):
    """Images of random classes and the Bayes log-posterior of every class.

    Args:
        snr: template amplitude × √(pixels) / σ; the distance between two class means is about
            snr·√2 noise standard deviations, whatever the image size, so difficulty does not
            change between profiles.

    Returns:
        ``(images (N,3,S,S) float32, classes (N,), log_posterior (N,K))``.
    """
    if image_size % _TEMPLATE_GRID:
        raise ValueError(f"image_size must be a multiple of {_TEMPLATE_GRID}, got {image_size}")
    pixels = 3 * image_size * image_size
    block = image_size // _TEMPLATE_GRID
    coarse = rng.standard_normal((num_classes, 3, _TEMPLATE_GRID, _TEMPLATE_GRID))
    templates = coarse.repeat(block, axis=2).repeat(block, axis=3) * (snr / np.sqrt(pixels))
    classes = rng.integers(0, num_classes, num_samples)
    images = templates[classes] + _NOISE_STD * rng.standard_normal((num_samples, 3, image_size, image_size))
    flat_images = images.reshape(num_samples, -1)
    flat_templates = templates.reshape(num_classes, -1)
    sq_dist = ((flat_images[:, None, :] - flat_templates[None, :, :]) ** 2).sum(axis=2)
    logits = -sq_dist / (2 * _NOISE_STD**2)
    log_posterior = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    return images.astype(np.float32), classes, log_posterior


def image_classification(*, num_classes: int, image_size: int, num_samples: int, seed: int) -> Dataset:
    """Classify noisy templates; floor = Bayes cross-entropy on the samples."""
    rng = np.random.default_rng(seed)
    images, classes, log_post = noisy_templates(num_classes=num_classes, image_size=image_size,
                                                num_samples=num_samples, rng=rng)
    return Dataset(
        task="image_classification",
        tensors={"pixel_values": torch.from_numpy(images), "labels": torch.from_numpy(classes)},
        targets=torch.ones(num_samples, dtype=torch.long),
        loss_floor=float(-log_post[np.arange(num_samples), classes].mean()),
        floor_note="Bayes loss: exact class posterior under the known templates and Gaussian noise",
        info={"num_classes": num_classes, "image_size": image_size},
    )


def image_captioning(*, num_classes: int, image_size: int, caption_len: int, num_states: int, num_samples: int,
                     seed: int) -> Dataset:
    """Caption a noisy template: the first caption token names the class, the rest is Markov text.

    The decoder must read the image to get the first token right and model the chain for the
    rest. Floor = (Bayes class loss + Σ -log P(s_t | s_{t-1})) / caption_len on the samples.
    """
    if num_classes > num_states:
        raise ValueError("image_captioning needs num_states >= num_classes (one start state per class)")
    rng = np.random.default_rng(seed)
    images, classes, log_post = noisy_templates(num_classes=num_classes, image_size=image_size,
                                                num_samples=num_samples, rng=rng)
    chain = make_chain(num_states, rng)
    start_states = rng.permutation(num_states)[:num_classes]
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
        info={"num_classes": num_classes, "image_size": image_size, "caption_len": caption_len,
              "num_states": num_states},
    )
