"""The CIFAR-100 stand-in's classes: two-colour objects of a shape, rendered at every pose and position over a
Gaussian background, with the exact likelihood of every class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gradeff.axes.data.spectral_fields import CHANNELS, apply_filters, frequency_grids, sample_fields

__all__ = ["OUTLINES", "ObjectClasses", "ObjectParts", "object_classes", "object_parts"]


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
        return objects + sample_fields(self.background, n, rng)

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
        whitened = np.fft.irfft2(apply_filters(inverse[:, :half], np.fft.rfft2(images, norm="ortho")),
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
    fy, fx = frequency_grids(image_size)
    radius = np.hypot(fy, fx) + 2.0 / image_size
    power = 1.0 / radius**2
    power *= clutter**2 * image_size**2 / power.sum()
    shading = 1.0 / radius
    shading *= shade**2 * image_size**2 / shading.sum() / CHANNELS
    mixing = rng.standard_normal((CHANNELS, CHANNELS)) * 0.3 + np.eye(CHANNELS)
    colour = mixing @ mixing.T / np.trace(mixing @ mixing.T) * CHANNELS
    spectra = (power[..., None, None] * colour + shading[..., None, None] * np.ones((CHANNELS, CHANNELS))
               + noise**2 * np.eye(CHANNELS))
    spectra[0, 0] += colour_cast**2 * image_size**2 * np.eye(CHANNELS)
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
OUTLINES = np.array([(0, 0.0, 0), (0, 0.0, 1), *((order, amplitude, 0) for order in range(2, 7)
                                                  for amplitude in (0.18, 0.36))])
# Scheme colours are corners of the colour cube: every two differ by a full step in some channel.
_PALETTE = np.array(np.meshgrid(*([(-0.9, 0.9)] * CHANNELS), indexing="ij")).reshape(CHANNELS, -1).T


def object_parts(rng: np.random.Generator, schemes: int = 12) -> ObjectParts:
    """The twelve outlines and ``schemes`` two-colour schemes (distinct ordered pairs of palette colours)."""
    pairs = np.array([(a, b) for a in range(len(_PALETTE)) for b in range(len(_PALETTE)) if a != b])
    chosen = pairs[rng.choice(len(pairs), schemes, replace=False)]
    return ObjectParts(outlines=OUTLINES, colours=_PALETTE[chosen], split_angles=rng.uniform(0, 2 * np.pi, schemes))


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
    templates = np.zeros((len(combinations), len(poses), CHANNELS, size, size))
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
