"""What a budget can buy, from public facts only (n, dim, epsilon, delta).

In the posterior's own frame (coordinates ``u = Sigma^{-1/2} (theta - mode)``)
the per-row scores ``g~_i = Sigma^{1/2} grad loglik_i`` of a regular model
satisfy ``sum_i g~_i g~_i' ~ I`` (the Bartlett identity: the summed outer
products estimate the Fisher information, which is the inverse posterior
covariance).  Each row then carries ``E ||g~_i||^2 = dim / n``, and the norms
are spread like ``sqrt(chi2_dim / n)``; so the 90th percentile of the
whitened per-row gradient norms is, to a factor 0.85-1.25 on real models
(issue 13's prototype, six published models),

    C_w = sqrt(chi2_{dim, 0.9} / n).

One Gaussian release of the clipped score sum (clip ``C_w``) with the whole
budget has noise sd ``k C_w / mu`` per coordinate (``k = 2`` under
replace-one, ``1`` under add/remove; ``mu`` the Gaussian-DP parameter of
``(epsilon, delta)``), and since the curvature is the identity in this frame,
a one-step estimate of the mode inherits exactly that error, in posterior
sds: the *floor* ``2 C_w / mu`` of issue 13 (replace-one).  It is what a
release clipped in the posterior's own frame can do; every real estimator
pays more (clip inflation ``kappa``, the budget share ``f`` of the final
releases): ``error ~ kappa * floor / sqrt(f)``.

The per-row Hessians in the same frame sum to ``~ I`` too, so their
Frobenius norms are ``~ chi2_dim / n``: the public curvature bound.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from scipy import stats

from stan_dp.accounting import gaussian
from stan_dp.accounting.validation import sensitivity_factor

__all__ = [
    "CHI2_LEVEL",
    "whitened_grad_scale",
    "whitened_hessian_scale",
    "gdp_mu",
    "pld_mean_budget",
    "Forecast",
    "forecast",
    "worst_of",
    "exceed_probability",
]

CHI2_LEVEL = 0.9
"""Quantile level of the public per-row scale (the 90th percentile)."""


def whitened_grad_scale(n_rows: int, dim: int) -> float:
    """``C_w = sqrt(chi2_{dim, 0.9} / n)``: forecast 90th percentile of ``||Sigma^{1/2} g_i||``."""
    return math.sqrt(float(stats.chi2.ppf(CHI2_LEVEL, dim)) / n_rows)


def whitened_hessian_scale(n_rows: int, dim: int) -> float:
    """``chi2_{dim, 0.9} / n``: forecast 90th percentile of ``||Sigma^{1/2} H_i Sigma^{1/2}||_F``.

    For a GLM row ``H_i = w_i x_i x_i'`` the Frobenius norm in the whitened
    frame is ``w_i ||x~_i||^2``, whose sum over rows is ``trace(I) = dim``:
    the same chi-square spread as the squared gradient norms.
    """
    return float(stats.chi2.ppf(CHI2_LEVEL, dim)) / n_rows


def pld_mean_budget(epsilon: float, delta: float) -> float:
    """The largest PLD mean ``M = sum_k 1 / (2 z_k^2)`` that fits ``(epsilon, delta)``.

    Gaussian releases compose exactly to a privacy-loss distribution
    ``N(M, 2M)`` (``stan_dp.accounting.gaussian``); ``mu = sqrt(2 M)`` is the
    Gaussian-DP parameter.
    """
    return float(gaussian.max_gaussian_pld_mean(epsilon, delta))


def gdp_mu(epsilon: float, delta: float) -> float:
    """Gaussian-DP parameter ``mu`` of ``(epsilon, delta)``: ``sqrt(2 M_max)``."""
    return math.sqrt(2.0 * pld_mean_budget(epsilon, delta))


def worst_of(dim: int) -> float:
    """``q``: the largest of ``dim`` ``|N(0, 1)|`` is below ``q`` about half the time.

    ``q = Phi^-1(1 - 1 / (4 dim))`` (at least 1), slightly above the median of
    that maximum (1.38 vs 1.27 at dim = 3, 2.00 vs 1.87 at dim = 11).
    """
    return max(1.0, float(stats.norm.ppf(1.0 - 0.25 / dim)))


def exceed_probability(sds, limit: float, bias=0.0) -> float:
    """Probability that some coordinate is off by more than ``limit``.

    For independent errors ``N(b_j, s_j^2)`` (posterior sds):
    ``1 - prod_j (Phi((limit - b_j) / s_j) - Phi((-limit - b_j) / s_j))``.
    ``bias`` (``b_j``, one for all or per coordinate, its sign unknown: only
    ``|b_j|`` matters) is a bias the noise does not cover, e.g. clipping's.
    Zero sds exceed exactly when ``|b_j| > limit``; infinite ones always do.
    """
    s = np.atleast_1d(np.asarray(sds, dtype=float))
    b = np.abs(np.broadcast_to(np.asarray(bias, dtype=float), s.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(s > 0, s, 1.0)
        inside = stats.norm.cdf((limit - b) / safe) - stats.norm.cdf((-limit - b) / safe)
    inside = np.where(s > 0, inside, (b <= limit).astype(float))
    inside = np.where(np.isinf(s), 0.0, inside)
    return float(1.0 - np.prod(inside))


class Forecast(NamedTuple):
    """Public forecast of the accuracy a budget can buy (posterior sds)."""

    floor: float
    """``k C_w / mu``: one release in the posterior's frame with the whole budget."""
    expected_error: float
    """``kappa * floor / sqrt(share)``: the per-coordinate sd of the private mode."""
    worst_error: float
    """Typical largest of ``dim`` coordinate errors: ``expected_error * q`` with ``q`` the
    ``1 - 1 / (4 dim)`` normal quantile (the median of the largest of ``dim`` ``|N(0, 1)|``
    is about that), at least 1."""
    exceed_probability: float
    """Probability that some coordinate is off by more than ``limit`` (posterior sds), for
    ``dim`` independent errors with sd :attr:`expected_error` (:func:`exceed_probability`)."""


def forecast(n_rows: int, dim: int, epsilon: float, delta: float, *, relation: str = "replace_one",
             kappa: float = 1.0, share: float = 1.0, limit: float = 0.5) -> Forecast:
    """Forecast the posterior-sd error of a private mode from public facts.

    Parameters
    ----------
    n_rows : int
        Public row count (under add/remove a declared public value).
    dim : int
        Unconstrained dimension.
    epsilon, delta : float
        The budget.
    relation : str
        Neighbouring relation (sensitivity factor 2 or 1).
    kappa : float
        Clip bound as a multiple of ``C_w``.
    share : float
        Share of the budget (in PLD mean) carried by the releases the
        estimate averages.
    limit : float
        Error (posterior sds) whose exceedance :attr:`Forecast.exceed_probability` gives.
    """
    mu = gdp_mu(epsilon, delta)
    floor = sensitivity_factor(relation) * whitened_grad_scale(n_rows, dim) / mu
    expected = kappa * floor / math.sqrt(share)
    return Forecast(floor, expected, expected * worst_of(dim),
                    exceed_probability([expected] * int(dim), limit))
