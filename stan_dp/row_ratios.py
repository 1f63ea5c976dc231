"""Per-row log-likelihood ratios computed without data-dependent side effects.

A row whose log-likelihood is ``-inf`` at both the current and the proposed
point gives ``(-inf) - (-inf) = NaN``; NumPy then emits a ``RuntimeWarning``
("invalid value encountered in subtract") exactly when such a row exists, and
huge finite values can trigger "overflow encountered in subtract".  A warning
whose occurrence depends on one row is a side channel outside the privacy
mechanism (DESIGN.md, "Privacy invariants").  :func:`log_ratios` computes the
difference with every floating-point warning suppressed and maps NaN the way
:func:`stan_dp.mechanisms.clip_log_ratios` does (a failed evaluation counts
against the move), so nothing observable depends on which rows failed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["log_ratios"]


def log_ratios(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``new - old`` per row, silently, with NaN mapped to ``-inf``.

    Parameters
    ----------
    new : array_like, shape (m,)
        Per-row log-likelihoods at the proposed point.
    old : array_like, shape (m,)
        Per-row log-likelihoods at the current point.

    Returns
    -------
    ndarray, shape (m,)
        The ratios ``r_j = new_j - old_j``.  Entries that are NaN (a row
        impossible at both points, ``inf - inf``, or a row Stan rejected)
        become ``-inf``, which :func:`stan_dp.mechanisms.clip_log_ratios` maps
        to ``-bound`` exactly as it maps NaN: the result after clipping is the
        same, and no NaN reaches later arithmetic.  No NumPy warning is
        emitted whatever the values.
    """
    with np.errstate(all="ignore"):
        r = np.subtract(np.asarray(new, dtype=float), np.asarray(old, dtype=float))
    return np.where(np.isnan(r), -np.inf, r)
