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
have a gap.  Recheck rounds (``rechecks``) re-read the count where the
search came down last and reopen the interval there when the readings
disagree with it (:func:`_reopened`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stan_dp.adaptation.releases import Ledger, noisy_counts
from stan_dp.aggregates import RowColumns, columns

__all__ = ["LOG2_RANGE", "private_quantiles"]

LOG2_RANGE = (-60.0, 60.0)
"""Search interval of ``log2 t`` (about 1e-18 to 1e18)."""


def private_quantiles(rng_noise: np.random.Generator, values: np.ndarray | RowColumns, *, tail: float,
                      n_public: int, rounds: int, noise_multiplier: float, ledger: Ledger,
                      what: str = "quantile count",
                      log2_range: tuple[Any, Any] = LOG2_RANGE,
                      rechecks: int = 0,
                      rechecked: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
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
        Binary-search rounds (one count-vector release each).
    noise_multiplier : float
        Of each release (relative to the sensitivity ``sqrt(d)``).
    log2_range : (float or ndarray, float or ndarray)
        Search interval of ``log2 t``: one for every column, or per column.
    rechecks : int
        How many of the last ``rounds`` re-read the count at the upper end of
        the interval the halving rounds closed, and halve an interval that a
        recheck reopened (:func:`_reopened`; 0: every round halves).  The
        plan is the same either way: ``rounds`` count releases at
        ``noise_multiplier``.
    rechecked : ndarray of bool, optional
        The columns that take the rechecks (default: every column); the
        others halve their interval in every round.

    Returns
    -------
    thresholds : ndarray, shape (d,)
    at_floor : ndarray of bool, shape (d,)
        Columns whose search ended at the bottom of the range (no scale found:
        most rows are zero in that column).
    """
    if not 0 <= rechecks < rounds:
        raise ValueError("rechecks must be at least 0 and fewer than rounds")
    v = columns(values)
    d = v.width
    floor = np.broadcast_to(np.asarray(log2_range[0], dtype=float), (d,))
    top = np.broadcast_to(np.asarray(log2_range[1], dtype=float), (d,))
    lo, hi = floor.copy(), top.copy()
    target = np.broadcast_to(np.asarray(tail * n_public, dtype=float), (d,))
    mask = np.broadcast_to(np.asarray(True if rechecked is None else rechecked, dtype=bool), (d,))
    halvings = np.where(mask, rounds - rechecks, rounds)
    resolution = (top - floor) / np.exp2(halvings) + 1e-12
    readings: list[tuple[np.ndarray, np.ndarray]] = []   # (log2 threshold, released count) per round
    for r in range(rounds):
        # a recheck re-reads the upper end of an interval the halving rounds closed, where that end
        # was read; every other column halves its interval (one the recheck reopened, too)
        recheck = (r >= halvings) & (hi - lo <= resolution) & (hi < top)
        mid = np.where(recheck, hi, 0.5 * (lo + hi))
        counts = noisy_counts(rng_noise, v, np.exp2(mid), noise_multiplier, ledger, f"{what}, round {r}")
        readings.append((mid, counts))
        above = counts > target
        lo = np.where(~recheck & above, mid, lo)
        hi = np.where(~recheck & ~above, mid, hi)
        if recheck.any():
            lo, hi = _reopened(readings, recheck, lo, hi, target)
    at_floor = hi <= floor + resolution
    # an interval a recheck reopened is wider than the resolution: its upper end is the narrow side
    # of the frame (short steps)
    wide = hi - lo > resolution
    return np.exp2(np.where(wide, hi, 0.5 * (lo + hi))), at_floor


def _reopened(readings: list[tuple[np.ndarray, np.ndarray]], rechecked: np.ndarray, lo: np.ndarray,
              hi: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The interval after a recheck of its upper end (post-processing of released counts only).

    A halving search never revisits a threshold: one count read low by
    noise at a threshold below every row that depends on a column sends the
    search decades down, and every later round (each above the target there)
    walks back up to that one reading.  An ordered logistic regression's top
    cut point (285 depending rows at 1,000 rows, epsilon = 1, count-noise sd
    81, target 149) read 135 at ``2^-15`` against a true 285: its frame came
    out 51 times too wide, and the private posterior mean of the cut point
    10^6-10^7 posterior sds off.  A recheck re-reads the count at the upper end
    ``hi`` (the last threshold read below the target) and averages every
    reading there.  Where the average is above the target the interval
    reopens to the next threshold read above ``hi`` (one read below the
    target: the search had come down from there), which the next rounds
    halve.  Where no threshold above ``hi`` was read the interval stays.
    """
    lo, hi = lo.copy(), hi.copy()
    for j in np.flatnonzero(rechecked):
        at = [c[j] for t, c in readings if t[j] == hi[j]]
        higher = [t[j] for t, _ in readings if t[j] > hi[j]]
        if float(np.mean(at)) > target[j] and higher:
            lo[j], hi[j] = hi[j], min(higher)
    return lo, hi
