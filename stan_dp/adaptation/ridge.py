"""The ridges a released, unit-diagonal curvature matrix shows: entries beyond their noise.

:func:`~stan_dp.adaptation.initial_frame._oriented_frame` releases the rows'
curvature in the initial diagonal frame and scales it to unit diagonal
(``R``).  A ridge of the posterior (an intercept and a slope on a predictor
far from 0) is an off-diagonal entry of ``R`` near ``+-1``; uncorrelated
coordinates have entries near 0.  The release's noise is the same on every
entry, so its *spectral* norm grows like ``sd sqrt(2 d)`` and at small
budgets swamps ``R`` (``d = 11``, ``n = 1e3``, ``epsilon = 4``: 1.3-2.4)
while each single entry is still resolved (sd ~0.11 against a ridge's 0.98).
The entries beyond a Bonferroni threshold (as in hard thresholding of sparse
covariance matrices) pick the groups of coordinates that belong together; each
group's block of ``R`` then has the noise of a release of its own size,
``~ sd sqrt(2 m)`` for ``m`` coordinates, not of all ``d``.

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

    groups: list[np.ndarray]
    """The connected groups of kept entries (index arrays, two or more coordinates each)."""
    eigenvalues: np.ndarray
    """Per coordinate of a group: an eigenvalue of the group's block of ``R`` (unthresholded:
    within a group every entry counts, the small ones too); 1 for a coordinate in no group."""
    directions: np.ndarray
    """Orthonormal: within each group its block's eigenvectors, the axes elsewhere (never an
    arbitrary basis of a repeated eigenvalue)."""
    noise_norm: np.ndarray
    """Per coordinate of a group: the scale of its block's noise in spectral norm,
    ``s sqrt(2 m)`` (``s`` the largest entry noise sd in the block, ``m`` the group's size: a
    symmetric Gaussian block of ``m`` rows); 0 for a coordinate in no group."""


def thresholded_ridges(r: np.ndarray, entry_sd: np.ndarray) -> Ridges:
    """The groups of coordinates that some entry of ``r`` beyond its noise joins, and their blocks.

    Off-diagonal entries within :func:`entry_threshold` noise sds of 0 only
    decide which coordinates belong together (the connected groups of the kept
    entries); each group's eigenvalues and eigenvectors are those of its block
    of ``r`` as released.  Setting the small entries to 0 instead would invent
    ridges: an intercept and three uncentred predictors (entries 0.55 to the
    intercept, about 0.3 between the predictors, the latter within the
    threshold) have a smallest eigenvalue of 0.30, the thresholded matrix
    about 0.12.  A group's block has the noise of an ``m x m`` release, so a
    ridge between two coordinates is judged against the noise of two, not of
    all ``d``.

    Parameters
    ----------
    r : ndarray, shape (d, d)
        Released symmetric matrix scaled to unit diagonal (a diagonal below 1
        where the release's diagonal was floored against its noise).
    entry_sd : ndarray, shape (d, d)
        Noise sd of each off-diagonal entry of ``r``.

    Returns
    -------
    Ridges
    """
    r = 0.5 * (np.asarray(r, dtype=float) + np.asarray(r, dtype=float).T)
    entry_sd = np.asarray(entry_sd, dtype=float)
    d = r.shape[0]
    off = ~np.eye(d, dtype=bool)
    # a NaN entry is not kept, and cannot join a group
    keep = off & (np.abs(np.nan_to_num(r, nan=0.0)) > entry_threshold(d) * entry_sd)
    eigenvalues = np.ones(d)
    directions = np.eye(d)
    noise_norm = np.zeros(d)
    groups = []
    _, labels = connected_components(keep, directed=False)
    for label in np.unique(labels):
        idx = np.flatnonzero(labels == label)
        if idx.size < 2:
            continue
        groups.append(idx)
        block = r[np.ix_(idx, idx)]
        if not np.all(np.isfinite(block)):
            eigenvalues[idx] = np.nan   # no ridge can be read from it
            continue
        lam, w = np.linalg.eigh(block)
        eigenvalues[idx] = lam
        directions[np.ix_(idx, idx)] = w
        block_sd = entry_sd[np.ix_(idx, idx)][~np.eye(idx.size, dtype=bool)]
        noise_norm[idx] = float(np.max(block_sd)) * math.sqrt(2.0 * idx.size)
    return Ridges(groups, eigenvalues, directions, noise_norm)
