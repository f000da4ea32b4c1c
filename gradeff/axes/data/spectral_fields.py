"""Stationary Gaussian random fields of three channels in the Fourier basis: the frequency grids, drawing fields of
given spectral matrices, and the periodograms their likelihoods are read from.

With the orthonormal Fourier transform a stationary field's covariance is block-circulant, one 3 × 3 spectral
matrix per frequency: sampling is a filter per frequency, a likelihood a sum over frequencies. Both stand-in
families (:mod:`gradeff.axes.data.standin_objects`' backgrounds, :mod:`gradeff.axes.data.standin_textures`'
textures) are drawn and scored here.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CHANNELS", "apply_filters", "even", "frequency_grids", "periodograms", "sample_fields", "upper_entries"]

CHANNELS = 3


def frequency_grids(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Frequency grids ``(fy, fx)`` in cycles per pixel, ``(S, S)`` each, in ``np.fft.fft2``'s order."""
    f = np.fft.fftfreq(size)
    return np.meshgrid(f, f, indexing="ij")


def even(power: np.ndarray) -> np.ndarray:
    """``(power(f) + power(-f)) / 2`` over the first two axes: a spectrum of real fields must be even, and the
    Nyquist row and column of an even-sized grid have no mirrored partner in a formula of ``(fy, fx)``."""
    mirrored = np.roll(power[::-1, ::-1], 1, axis=(0, 1))
    return (power + mirrored) / 2


def apply_filters(filters: np.ndarray, spectra: np.ndarray) -> np.ndarray:
    """``H(f) X_f`` per frequency: filters ``(Y, X, 3, 3)`` applied to spectra ``(N, 3, Y, X)`` → ``(N, 3, Y, X)``.

    One batched matrix product over the frequencies (a 3 × 3 by 3 × N product per frequency), several times
    faster than the equivalent ``einsum`` (which numpy runs without BLAS here)."""
    return (filters.astype(spectra.dtype) @ spectra.transpose(2, 3, 1, 0)).transpose(3, 2, 0, 1)


def sample_fields(spectra: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` real Gaussian fields of spectral matrices ``spectra`` ``(S, S, 3, 3)`` → ``(count, 3, S, S)``.

    With the orthonormal Fourier transform, white noise has identity spectra; a real, even filter
    ``H(f) = chol(spectra(f))`` gives fields whose covariance has exactly these spectra, and stay real. The
    fields being real, only the non-negative horizontal frequencies are computed (``rfft2``): half the work, the
    same fields to rounding.
    """
    size = spectra.shape[0]
    filters = np.linalg.cholesky(spectra[:, : size // 2 + 1])
    white = np.fft.rfft2(rng.standard_normal((count, CHANNELS, size, size)), norm="ortho")
    return np.fft.irfft2(apply_filters(filters, white), s=(size, size), norm="ortho")


def periodograms(images: np.ndarray) -> np.ndarray:
    """``Re(X_f X_fᴴ)`` per frequency, the 6 distinct entries of the symmetric 3×3 (off-diagonals doubled).

    ``(N, S·S·6)``: the quadratic form ``Σ_f X_fᴴ A(f) X_f`` of a real symmetric ``A`` is then a dot product.
    """
    spectrum = np.fft.fft2(images, norm="ortho")
    rows, cols = np.triu_indices(CHANNELS)
    products = (spectrum[:, rows] * spectrum[:, cols].conj()).real
    products[:, rows != cols] *= 2
    return products.reshape(len(images), -1)


def upper_entries(matrices: np.ndarray) -> np.ndarray:
    """The 6 distinct entries of symmetric ``(..., S, S, 3, 3)`` in :func:`periodograms`' layout: ``(..., 6·S·S)``."""
    rows, cols = np.triu_indices(CHANNELS)
    entries = matrices[..., rows, cols]  # (..., S, S, 6)
    return np.moveaxis(entries, -1, -3).reshape(*matrices.shape[:-4], -1)
