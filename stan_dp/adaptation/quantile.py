"""Private per-coordinate quantiles by binary search on noisy counts.

To find, for every column ``j`` of a per-row array ``a`` (here the absolute
per-row gradient coordinates), a threshold ``t_j`` with about a fraction
``q`` of the rows above it, each round releases the vector of counts
``#{i : a_ij > t_j}`` (L2 sensitivity ``sqrt(d)``, :func:`noisy_counts`) and
halves every column's interval of ``log2 t``.  ``rounds`` rounds over
``[lo, hi]`` resolve ``log2 t`` to ``(hi - lo) / 2^rounds``.  A count noise
larger than the tail only blurs which quantile is found (the search stays
monotone), it never makes the search diverge; the issue-13 prototype found
this more robust than a noisy cumulative histogram.
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
                      log2_range: tuple[Any, Any] = LOG2_RANGE) -> tuple[np.ndarray, np.ndarray]:
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
    target = tail * n_public
    for r in range(rounds):
        mid = 0.5 * (lo + hi)
        counts = noisy_counts(rng_noise, v, np.exp2(mid), noise_multiplier, ledger, f"{what}, round {r}")
        above = counts > target
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    at_floor = hi <= floor + (top - floor) / 2.0**rounds + 1e-12
    return np.exp2(0.5 * (lo + hi)), at_floor
