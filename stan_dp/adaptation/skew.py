"""The skew check: one release that tells whether a Gaussian at the private mode can be the posterior.

The automatic path reports a Gaussian at the private mode with the private
curvature.  Where the posterior is far from Gaussian its mean is not its mode,
and no amount of privacy noise explains the gap: a non-centred hierarchical
logistic regression (8 groups, ``tau ~ normal(0, 2)``, ``z ~ std_normal()``,
3,000 rows, epsilon = 16) reported ``tau`` = 1.06 with a noise sd of 0.18
posterior sds where NUTS has 0.34 +- 0.12 — 3.8 to 7.1 sds off in 10 of 12
runs, with no warning.  The exact (non-private) Laplace approximation of that
posterior is as far off: it is the approximation, not the noise.

**The statistic.**  A Gaussian ``q = N(m, A A')`` is the posterior's own
mean and covariance only if, averaged over ``q``, the log density's gradient
vanishes (Stein's identity, ``E_pi[grad log pi] = 0``; the stationarity
condition of Gaussian variational inference).  In the frame ``A``
(``theta = m + A u``) its average is, to second order,

    A' E_q[grad log pi] = A' grad log pi(m) + (1/2) Laplacian_u (A' grad log pi)(m),

and the second term alone is the classical skewness correction of a Laplace
approximation: with ``T`` the third derivatives of ``log pi`` in ``u``,
``E_pi[u] ~ (1/2) sum_jk T_ijk delta_jk`` (Isserlis' theorem on the cubic term
of the expansion).  The spherical cubature rule of degree 3 (the ``2d`` points
``u = +-sqrt(d) e_k``, exact for cubic polynomials under ``N(0, I)``) gives it
from gradients only:

    s = (1/2d) sum_k [A' grad log pi(m + A u_k)] - A' grad log pi(m).

``s`` is the shift of the mean from ``m`` in ``q``'s own sds (whitened);
``A s`` in ``theta``.  Subtracting the gradient at ``m`` keeps out the
mode's own noise (whose gradient is of the order of that noise), so ``s``
measures the shape, not where ``m`` landed.

**The release.**  Per row, ``s_i = (1/2d) sum_k A' g_i(m + A u_k) - A' g_i(m)``
(``g_i`` the row's log-likelihood gradient), projected on the l2 ball of
radius ``B = SKEW_BOUND C_w^3`` (``C_w`` :func:`~stan_dp.adaptation.forecast.whitened_grad_scale`);
the exact prior's part is public and added.  One row changes the sum by at
most ``f B`` (``f = 2`` replace-one, 1 add/remove), so with noise
``N(0, (f B z)^2 I)`` it is a Gaussian mechanism with multiplier ``z``.

**Why it is cheap.**  In the posterior's frame a regular row's gradient is
``O(C_w)`` with either sign, but its third derivatives are ``O(C_w^3)`` and
systematic (a GLM row's ``s_i`` is ``l''' |x~_i|^2 x~_i / 2``).  The sum is
``O(n C_w^3)`` against a noise of ``O(z C_w^3)``: a signal-to-noise ratio of
order ``n / z``.  So a small share (:data:`SKEW_SHARE`) resolves shifts of a
tenth of a posterior sd at 1,000-3,000 rows and epsilon 4-16.

Measured (docs/adaptation.md §5, "A Gaussian that is not the posterior"; 3,000 rows,
epsilon = 16, 24 runs each): GLMs and published-style regressions shift by 0.00-0.17 sds,
the hierarchical regression above by 0.54-4.2 (an underestimate: the expansion is
second order, and those runs were 1.9-4.7 sds off in ``log tau``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stan_dp.adaptation.forecast import whitened_grad_scale
from stan_dp.adaptation.releases import Ledger, clipped_vector_sum
from stan_dp.aggregates import RowColumns
from stan_dp.density import prior_gradient

__all__ = ["SKEW_SHARE", "SKEW_BOUND", "skew_bound", "cubature_points", "skew_check"]


SKEW_SHARE = 0.005
"""Share of the adaptation budget (PLD mean) of the skew check (:func:`skew_check`).  Its noise
sd in posterior sds is ``f z SKEW_BOUND C_w^3``, ``z = 1 / sqrt(2 SKEW_SHARE m)`` for the
adaptation's PLD mean ``m``: at d = 11, 0.034 at 3,000 rows, epsilon = 16, 0.18 at 1,000 rows,
epsilon = 16, 0.56 at 1,000 rows, epsilon = 4, 0.018 at 10^4 rows, epsilon = 4.  The estimates it
takes its budget from moved by 0.98-1.03 in geometric mean for most models (hetero 0.94 and the
unsettled runs of wells-bounded 1.24 at 3,000 rows, epsilon = 16; docs/adaptation.md §5)."""
SKEW_BOUND = 8.0
"""The l2 bound of one row's shift vector, in units of ``C_w^3`` (:func:`skew_bound`).  In the
private fits' own frames the 90th percentile of the rows' norms was 0.3-1.3 ``C_w^3`` for GLMs and
1-5 for the hierarchical regression (whose largest was 7): few rows are clipped.  Clipping shortens
each row's vector; where the rows' shifts align (a systematic third derivative, the case the check
is for) it shortens the sum, erring towards silence, so the bound is not set tight."""


def skew_bound(n_public: int, dim: int) -> float:
    """``B = SKEW_BOUND C_w^3``: the l2 bound of one row's shift vector (public)."""
    return SKEW_BOUND * whitened_grad_scale(n_public, dim) ** 3


def cubature_points(dim: int) -> np.ndarray:
    """The ``2 d`` points ``+-sqrt(d) e_k`` of the degree-3 spherical rule for ``N(0, I_d)``, rows."""
    eye = math.sqrt(dim) * np.eye(dim)
    return np.vstack([eye, -eye])


def _shift_rows(density: Any, mode: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """Per row ``(1/2d) sum_k A' g_i(m + A u_k) - A' g_i(m)``, shape ``(n, d)``.

    A row whose gradient is not finite at ``m`` or at any of the points contributes 0 (a
    per-row function of the row: its clipped contribution is bounded either way).  Computed
    where the rows live; only the clipped sum leaves.
    """
    d = mode.size
    _, at_mode = density.row_log_lik_grad(mode)
    base = np.asarray(at_mode, dtype=float).reshape(-1, d)
    total = np.zeros_like(base)
    ok = np.all(np.isfinite(base), axis=1)
    for u in cubature_points(d):
        _, grads = density.row_log_lik_grad(mode + frame @ u)
        g = np.asarray(grads, dtype=float).reshape(-1, d)
        ok &= np.all(np.isfinite(g), axis=1)
        total += np.where(np.isfinite(g), g, 0.0)
    with np.errstate(all="ignore"):
        rows = (total / (2 * d) - base) @ frame
    return np.where(ok[:, None], rows, 0.0)


def _prior_shift(density: Any, mode: np.ndarray, frame: np.ndarray) -> np.ndarray:
    """The exact prior's part of the shift (public): the same average of ``A' grad log prior``."""
    d = mode.size
    _, at_mode = prior_gradient(density, mode)
    points = [prior_gradient(density, mode + frame @ u)[1] for u in cubature_points(d)]
    with np.errstate(all="ignore"):
        out = frame.T @ (np.mean(points, axis=0) - at_mode)
    return np.where(np.isfinite(out), out, 0.0)


def skew_check(holder: Any, density: Any, mode: np.ndarray, frame: np.ndarray, n_public: int,
               noise_multiplier: float, rng_noise: np.random.Generator,
               ledger: Ledger) -> tuple[np.ndarray, np.ndarray]:
    """Release the skew statistic at the reported mode; return its shift and noise sd per coordinate.

    Parameters
    ----------
    holder : AggregateDensity
        Where the rows are (:func:`stan_dp.aggregates.queries`).
    density : RowDensity
        For the exact log prior (public).
    mode : ndarray
        The reported mode (unconstrained; released).
    frame : ndarray
        ``A`` with ``A A'`` the reported covariance (released).
    n_public : int
        Public row count (the bound).
    noise_multiplier : float
        The release's planned ``z``.
    rng_noise : numpy.random.Generator
        Privacy noise stream.
    ledger : Ledger
        Receives the release ("skew check").

    Returns
    -------
    shift : ndarray
        ``A s / sd``: the second-order shift of the posterior mean from ``mode``, per
        unconstrained coordinate in the reported posterior sds (released plus the exact prior's
        part; post-processing).
    noise_sd : ndarray
        The release's noise sd in the same units, per coordinate (the whitened noise is
        isotropic, so it is the same for every coordinate).
    """
    mode = np.asarray(mode, dtype=float)
    frame = np.asarray(frame, dtype=float)
    d = mode.size
    bound = skew_bound(n_public, d)
    stat = holder.row_statistic(_shift_rows, mode, frame)
    released, _ = clipped_vector_sum(rng_noise, RowColumns(holder, stat, 0, d), bound, noise_multiplier,
                                     ledger, "skew check")
    del stat
    sd = ledger.entries[-1].noise_sd
    # ---- post-processing of the release and the public prior ----
    shift_u = released + _prior_shift(density, mode, frame)
    post_sd = np.sqrt(np.maximum(np.sum(frame * frame, axis=1), 1e-300))
    return (frame @ shift_u) / post_sd, np.full(d, sd)
