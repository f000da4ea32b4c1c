"""The DTD stand-in's classes: stationary Gaussian textures whose class is their spectrum (spectral patterns in colour
mixes), seen under rotation and scale, with the exact likelihood of every class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gradeff.axes.data.spectral_fields import (
    CHANNELS,
    even,
    frequency_grids,
    periodograms,
    sample_fields,
    upper_entries,
)

__all__ = ["TextureClasses", "TextureParts", "texture_classes", "texture_parts"]


@dataclass(frozen=True, slots=True)
class TextureClasses:
    """Every class's spectral matrices under every nuisance value.

    Attributes:
        spectra: ``(K, V, S, S, 3, 3)``: class × nuisance (rotation, scale) → spectral matrix per frequency.
        nuisances: ``(V, 2)``: each nuisance value's rotation (radians) and scale.
    """

    spectra: np.ndarray
    nuisances: np.ndarray
    # The spectra's inverses and log-determinants, computed once: every split's likelihood reads them.
    _inverse: np.ndarray = field(init=False, repr=False, compare=False)
    _logdet: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_inverse", np.linalg.inv(self.spectra))
        object.__setattr__(self, "_logdet", np.linalg.slogdet(self.spectra)[1])  # (K, V, S, S)

    def __len__(self) -> int:
        return self.spectra.shape[0]

    def log_likelihood(self, images: np.ndarray) -> np.ndarray:
        """``log p(x | class)`` ``(N, K)``, the Gaussian likelihood averaged over the nuisance values (less
        ``D/2 log 2π``)."""
        num_classes, num_nuisances = self.spectra.shape[:2]
        inverse, logdet = self._inverse, self._logdet
        quadratic = periodograms(images) @ upper_entries(inverse).reshape(num_classes * num_nuisances, -1).T
        loglik = -0.5 * (quadratic + logdet.reshape(num_classes * num_nuisances, -1).sum(axis=1))
        per_class = np.logaddexp.reduce(loglik.reshape(len(images), num_classes, num_nuisances), axis=2)
        return per_class - np.log(num_nuisances)

    def sample(self, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One image per label, each at a uniformly drawn nuisance value: ``(N, 3, S, S)``."""
        nuisance = rng.integers(0, self.spectra.shape[1], len(classes))
        images = np.empty((len(classes), CHANNELS, *self.spectra.shape[2:4]))
        for key in np.unique(classes * self.spectra.shape[1] + nuisance):
            c, v = divmod(int(key), self.spectra.shape[1])
            where = np.flatnonzero((classes == c) & (nuisance == v))
            images[where] = sample_fields(self.spectra[c, v], len(where), rng)
        return images


@dataclass(frozen=True, slots=True)
class TextureParts:
    """The vocabulary texture classes are composed from: spectral patterns and colour mixes.

    Attributes:
        lobes: ``(T, 2, 5)``: per pattern, two spectral lobes of (centre frequency, bandwidth, orientation,
            angular concentration, weight); a weight of 0 leaves a pattern with one lobe.
        colours: ``(M, 2, 3)``: per colour mix, a unit colour direction for each lobe.
    """

    lobes: np.ndarray
    colours: np.ndarray


def texture_parts(rng: np.random.Generator, patterns: int = 12, mixes: int = 12) -> TextureParts:
    """Draw ``patterns`` spectral patterns (one or two lobes, from isotropic blobs to stripes) and ``mixes``
    colour mixes."""
    lobes = np.stack([rng.uniform(0.06, 0.3, (patterns, 2)), rng.uniform(0.015, 0.045, (patterns, 2)),
                      rng.uniform(0, np.pi, (patterns, 2)), rng.choice([0.0, 2.0, 6.0], (patterns, 2)),
                      rng.uniform(0.3, 0.7, (patterns, 2))], axis=-1)
    single = rng.random(patterns) < 0.5
    lobes[single, 1, 4] = 0.0
    lobes[..., 4] /= lobes[..., 4].sum(axis=1, keepdims=True)
    colours = rng.standard_normal((mixes, 2, CHANNELS))
    return TextureParts(lobes=lobes, colours=colours / np.linalg.norm(colours, axis=-1, keepdims=True))


def texture_classes(parts: TextureParts, combinations: np.ndarray, image_size: int, *, rotations: int = 5,
                    max_rotation: float = np.pi / 6, scales: tuple[float, ...] = (0.8, 1.0, 1.25), noise: float = 0.05,
                    colour_cast: float = 0.5) -> TextureClasses:
    """The spectra of the classes ``combinations`` ``(K, 2)`` (pattern, colour mix) under every nuisance value.

    A class's spectrum is its pattern's lobes, each in its colour mix's colour direction. A sample is seen
    rotated by one of ``rotations`` angles in ``±max_rotation`` and scaled by one of ``scales``; every image
    has white pixel noise of standard deviation ``noise`` and a colour cast (a random offset per channel,
    standard deviation ``colour_cast``). The texture has unit variance per pixel.
    """
    fy, fx = frequency_grids(image_size)
    radius, angle = np.hypot(fy, fx), np.arctan2(fy, fx)
    angles = np.linspace(-max_rotation, max_rotation, rotations) if rotations > 1 else np.zeros(1)
    nuisances = np.array([(a, s) for a in angles for s in scales])
    spectra = np.zeros((len(combinations), len(nuisances), image_size, image_size, CHANNELS, CHANNELS))
    for c, (pattern, mix) in enumerate(combinations):
        for v, (rotation, scale) in enumerate(nuisances):
            for (centre, width, orientation, concentration, weight), colour in zip(
                    parts.lobes[pattern], parts.colours[mix], strict=True):
                if weight == 0:
                    continue
                radial = np.exp(-0.5 * ((radius / scale - centre) / width) ** 2)
                angular = np.exp(concentration * (np.cos(2 * (angle - orientation - rotation)) - 1))
                power = even(radial * angular)
                power *= weight * image_size**2 / power.sum()  # unit variance per pixel, whatever the band
                spectra[c, v] += power[..., None, None] * np.outer(colour, colour)
    spectra += noise**2 * np.eye(CHANNELS)
    spectra[:, :, 0, 0] += colour_cast**2 * image_size**2 * np.eye(CHANNELS)
    return TextureClasses(spectra=spectra, nuisances=nuisances)
