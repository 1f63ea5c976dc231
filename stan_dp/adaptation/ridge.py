"""The ridges a released, unit-diagonal curvature matrix shows: entries beyond their noise.

:func:`~stan_dp.adaptation.newton._oriented_frame` releases the rows'
curvature in the initial diagonal frame and scales it to unit diagonal
(``R``).  A ridge of the posterior (an intercept and a slope on a predictor
far from 0) is an off-diagonal entry of ``R`` near ``+-1``; uncorrelated
coordinates have entries near 0.  The release's noise is the same on every
entry, so its *spectral* norm grows like ``sd sqrt(2 d)`` and at small
budgets swamps ``R`` (``d = 11``, ``n = 1e3``, ``epsilon = 4``: 1.3-2.4)
while each single entry is still resolved (sd ~0.11 against a ridge's 0.98).
Keeping only the entries beyond a Bonferroni threshold (hard thresholding, as
for sparse covariance matrices) leaves the noise of the kept entries only:
``~ sd sqrt(k)`` for ``k`` kept entries in a row.

Pure post-processing of a released matrix.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats
from scipy.sparse.csgraph import connected_components

__all__ = ["FAMILYWISE", "Ridges", "entry_threshold", "thresholded_ridges"]

FAMILYWISE = 0.05
"""Probability that noise alone keeps some off-diagonal entry of ``R`` (whose true value is 0)."""


def entry_threshold(dim: int) -> float:
    """Noise sds beyond which an off-diagonal entry of a ``dim x dim`` ``R`` is kept.

    Two-sided Bonferroni over the ``dim (dim - 1) / 2`` pairs at
    :data:`FAMILYWISE`: ``Phi^-1(1 - FAMILYWISE / (2 pairs))`` (3.32 at
    ``dim = 11``, 2.94 at 6).
    """
    pairs = max(dim * (dim - 1) // 2, 1)
    return float(stats.norm.isf(FAMILYWISE / (2.0 * pairs)))


class Ridges(NamedTuple):
    """:func:`thresholded_ridges`' result (coordinates of ``R``)."""

    matrix: np.ndarray
    """``R`` with the off-diagonal entries within the threshold set to 0, and the diagonal of every
    coordinate in no kept entry set to 1 (a diagonal floored against its noise before the scaling
    says nothing about a ridge on its own)."""
    eigenvalues: np.ndarray
    """Eigenvalues of ``matrix``, one per column of ``directions``."""
    directions: np.ndarray
    """Orthonormal eigenvectors of ``matrix``: within each connected group of kept entries its
    block's eigenvectors, the axes elsewhere (never an arbitrary basis of a repeated eigenvalue)."""
    noise_norm: float
    """Scale of the kept entries' noise in spectral norm, ``s sqrt(2 k)`` (``s`` the largest kept
    entry's noise sd, ``k`` the most entries kept in a row, diagonal included); 0 when none is kept."""
    in_ridge: np.ndarray
    """Whether each coordinate is in some kept entry (its direction may be turned)."""


def thresholded_ridges(r: np.ndarray, entry_sd: np.ndarray) -> Ridges:
    """Hard-threshold the off-diagonal entries of ``r`` at :func:`entry_threshold` sds.

    Parameters
    ----------
    r : ndarray, shape (d, d)
        Released symmetric matrix scaled to unit diagonal.
    entry_sd : ndarray, shape (d, d)
        Noise sd of each entry of ``r``.

    Returns
    -------
    Ridges
    """
    r = 0.5 * (np.asarray(r, dtype=float) + np.asarray(r, dtype=float).T)
    d = r.shape[0]
    off = ~np.eye(d, dtype=bool)
    keep = off & (np.abs(r) > entry_threshold(d) * np.asarray(entry_sd, dtype=float))
    in_block = keep.any(axis=1)
    # a coordinate in a kept entry keeps its diagonal (below 1 where the release's diagonal was
    # floored against its noise); one in none gets 1: alone it shows no ridge
    matrix = np.where(keep | np.diag(in_block), r, np.eye(d))
    eigenvalues = np.ones(d)
    directions = np.eye(d)
    _, labels = connected_components(keep, directed=False)
    for label in np.unique(labels):
        idx = np.flatnonzero(labels == label)
        if idx.size > 1:
            lam, w = np.linalg.eigh(matrix[np.ix_(idx, idx)])
            eigenvalues[idx] = lam
            directions[np.ix_(idx, idx)] = w
    noise_norm = 0.0
    if keep.any():
        k = int(np.max(keep.sum(axis=1))) + 1
        noise_norm = float(np.max(np.where(keep, entry_sd, 0.0))) * math.sqrt(2.0 * k)
    return Ridges(matrix, eigenvalues, directions, noise_norm, in_block)
