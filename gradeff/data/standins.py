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
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from gradeff.data.dataset import Dataset
from gradeff.data.sanity import PIXEL_BASELINE, pixel_nearest_neighbour_accuracy

__all__ = [
    "Mixture", "ObjectClasses", "ObjectParts", "TextureClasses", "TextureParts", "object_classes", "object_parts",
    "objects", "source_task", "stratified_classes", "texture_classes", "texture_parts", "textures",
]

_CHANNELS = 3


def stratified_classes(num_classes: int, num_samples: int, rng: np.random.Generator) -> np.ndarray:
    """``num_samples`` labels, each class ⌊n/K⌋ or ⌈n/K⌉ times (the extra ones to random classes), shuffled."""
    base, extra = divmod(num_samples, num_classes)
    counts = np.full(num_classes, base)
    counts[rng.choice(num_classes, extra, replace=False)] += 1
    return rng.permutation(np.repeat(np.arange(num_classes), counts))


def _frequencies(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Frequency grids ``(fy, fx)`` in cycles per pixel, ``(S, S)`` each, in ``np.fft.fft2``'s order."""
    f = np.fft.fftfreq(size)
    return np.meshgrid(f, f, indexing="ij")


def _even(power: np.ndarray) -> np.ndarray:
    """``(power(f) + power(-f)) / 2`` over the first two axes: a spectrum of real fields must be even, and the
    Nyquist row and column of an even-sized grid have no mirrored partner in a formula of ``(fy, fx)``."""
    mirrored = np.roll(power[::-1, ::-1], 1, axis=(0, 1))
    return (power + mirrored) / 2


def _filter(filters: np.ndarray, spectra: np.ndarray) -> np.ndarray:
    """``H(f) X_f`` per frequency: filters ``(Y, X, 3, 3)`` applied to spectra ``(N, 3, Y, X)`` → ``(N, 3, Y, X)``.

    One batched matrix product over the frequencies (a 3 × 3 by 3 × N product per frequency), several times
    faster than the equivalent ``einsum`` (which numpy runs without BLAS here)."""
    return (filters.astype(spectra.dtype) @ spectra.transpose(2, 3, 1, 0)).transpose(3, 2, 0, 1)


def _sample_fields(spectra: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` real Gaussian fields of spectral matrices ``spectra`` ``(S, S, 3, 3)`` → ``(count, 3, S, S)``.

    With the orthonormal Fourier transform, white noise has identity spectra; a real, even filter
    ``H(f) = chol(spectra(f))`` gives fields whose covariance has exactly these spectra, and stay real. The
    fields being real, only the non-negative horizontal frequencies are computed (``rfft2``): half the work, the
    same fields to rounding.
    """
    size = spectra.shape[0]
    filters = np.linalg.cholesky(spectra[:, : size // 2 + 1])
    white = np.fft.rfft2(rng.standard_normal((count, _CHANNELS, size, size)), norm="ortho")
    return np.fft.irfft2(_filter(filters, white), s=(size, size), norm="ortho")


def _periodograms(images: np.ndarray) -> np.ndarray:
    """``Re(X_f X_fᴴ)`` per frequency, the 6 distinct entries of the symmetric 3×3 (off-diagonals doubled).

    ``(N, S·S·6)``: the quadratic form ``Σ_f X_fᴴ A(f) X_f`` of a real symmetric ``A`` is then a dot product.
    """
    spectrum = np.fft.fft2(images, norm="ortho")
    rows, cols = np.triu_indices(_CHANNELS)
    products = (spectrum[:, rows] * spectrum[:, cols].conj()).real
    products[:, rows != cols] *= 2
    return products.reshape(len(images), -1)


def _upper(matrices: np.ndarray) -> np.ndarray:
    """The 6 distinct entries of symmetric ``(..., S, S, 3, 3)`` in :func:`_periodograms`' layout: ``(..., 6·S·S)``."""
    rows, cols = np.triu_indices(_CHANNELS)
    entries = matrices[..., rows, cols]  # (..., S, S, 6)
    return np.moveaxis(entries, -1, -3).reshape(*matrices.shape[:-4], -1)


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


# --- Textures --------------------------------------------------------------------------------------

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
        quadratic = _periodograms(images) @ _upper(inverse).reshape(num_classes * num_nuisances, -1).T
        loglik = -0.5 * (quadratic + logdet.reshape(num_classes * num_nuisances, -1).sum(axis=1))
        per_class = np.logaddexp.reduce(loglik.reshape(len(images), num_classes, num_nuisances), axis=2)
        return per_class - np.log(num_nuisances)

    def sample(self, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One image per label, each at a uniformly drawn nuisance value: ``(N, 3, S, S)``."""
        nuisance = rng.integers(0, self.spectra.shape[1], len(classes))
        images = np.empty((len(classes), _CHANNELS, *self.spectra.shape[2:4]))
        for key in np.unique(classes * self.spectra.shape[1] + nuisance):
            c, v = divmod(int(key), self.spectra.shape[1])
            where = np.flatnonzero((classes == c) & (nuisance == v))
            images[where] = _sample_fields(self.spectra[c, v], len(where), rng)
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
    colours = rng.standard_normal((mixes, 2, _CHANNELS))
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
    fy, fx = _frequencies(image_size)
    radius, angle = np.hypot(fy, fx), np.arctan2(fy, fx)
    angles = np.linspace(-max_rotation, max_rotation, rotations) if rotations > 1 else np.zeros(1)
    nuisances = np.array([(a, s) for a in angles for s in scales])
    spectra = np.zeros((len(combinations), len(nuisances), image_size, image_size, _CHANNELS, _CHANNELS))
    for c, (pattern, mix) in enumerate(combinations):
        for v, (rotation, scale) in enumerate(nuisances):
            for (centre, width, orientation, concentration, weight), colour in zip(
                    parts.lobes[pattern], parts.colours[mix], strict=True):
                if weight == 0:
                    continue
                radial = np.exp(-0.5 * ((radius / scale - centre) / width) ** 2)
                angular = np.exp(concentration * (np.cos(2 * (angle - orientation - rotation)) - 1))
                power = _even(radial * angular)
                power *= weight * image_size**2 / power.sum()  # unit variance per pixel, whatever the band
                spectra[c, v] += power[..., None, None] * np.outer(colour, colour)
    spectra += noise**2 * np.eye(_CHANNELS)
    spectra[:, :, 0, 0] += colour_cast**2 * image_size**2 * np.eye(_CHANNELS)
    return TextureClasses(spectra=spectra, nuisances=nuisances)


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


# --- Objects ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ObjectClasses:
    """Every class's object, rendered at every rotation and scale, and the background it is seen on.

    Attributes:
        templates: ``(K, V, 3, S, S)``: class × (rotation, scale) → the object, centred.
        offsets: ``(T, 2)``: the translations ``(dy, dx)`` an object is seen at (circular shifts of the
            centred object, which never reach the image's edge).
        background: ``(S, S, 3, 3)``: spectral matrices of the Gaussian background (clutter, colour cast,
            pixel noise).
    """

    templates: np.ndarray
    offsets: np.ndarray
    background: np.ndarray

    def __len__(self) -> int:
        return self.templates.shape[0]

    def sample(self, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One image per label at a uniformly drawn rotation, scale and position: ``(N, 3, S, S)``."""
        n = len(classes)
        pose = rng.integers(0, self.templates.shape[1], n)
        offsets = self.offsets[rng.integers(0, len(self.offsets), n)]
        objects = self.templates[classes, pose]
        for i in range(n):
            objects[i] = np.roll(objects[i], tuple(offsets[i]), axis=(-2, -1))
        return objects + _sample_fields(self.background, n, rng)

    def log_likelihood(self, images: np.ndarray, chunk: int = 64) -> np.ndarray:
        """``log p(x | class)`` ``(N, K)``, averaged over rotation, scale and position (less ``D/2 log 2π``).

        ``log N(x; T_t μ_cv, Σ) = −½ x'Σ⁻¹x + <Σ⁻¹x, T_t μ_cv> − ½ μ_cv'Σ⁻¹μ_cv − ½ log|Σ|``. ``Σ⁻¹x`` is exact
        in the Fourier basis (``Σ`` is block-circulant); the cross terms of every translation, class and pose
        are one matrix product of the translated ``Σ⁻¹x`` with the templates, in single precision (the
        posterior is needed to a few digits, not to the last bit).
        """
        num_classes, num_poses = self.templates.shape[:2]
        inverse = np.linalg.inv(self.background)
        template_f = np.fft.fft2(self.templates, norm="ortho")  # (K, V, 3, S, S)
        energy = np.einsum("kviyx,yxij,kvjyx->kv", template_f.conj(), inverse, template_f).real
        half = images.shape[-1] // 2 + 1
        whitened = np.fft.irfft2(_filter(inverse[:, :half], np.fft.rfft2(images, norm="ortho")),
                                 s=images.shape[-2:], norm="ortho")
        common = -0.5 * (whitened * images).sum(axis=(1, 2, 3)) - 0.5 * np.linalg.slogdet(self.background)[1].sum()
        templates = torch.from_numpy(self.templates.reshape(num_classes * num_poses, -1).T.astype(np.float32))
        offset = torch.from_numpy(-0.5 * energy.reshape(-1)).float()
        # <Σ⁻¹x, roll(μ, t)> = <roll(Σ⁻¹x, -t), μ>: pixel i of roll(y, -t) is pixel gather[t, i] of y.
        pixels = np.arange(self.templates[0, 0].size).reshape(self.templates.shape[2:])
        gather = torch.from_numpy(np.stack([np.roll(pixels, tuple(-t), axis=(-2, -1)).reshape(-1)
                                            for t in self.offsets]))
        result = torch.empty(len(images), num_classes, dtype=torch.float64)
        for start in range(0, len(images), chunk):
            block = torch.from_numpy(whitened[start:start + chunk].reshape(-1, gather.shape[1]).astype(np.float32))
            # Every translation of the block against every template: one matrix product.
            cross = (block[:, gather] @ templates + offset).reshape(len(block), len(gather), num_classes, num_poses)
            result[start:start + chunk] = torch.logsumexp(cross.double().transpose(1, 2).flatten(2), dim=2)
        return result.numpy() + common[:, None] - np.log(num_poses * len(gather))


def _background(image_size: int, rng: np.random.Generator, *, clutter: float, shade: float, noise: float,
                colour_cast: float) -> np.ndarray:
    """Spectral matrices of the background: coloured clutter (1/f² power), achromatic shading (1/f power, the
    same in every channel), a colour cast and pixel noise."""
    fy, fx = _frequencies(image_size)
    radius = np.hypot(fy, fx) + 2.0 / image_size
    power = 1.0 / radius**2
    power *= clutter**2 * image_size**2 / power.sum()
    shading = 1.0 / radius
    shading *= shade**2 * image_size**2 / shading.sum() / _CHANNELS
    mixing = rng.standard_normal((_CHANNELS, _CHANNELS)) * 0.3 + np.eye(_CHANNELS)
    colour = mixing @ mixing.T / np.trace(mixing @ mixing.T) * _CHANNELS
    spectra = (power[..., None, None] * colour + shading[..., None, None] * np.ones((_CHANNELS, _CHANNELS))
               + noise**2 * np.eye(_CHANNELS))
    spectra[0, 0] += colour_cast**2 * image_size**2 * np.eye(_CHANNELS)
    return spectra


@dataclass(frozen=True, slots=True)
class ObjectParts:
    """The vocabulary object classes are composed from: shapes and two-colour schemes.

    Attributes:
        outlines: ``(S, 3)``: a shape's outline: the radius is ``1 + amplitude · cos(order · angle)`` times the
            object's size, and a ``hollow`` shape (1) is a ring of that outline.
        colours: ``(P, 2, 3)``: a scheme's two colours; split_angles ``(P,)``: the line that divides them.
    """

    outlines: np.ndarray
    colours: np.ndarray
    split_angles: np.ndarray


# Twelve outlines a small network tells apart under rotation and scale: a disc, a ring, and 2- to 6-fold
# shapes (ellipses, trefoils, rounded squares, stars) each at a mild and a strong amplitude.
_OUTLINES = np.array([(0, 0.0, 0), (0, 0.0, 1), *((order, amplitude, 0) for order in range(2, 7)
                                                  for amplitude in (0.18, 0.36))])
# Scheme colours are corners of the colour cube: every two differ by a full step in some channel.
_PALETTE = np.array(np.meshgrid(*([(-0.9, 0.9)] * _CHANNELS), indexing="ij")).reshape(_CHANNELS, -1).T


def object_parts(rng: np.random.Generator, schemes: int = 12) -> ObjectParts:
    """The twelve outlines and ``schemes`` two-colour schemes (distinct ordered pairs of palette colours)."""
    pairs = np.array([(a, b) for a in range(len(_PALETTE)) for b in range(len(_PALETTE)) if a != b])
    chosen = pairs[rng.choice(len(pairs), schemes, replace=False)]
    return ObjectParts(outlines=_OUTLINES, colours=_PALETTE[chosen], split_angles=rng.uniform(0, 2 * np.pi, schemes))


def object_classes(parts: ObjectParts, combinations: np.ndarray, image_size: int, rng: np.random.Generator, *,
                   rotations: int = 1, max_rotation: float = 0.0, scales: tuple[float, ...] = (0.85, 1.0),
                   positions: int = 4, step: int | None = None, radius: float = 0.11, contrast: float = 1.5,
                   clutter: float = 0.15, shade: float = 0.0, noise: float = 0.3,
                   colour_cast: float = 0.15) -> ObjectClasses:
    """The classes ``combinations`` ``(K, 2)`` (shape, scheme), each rendered at every rotation and scale, centred.

    An object is its shape (mean radius ``radius`` × image size) in its scheme's two colours at
    ``contrast``. It is seen at one of ``scales``, in one of ``positions`` × ``positions`` places ``step``
    pixels apart (default: the cells of a 4 × 4 grid), upright (``rotations`` angles in ``±max_rotation``
    otherwise), over a background drawn from ``rng`` (see :func:`_background`).
    """
    size = image_size
    step = size // positions if step is None else step
    # Centred between the middle pixels, so that places a whole patch apart are the same within their patches.
    coords = np.arange(size) - (size - 1) / 2
    yy, xx = np.meshgrid(coords, coords, indexing="ij")
    rho, phi = np.hypot(yy, xx), np.arctan2(yy, xx)
    angles = np.linspace(-max_rotation, max_rotation, rotations) if rotations > 1 else np.zeros(1)
    poses = [(a, s) for a in angles for s in scales]
    templates = np.zeros((len(combinations), len(poses), _CHANNELS, size, size))
    for c, (shape, scheme) in enumerate(combinations):
        order, amplitude, hollow = parts.outlines[shape]
        colours, split = parts.colours[scheme], parts.split_angles[scheme]
        for v, (rotation, scale) in enumerate(poses):
            edge = radius * size * scale * (1 + amplitude * np.cos(order * (phi - rotation)))
            inside = _step(edge - rho)  # anti-aliased edge
            if hollow:
                inside *= _step(rho - 0.55 * edge)
            side = _step(yy * np.cos(split + rotation) - xx * np.sin(split + rotation))
            paint = colours[0][:, None, None] * side + colours[1][:, None, None] * (1 - side)
            templates[c, v] = contrast * inside * paint
    background = _background(size, rng, clutter=clutter, shade=shade, noise=noise, colour_cast=colour_cast)
    places = (np.arange(positions) - (positions - 1) / 2) * step
    if np.any(places % 1):
        raise ValueError(f"{positions} places {step} pixels apart are not whole pixels from the centre")
    offsets = np.stack(np.meshgrid(places, places, indexing="ij"), axis=-1).reshape(-1, 2).astype(int)
    return ObjectClasses(templates=templates, offsets=offsets, background=background)


def _step(distance: np.ndarray) -> np.ndarray:
    """A step from 0 to 1 over about a pixel around ``distance = 0``: edges without aliasing."""
    return 1 / (1 + np.exp(-distance / 0.5))


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
_OBJECT_VOCABULARY = (len(_OUTLINES), 12)  # shapes × schemes: 144 combinations
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
