"""Private per-coordinate quantiles by binary search on noisy counts.

To find, for every column ``j`` of a per-row array ``a`` (here the absolute
per-row gradient coordinates), a threshold ``t_j`` with about a fraction
``q`` of the rows above it, each round releases the vector of counts
``#{i : a_ij > t_j}`` (L2 sensitivity ``sqrt(d)``, :func:`noisy_counts`) and
halves every column's interval of ``log2 t``.  ``rounds`` rounds over
``[lo, hi]`` resolve ``log2 t`` to ``(hi - lo) / 2^rounds``.  The search
stays in its range whatever the noise (the issue-13 prototype found it more
robust than a noisy cumulative histogram), but a halving never revisits a
threshold: one count read on the wrong side of the target far from the
quantile leaves the result that far off, decades where the rows' values
have a gap.  Columns whose counts are within a few noise sds of the target
(``weighed``) are searched by probabilistic bisection instead
(:func:`_weighed_update`, :func:`_most_consistent`): no reading is taken as
certain, every threshold stays possible, and each round reads where the
readings so far are split evenly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import log_ndtr

from stan_dp.adaptation.releases import Ledger, noisy_counts
from stan_dp.aggregates import RowColumns, columns

__all__ = ["LOG2_RANGE", "WEIGHED_STEP", "private_quantiles"]

LOG2_RANGE = (-60.0, 60.0)
"""Search interval of ``log2 t`` (about 1e-18 to 1e18)."""

WEIGHED_STEP = 1.0 / 32.0
"""Grid step (octaves of ``t``) on which a ``weighed`` column's candidate thresholds are kept: finer
than the 11 halving rounds of the initial scale resolve (120 / 2^11 = 0.06 octaves)."""


def private_quantiles(rng_noise: np.random.Generator, values: np.ndarray | RowColumns, *, tail: float,
                      n_public: int, rounds: int, noise_multiplier: float, ledger: Ledger,
                      what: str = "quantile count",
                      log2_range: tuple[Any, Any] = LOG2_RANGE,
                      weighed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds with about ``tail * n`` rows above them, per column.

    Parameters
    ----------
    values : ndarray, shape (n, d), or RowColumns
        Per-row non-negative values (read: private), in this process or a
        view of rows held elsewhere (:class:`~stan_dp.aggregates.RowColumns`).
    tail : float or ndarray
        Target fraction of rows above the threshold (one for every column, or per column).
    n_public : int
        Public row count used for the target.
    rounds : int
        Search rounds (one count-vector release each).
    noise_multiplier : float
        Of each release (relative to the sensitivity ``sqrt(d)``).
    log2_range : (float or ndarray, float or ndarray)
        Search interval of ``log2 t``: one for every column, or per column.
    weighed : ndarray of bool, optional
        The columns searched by probabilistic bisection (:func:`_weighed_update`;
        default none): each round reads the count at the weighted median of
        the candidate thresholds, and the result is the most consistent with
        every reading (:func:`_most_consistent`).  The others halve their
        interval in every round, exactly as without.  The plan is the same
        either way: ``rounds`` count releases at ``noise_multiplier``.

    Returns
    -------
    thresholds : ndarray, shape (d,)
    at_floor : ndarray of bool, shape (d,)
        Columns whose search ended at the bottom of the range (no scale found:
        most rows are zero in that column).
    """
    v = columns(values)
    d = v.width
    floor = np.broadcast_to(np.asarray(log2_range[0], dtype=float), (d,))
    top = np.broadcast_to(np.asarray(log2_range[1], dtype=float), (d,))
    lo, hi = floor.copy(), top.copy()
    target = np.broadcast_to(np.asarray(tail * n_public, dtype=float), (d,))
    resolution = (top - floor) / np.exp2(rounds) + 1e-12
    soft = np.flatnonzero(np.broadcast_to(np.asarray(False if weighed is None else weighed, dtype=bool), (d,)))
    count_sd = noise_multiplier * float(np.sqrt(d))   # the noise sd of every count (noisy_counts)
    if soft.size:
        points = int(np.ceil(float(np.max(top[soft] - floor[soft])) / WEIGHED_STEP)) + 1
        grid = floor[soft, None] + (top - floor)[soft, None] * np.linspace(0.0, 1.0, points)[None, :]
        log_weight = np.zeros_like(grid)
    for r in range(rounds):
        mid = 0.5 * (lo + hi)
        if soft.size:
            mid[soft] = _weighted_median(grid, log_weight)
        counts = noisy_counts(rng_noise, v, np.exp2(mid), noise_multiplier, ledger, f"{what}, round {r}")
        above = counts > target
        lo = np.where(above, mid, lo)
        hi = np.where(~above, mid, hi)
        if soft.size:
            log_weight += _weighed_update(grid, mid[soft], counts[soft], target[soft], count_sd)
    estimate = 0.5 * (lo + hi)
    at_floor = hi <= floor + resolution
    if soft.size:
        estimate[soft] = _most_consistent(grid, log_weight)
        at_floor[soft] = estimate[soft] <= floor[soft] + (top[soft] - floor[soft]) / (points - 1)
    return np.exp2(estimate), at_floor


def _weighed_update(grid: np.ndarray, threshold: np.ndarray, count: np.ndarray, target: np.ndarray,
                    count_sd: float) -> np.ndarray:
    """The log weight one released count adds to every candidate ``log2 t`` (post-processing).

    A count ``c`` released at ``threshold`` with Gaussian noise of sd
    ``count_sd`` says, under a flat prior on the true count ``N``, that
    ``N > target`` with probability ``Phi((c - target) / sd)``: the quantile
    is then above the threshold.  A candidate above the threshold gains the
    log of that probability, one at or below it the log of the other,
    ``Phi((target - c) / sd)``.  The sum over the rounds is a likelihood of
    each candidate under independent readings; the halving search is its
    limit where every probability is rounded to 0 or 1 (a count one noise
    sd above the target counts as certain there, here as 0.84 against 0.16).
    This is probabilistic bisection (Horstein 1963; Waeber, Frazier and
    Henderson 2013) with each reading's error chance taken from its own
    margin.  Where a target is within its noise of 0 (a coordinate few rows
    depend on), the halving search takes a count read 1 sd high at a
    threshold above every row as certain and climbs decades from it
    (docs/adaptation.md §3, "Probabilistic bisection").
    """
    side = grid > threshold[:, None]
    up = log_ndtr((count - target) / count_sd)[:, None]
    down = log_ndtr((target - count) / count_sd)[:, None]
    return np.where(side, up, down)


def _weighted_median(grid: np.ndarray, log_weight: np.ndarray) -> np.ndarray:
    """Per row of ``grid``, the candidate where the weights ``exp(log_weight)`` split in half."""
    w = np.exp(log_weight - log_weight.max(axis=1, keepdims=True))
    cdf = np.cumsum(w, axis=1)
    k = np.argmax(cdf >= 0.5 * cdf[:, -1:], axis=1)
    return grid[np.arange(grid.shape[0]), k]


def _most_consistent(grid: np.ndarray, log_weight: np.ndarray) -> np.ndarray:
    """Per row of ``grid``, the middle of the highest run of candidates whose log weight is the
    largest (the readings' most likely threshold; of several such runs the highest: the narrow side
    of the frame, short steps)."""
    best = log_weight >= log_weight.max(axis=1, keepdims=True) - 1e-9
    index = np.arange(grid.shape[1])
    last = np.max(np.where(best, index, -1), axis=1)                              # highest best candidate
    first = np.max(np.where(~best & (index < last[:, None]), index, -1), axis=1) + 1   # start of its run
    rows = np.arange(grid.shape[0])
    return 0.5 * (grid[rows, first] + grid[rows, last])
