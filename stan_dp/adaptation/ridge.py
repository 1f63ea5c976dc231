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

__all__ = ["FAMILYWISE", "Ridges", "apart_from", "entry_threshold", "thresholded_ridges"]

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
    r = _symmetric(r)
    d = r.shape[0]
    out = Ridges([], np.ones(d), np.eye(d), np.zeros(d))
    return _grouped(out, r, np.asarray(entry_sd, dtype=float), np.arange(d), entry_threshold(d))


def apart_from(ridges: Ridges, r: np.ndarray, entry_sd: np.ndarray, group: np.ndarray,
               elements: np.ndarray) -> tuple[Ridges, list[np.ndarray]]:
    """``ridges`` with ``group`` replaced by the groups its members that are no group's elements
    form among themselves, and those new groups.

    A declared hierarchical group's direction (every element and the location moved as one,
    :func:`~stan_dp.adaptation.groups.grouped_frame`) shares rows with each of its elements, so
    its entries with them are kept and one group holds them all: with many elements that block's
    noise is too large to turn it, and a ridge between two groups' directions (a varying
    intercept's and a varying slope's, which share every row where the predictor is not 0) is
    lost with it.  Judged apart from the elements, the directions (and the coordinates in no
    declared group) form groups of their own size and noise.  The elements keep their axes,
    eigenvalue 1 and noise 0; the threshold is the whole matrix's, as in
    :func:`thresholded_ridges`.  Post-processing of the same released matrix.

    Parameters
    ----------
    ridges : Ridges
        :func:`thresholded_ridges` of ``r``.
    r, entry_sd : ndarray, shape (d, d)
        As for :func:`thresholded_ridges`.
    group : ndarray of int
        One of ``ridges.groups``.
    elements : ndarray of bool, shape (d,)
        The coordinates that are elements of a declared group.

    Returns
    -------
    Ridges, list of ndarray
        The updated ridges (``group`` removed) and the groups that replace it.
    """
    r = _symmetric(r)
    group = np.asarray(group)
    eigenvalues, directions, noise_norm = (ridges.eigenvalues.copy(), ridges.directions.copy(),
                                           ridges.noise_norm.copy())
    eigenvalues[group], noise_norm[group] = 1.0, 0.0
    directions[np.ix_(group, group)] = np.eye(group.size)
    kept = [g for g in ridges.groups if not np.array_equal(g, group)]
    rest = group[~np.asarray(elements, dtype=bool)[group]]
    split = _grouped(Ridges(kept, eigenvalues, directions, noise_norm), r,
                     np.asarray(entry_sd, dtype=float), rest, entry_threshold(r.shape[0]))
    return split, split.groups[len(kept):]


def _symmetric(r: np.ndarray) -> np.ndarray:
    return 0.5 * (np.asarray(r, dtype=float) + np.asarray(r, dtype=float).T)


def _grouped(ridges: Ridges, r: np.ndarray, entry_sd: np.ndarray, among: np.ndarray,
             threshold: float) -> Ridges:
    """``ridges`` with the connected groups of entries beyond ``threshold`` noise sds among the
    coordinates ``among`` appended, and their blocks' eigen-decompositions and noise written in
    (into ``ridges``' own arrays: its callers pass arrays of their own)."""
    sub = r[np.ix_(among, among)]
    off = ~np.eye(among.size, dtype=bool)
    # a NaN entry is not kept, and cannot join a group
    keep = off & (np.abs(np.nan_to_num(sub, nan=0.0)) > threshold * entry_sd[np.ix_(among, among)])
    groups = list(ridges.groups)
    eigenvalues, directions, noise_norm = ridges.eigenvalues, ridges.directions, ridges.noise_norm
    _, labels = connected_components(keep, directed=False)
    for label in np.unique(labels):
        idx = among[labels == label]
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
