"""Image tasks with exact loss floors: bags of motifs (the main study's classification and captioning) and noisy
class templates (the PEFT stand-ins and the backbones' pretraining).

**Bags of motifs** (:class:`Motifs`; the ``image_classification`` and ``image_captioning`` tasks, the captions
words of the image's class's own topic: :func:`image_captioning`). An image is a
4 × 4 arrangement of blocks, each showing one of 16 motifs (a random 2 × 2 pattern of colours, amplitude 1 against
pixel noise σ = 1) drawn independently from its class's own mixture of motifs (a Dirichlet(0.5) draw: a few
motifs dominate each class). Why: a class is *which* motifs an image shows, not where — position is a nuisance —,
so a patch model reads it by averaging what its patches show, which a ViT's attention does from its first step;
a tiny ViT closes most of the gap to the floor in its 72 tiny steps and generalises (training and test losses
agree). Noisy templates, the task this replaced, put the class in a fixed layout at a per-pixel signal-to-noise of
0.07: the tiny ViT memorised 64 of them (test loss at chance) and with 1,024 closed 4 % of the gap. Every split
holds the classes in equal shares. The Bayes posterior is exact: blocks are independent given the class, so
log p(x | c) = Σ_blocks log Σ_m P(m | c) N(block; motif m, σ²I) — with 16 blocks an image a few images stay
ambiguous (Bayes accuracy ≈ 98 % at tiny, a floor above 0).

**Noisy templates** (:func:`image_classification`): a smooth class template plus Gaussian noise. With equal priors
and isotropic noise the Bayes posterior is a softmax of -‖x - μ_c‖² / 2σ², so the best achievable loss (and the
Bayes classifier's accuracy) is computed exactly on the very samples drawn.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch

from gradeff.axes.data.dataset import IGNORE_INDEX, SPECIAL_TOKENS, Dataset
from gradeff.axes.data.text import FIRST_STATE_TOKEN, Topics

__all__ = ["Motifs", "captioning_world", "image_captioning", "image_classification", "make_templates",
           "motif_classification", "noisy_templates", "sample_images"]

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


def _attach(train: Dataset, heldout: Dataset | None, validation: Dataset | None) -> Dataset:
    if heldout is not None:
        train = train.with_heldout(heldout)
    return train.with_validation(validation) if validation is not None else train


def image_classification(*, num_classes: int, image_size: int, num_samples: int, seed: int,
                         heldout_samples: int = 0, validation_samples: int = 0,
                         template_grid: int | tuple[int, ...] = _TEMPLATE_GRID, salt: str | None = None,
                         snr: float = 4.0, task: str = "image_classification") -> Dataset:
    """Classify noisy templates; floor = Bayes cross-entropy on the samples.

    Args:
        heldout_samples: size of the test split, drawn from the same classes after the training
            samples (so adding it leaves the training samples unchanged); it is never trained on.
        validation_samples: size of the validation split, drawn after the test split (adding it leaves both
            unchanged); never trained on, read by tuning.
        template_grid: blocks per side of the templates (4: coarse shapes; 8: texture-like), or
            several, splitting the classes between them.
        salt: a name mixed into the seed, so that two datasets built with the same seed have
            different classes (``None``: the seed alone).
        snr: how far apart the classes are (see :func:`make_templates`).
        task: the task key recorded on the dataset.

    Returns:
        The training split; its ``heldout`` holds the test split and its ``validation`` the validation split
        when they were asked for.
    """
    rng = np.random.default_rng(seed if salt is None else [seed, zlib.crc32(salt.encode())])
    templates = make_templates(num_classes=num_classes, image_size=image_size, rng=rng, grid=template_grid, snr=snr)
    info = {"num_classes": num_classes, "image_size": image_size, "template_grid": template_grid}
    train, heldout, validation = (
        _classification_split(task, *sample_images(templates, count, rng), info) if count else None
        for count in (num_samples, heldout_samples, validation_samples))
    return _attach(train, heldout, validation)


@dataclass(frozen=True, slots=True)
class Motifs:
    """Images as bags of motifs: what a patch model reads without having to learn positions.

    An image is a ``grid × grid`` arrangement of blocks; each block shows one of ``M`` motifs (a random pattern
    of 2 × 2 colour patches), drawn independently of the other blocks from its class's own mixture of motifs,
    plus Gaussian pixel noise. Where a motif sits carries nothing: the class is in *which* motifs an image
    shows and how often, so averaging what each patch shows (what a ViT's attention does from its first step)
    and a linear read-out of that average are enough, and a tiny model learns it in tens of steps.

    Attributes:
        patterns: ``(M, 3, B, B)`` motif images (B = block side in pixels).
        mixtures: ``(K, M)`` P(motif | class), rows of a Dirichlet draw.
    """

    patterns: np.ndarray
    mixtures: np.ndarray

    @classmethod
    def draw(cls, *, num_classes: int, num_motifs: int, block: int, rng: np.random.Generator, amplitude: float,
             concentration: float) -> Motifs:
        if block % 2:
            raise ValueError(f"a motif block needs an even side, got {block}")
        coarse = amplitude * rng.standard_normal((num_motifs, 3, 2, 2))
        patterns = coarse.repeat(block // 2, axis=2).repeat(block // 2, axis=3)
        mixtures = np.maximum(rng.dirichlet(np.full(num_motifs, concentration), size=num_classes), 1e-12)
        return cls(patterns, mixtures / mixtures.sum(axis=1, keepdims=True))

    def sample(self, num_samples: int, grid: int, rng: np.random.Generator):
        """Images of classes in equal shares (every split holds every class), and the exact class log-posteriors.

        Returns:
            ``(images (N,3,S,S) float32, classes (N,), log_posterior (N,K))``, S = grid × block.
        """
        num_classes, num_motifs = self.mixtures.shape
        block = self.patterns.shape[-1]
        classes = rng.permutation(np.arange(num_samples) % num_classes)
        cumulative = np.cumsum(self.mixtures, axis=1)[classes]  # (N, M)
        u = rng.random((num_samples, grid * grid))
        motif = np.minimum((u[:, :, None] > cumulative[:, None, :]).sum(axis=2), num_motifs - 1)  # (N, P)
        blocks = self.patterns[motif] + _NOISE_STD * rng.standard_normal((num_samples, grid * grid, 3, block, block))
        images = (blocks.reshape(num_samples, grid, grid, 3, block, block)
                  .transpose(0, 3, 1, 4, 2, 5).reshape(num_samples, 3, grid * block, grid * block))
        return images.astype(np.float32), classes, self.log_posterior(blocks)

    def log_posterior(self, blocks: np.ndarray) -> np.ndarray:
        """log P(class | image) from its blocks ``(N, P, 3, B, B)``, exact under the generating law.

        Blocks are independent given the class: log p(x | c) = Σ_blocks log Σ_m P(m | c) N(block; motif m, σ²I),
        the Gaussian's constant shared by every motif and class; the classes are equally likely.
        """
        n, p = blocks.shape[:2]
        flat_blocks = blocks.reshape(n * p, -1)
        flat_patterns = self.patterns.reshape(len(self.patterns), -1)
        sq_dist = ((flat_blocks**2).sum(axis=1)[:, None] - 2 * flat_blocks @ flat_patterns.T
                   + (flat_patterns**2).sum(axis=1)[None, :])  # (N·P, M)
        log_motif = (-sq_dist / (2 * _NOISE_STD**2)).reshape(n, p, 1, -1)
        per_block = np.logaddexp.reduce(log_motif + np.log(self.mixtures)[None, None], axis=3)  # (N, P, K)
        logits = per_block.sum(axis=1)
        return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def motif_classification(*, num_classes: int, image_size: int, num_samples: int, seed: int, heldout_samples: int = 0,
                         validation_samples: int = 0, grid: int = _TEMPLATE_GRID, num_motifs: int = 32,
                         amplitude: float = 1.0, concentration: float = 0.3,
                         task: str = "image_classification") -> Dataset:
    """Classify bags of motifs (see :class:`Motifs`); floor = the exact Bayes cross-entropy on the samples.

    Args:
        heldout_samples / validation_samples: sizes of the test and validation splits, drawn after the training
            samples and after each other (asking for one leaves the earlier ones unchanged).
        grid: blocks per side; a block is one motif (at 32 px and grid 4, one 8-pixel patch of the tiny ViT).
        num_motifs / amplitude / concentration: how many motifs, their pixel amplitude against the pixel noise
            (σ = 1) and how concentrated each class's mixture is (smaller: fewer motifs per class, easier).
    """
    if image_size % grid:
        raise ValueError(f"image_size must be a multiple of the grid {grid}, got {image_size}")
    rng = np.random.default_rng(seed)
    motifs = Motifs.draw(num_classes=num_classes, num_motifs=num_motifs, block=image_size // grid, rng=rng,
                         amplitude=amplitude, concentration=concentration)
    info = {"num_classes": num_classes, "image_size": image_size, "grid": grid, "num_motifs": num_motifs}
    train, heldout, validation = (_classification_split(task, *motifs.sample(count, grid, rng), info) if count else None
                                  for count in (num_samples, heldout_samples, validation_samples))
    return _attach(train, heldout, validation)


def image_captioning(*, num_classes: int, image_size: int, caption_len: int, num_states: int, num_samples: int,
                     seed: int, heldout_samples: int = 0, validation_samples: int = 0, grid: int = _TEMPLATE_GRID,
                     num_motifs: int = 32, amplitude: float = 1.0, concentration: float = 0.3,
                     caption_concentration: float = 0.05) -> Dataset:
    """Caption a bag of motifs with words of its class's own topic.

    Every class has a topic, a distribution over the caption states (a Dirichlet(``caption_concentration``) draw:
    a handful of likely words, some shared with other topics); a caption's words are drawn independently from its
    image's class's topic. The image names the topic at once; the words so far name it too, less surely at first.
    So a decoder that reads the image predicts the first words better than one that reads only the caption, and
    one that reads the caption so far predicts later words better than a count of what follows what. Why not the
    caption this replaced (a first token naming the class, then Markov text): there an image-blind bigram count of
    the training captions was within 0.4 nats of the floor (3.17 against 2.76 at tiny), the Markov text being the
    bigram's own form and the image deciding one token in 16, and the tiny VLM (3.54 after its 72 steps) did not
    reach it. At tiny, captions of 8 words, not 16: the image then decides more of each caption (the floor with the
    image 2.39, without it 2.67, where 16 words put them at 2.38 and 2.53), the decoder's sequences are shorter, and
    the VLM's 2.57 is below what any image-blind predictor can reach.

    Floor = mean over the caption's words of −log P(word | image, words before): the topics mixed by their
    posterior given the image (the exact motif posterior of its class) and the words before.

    Args:
        heldout_samples: image-caption pairs of the test split, drawn after the training ones.
        validation_samples: pairs of the validation split, drawn after the test split.
        grid / num_motifs / amplitude / concentration: the images, as in :func:`motif_classification`.
        caption_concentration: how peaked each class's topic is (smaller: fewer likely words per class).
    """
    motifs, topics, rng = captioning_world(num_classes=num_classes, image_size=image_size, num_states=num_states,
                                           seed=seed, grid=grid, num_motifs=num_motifs, amplitude=amplitude,
                                           concentration=concentration, caption_concentration=caption_concentration)
    info = {"num_classes": num_classes, "image_size": image_size, "caption_len": caption_len, "num_states": num_states}
    train, *splits = (_captioning_split(*motifs.sample(count, grid, rng), topics, caption_len, rng, info)
                      if count else None for count in (num_samples, heldout_samples, validation_samples))
    return _attach(train, *splits)


def captioning_world(*, num_classes: int, image_size: int, num_states: int, seed: int, grid: int = _TEMPLATE_GRID,
                     num_motifs: int = 32, amplitude: float = 1.0, concentration: float = 0.3,
                     caption_concentration: float = 0.05):
    """What :func:`image_captioning` draws before its samples: the classes' motifs and topics, and the generator
    its splits are then drawn from (same arguments, same world)."""
    if num_classes > num_states:
        raise ValueError("image_captioning needs num_states >= num_classes")
    rng = np.random.default_rng(seed)
    motifs = Motifs.draw(num_classes=num_classes, num_motifs=num_motifs, block=image_size // grid, rng=rng,
                         amplitude=amplitude, concentration=concentration)
    topics = Topics(np.maximum(rng.dirichlet(np.full(num_states, caption_concentration), size=num_classes), 1e-12))
    return motifs, topics, rng


def _captioning_split(images, classes, log_post, topics, caption_len: int, rng: np.random.Generator,
                      info: dict) -> Dataset:
    num_samples = len(classes)
    states = topics.sample_of(classes, rng, caption_len)
    caption = states + FIRST_STATE_TOKEN
    bos = np.full((num_samples, 1), SPECIAL_TOKENS["bos"])
    # Inputs are [BOS, s1..sL]; the decoder shifts labels, so BOS's position predicts s1.
    input_ids = np.concatenate([bos, caption], axis=1)
    labels = np.concatenate([np.full((num_samples, 1), IGNORE_INDEX), caption], axis=1)
    bayes = -np.log(topics.predictive(states, log_prior=log_post))
    return Dataset(
        task="image_captioning",
        tensors={"pixel_values": torch.from_numpy(images), "input_ids": torch.from_numpy(input_ids),
                 "labels": torch.from_numpy(labels)},
        targets=torch.full((num_samples,), caption_len),
        loss_floor=float(bayes.mean()),
        floor_note="Bayes loss: each word from the class topics mixed by their posterior given the image (its exact "
                   "motif posterior) and the words before",
        info=info,
    )
