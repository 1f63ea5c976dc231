r"""The Barker correction distribution :math:`V_{corr}` (seed 003, Section 3.2; Heikkilä et al. 2019).

DP Barker accepts when :math:`\lambda + \mathcal N(0, C) + V_{corr} > 0` and
needs :math:`\mathcal N(0, C) + V_{corr} \approx \mathrm{Logistic}(0, 1)`.  No
exact :math:`V_{corr}` exists for :math:`C > 0` (its characteristic function
would be :math:`\pi t\,e^{Ct^2/2}/\sinh(\pi t)`, which is unbounded), so it is
approximated.

Method
------
:math:`V_{corr}` is a symmetric discrete distribution on the grid
:math:`\{0, \pm h, \pm 2h, \dots, \pm M\}`; then
:math:`\mathcal N(0, C) + V_{corr}` is the Gaussian mixture
:math:`\sum_k w_k \tfrac12(\mathcal N(\mu_k, C) + \mathcal N(-\mu_k, C))`.  The
weights minimise the total-variation distance to the logistic density on a
grid of :math:`[0, 25]` (a linear programme solved by HiGHS, deterministic):
the result is the best :math:`V_{corr}` supported on that grid.  It is fitted
once per :math:`C` and cached in memory (:func:`correction_distribution`,
about 1 s).

Quality (measured by the tests on an independent fine grid)
-----------------------------------------------------------
The best achievable TV grows quickly with :math:`C` because a location mixture
of :math:`\mathcal N(\cdot, C)` cannot reproduce the logistic's peak:

===========  ===========  =================================
:math:`C`    TV           Kolmogorov (= max acceptance error)
===========  ===========  =================================
1.5          2.8e-4       5.1e-5
1.6          5.45e-4      1.1e-4
1.7          9.8e-4       2.2e-4
2.0          3.85e-3      1.1e-3
===========  ===========  =================================

So TV < 1e-3 is possible only for :math:`C \lesssim 1.7`; at Theorem 8's
:math:`C = 2` no distribution does better than 3.85e-3 (the LP optimum does
not move when the grid is refined).  The default is therefore
:data:`DEFAULT_CORRECTION_VARIANCE` ``= 1.6`` (TV 5.45e-4): the largest
round value with a margin of almost 2 below 1e-3.  Its price is privacy:
the test noise :math:`\mathcal N(0, C - \sigma_b^2)` is smaller, so the
per-step RDP is larger (Theorem 8 extended to :math:`1 < C < \pi^2/3`, see
:func:`stan_dp.accounting.bounds.barker_base_rdp_epsilon`; at ``b = 500``,
:math:`\varepsilon'(2)` is 0.53 instead of 0.37).  What the Barker test
actually uses is the CDF: the acceptance probability
:math:`P(\tilde\lambda + V > 0)` differs from the exact Barker probability
by at most the Kolmogorov distance.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, sparse, special, stats

from stan_dp.secure_noise import SecureNoise

__all__ = [
    "LOGISTIC_VARIANCE",
    "DEFAULT_CORRECTION_VARIANCE",
    "CorrectionDistribution",
    "fit_correction",
    "correction_distribution",
]

LOGISTIC_VARIANCE = math.pi**2 / 3.0
"""Variance of the standard logistic distribution; ``C`` must be below it."""

DEFAULT_CORRECTION_VARIANCE = 1.6
"""Default total test-noise variance :math:`C` of :func:`stan_dp.barker` (TV 5.45e-4, see above)."""

_FIT_SPACING = 0.05
_FIT_MAX_ATOM = 12.0
_FIT_GRID_MAX = 25.0
_FIT_GRID_POINTS = 1001


@dataclass(frozen=True)
class CorrectionDistribution:
    """A symmetric discrete :math:`V_{corr}` for total Gaussian variance ``variance``.

    Attributes
    ----------
    variance : float
        :math:`C`.
    atoms : ndarray
        Sorted support points (symmetric about 0).
    weights : ndarray
        Probabilities of ``atoms`` (sum to 1).
    fitted_tv : float
        TV distance to Logistic(0, 1) on the fitting grid (the LP optimum).
    """

    variance: float
    atoms: np.ndarray
    weights: np.ndarray
    fitted_tv: float = float("nan")

    @functools.cached_property
    def _cumulative(self) -> np.ndarray:
        cum = np.cumsum(self.weights)
        return cum / cum[-1]

    def sample(self, rng: np.random.Generator | SecureNoise) -> float:
        r"""One draw of :math:`V_{corr}`.

        From the chain's noise stream: a numpy generator in seeded runs, a
        :class:`~stan_dp.secure_noise.SecureNoise` (OS CSPRNG, a uniform of
        53-bit resolution) when ``seed=None``.  Floating-point attacks do not
        apply: :math:`V_{corr}` is data-independent and takes finitely many
        values; the accept decision is post-processing of the released
        :math:`\tilde\lambda`, whatever the law of :math:`V_{corr}`, and
        the atom probabilities are realised to within ``2**-53`` each.
        """
        u = rng.random()
        k = int(np.searchsorted(self._cumulative, u, side="right"))
        return float(self.atoms[min(k, self.atoms.size - 1)])

    def prob_greater(self, x: float) -> float:
        """:math:`P(V_{corr} > x)`."""
        return float(self.weights[self.atoms > x].sum())

    def convolved_pdf(self, x: np.ndarray) -> np.ndarray:
        """Density of :math:`\\mathcal N(0, C) + V_{corr}` at ``x``."""
        x = np.asarray(x, dtype=float)
        sd = math.sqrt(self.variance)
        return (self.weights * stats.norm.pdf((x[..., None] - self.atoms) / sd)).sum(-1) / sd

    def convolved_cdf(self, x: np.ndarray) -> np.ndarray:
        """CDF of :math:`\\mathcal N(0, C) + V_{corr}` at ``x``."""
        x = np.asarray(x, dtype=float)
        sd = math.sqrt(self.variance)
        return (self.weights * special.ndtr((x[..., None] - self.atoms) / sd)).sum(-1)


def _check_variance(variance: float) -> float:
    if isinstance(variance, bool) or not isinstance(variance, (int, float, np.integer, np.floating)):
        raise ValueError(f"correction_variance must be a number, got {variance!r}")
    c = float(variance)
    if not (np.isfinite(c) and 0.0 < c < LOGISTIC_VARIANCE):
        raise ValueError(
            f"correction_variance must lie in (0, pi^2/3 = {LOGISTIC_VARIANCE:.4f}): N(0, C) must "
            f"fit inside a standard logistic variable; got {variance!r}"
        )
    return c


def fit_correction(
    variance: float,
    *,
    spacing: float = _FIT_SPACING,
    max_atom: float = _FIT_MAX_ATOM,
    grid_max: float = _FIT_GRID_MAX,
    grid_points: int = _FIT_GRID_POINTS,
) -> CorrectionDistribution:
    """Fit :math:`V_{corr}` by minimising the TV distance to Logistic(0, 1) (a linear programme).

    Parameters
    ----------
    variance : float
        :math:`C`, in ``(0, pi^2/3)``.
    spacing, max_atom : float
        Candidate atoms ``0, ±spacing, …, ±max_atom``.
    grid_max, grid_points : float, int
        The TV is measured on ``grid_points`` points of ``[0, grid_max]``
        (the problem is symmetric).

    Returns
    -------
    CorrectionDistribution
        Atoms with weight below 1e-12 are dropped.
    """
    c = _check_variance(variance)
    sd = math.sqrt(c)
    mus = np.arange(0.0, max_atom + spacing / 2, spacing)
    grid = np.linspace(0.0, grid_max, grid_points)
    target = stats.logistic.pdf(grid)
    design = 0.5 * (stats.norm.pdf((grid[:, None] - mus) / sd) + stats.norm.pdf((grid[:, None] + mus) / sd)) / sd
    dx = grid[1] - grid[0]
    quad = np.full(grid.size, 2.0 * dx)  # both half-lines
    quad[0] = dx
    k, g = mus.size, grid.size
    # variables (w, u): minimise 0.5 * sum quad * u  s.t.  |design w - target| <= u, sum w = 1, w >= 0
    cost = np.concatenate([np.zeros(k), 0.5 * quad])
    eye = sparse.identity(g, format="csr")
    a_ub = sparse.vstack([sparse.hstack([sparse.csr_matrix(design), -eye]),
                          sparse.hstack([sparse.csr_matrix(-design), -eye])])
    b_ub = np.concatenate([target, -target])
    a_eq = np.concatenate([np.ones(k), np.zeros(g)])[None, :]
    res = optimize.linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=(0, None),
                           method="highs")
    if not res.success:  # pragma: no cover - the LP is always feasible and bounded
        raise RuntimeError(f"fitting the Barker correction failed: {res.message}")
    w = np.clip(res.x[:k], 0.0, None)
    keep = w > 1e-12
    mus, w = mus[keep], w[keep] / w[keep].sum()
    # symmetric atoms: mu = 0 keeps its weight, mu > 0 splits it between ±mu
    atoms = np.concatenate([-mus[::-1][mus[::-1] > 0], mus])
    weights = np.concatenate([0.5 * w[::-1][mus[::-1] > 0], np.where(mus > 0, 0.5 * w, w)])
    return CorrectionDistribution(c, atoms, weights, float(res.fun))


@functools.lru_cache(maxsize=32)
def _cached(variance: float) -> CorrectionDistribution:
    return fit_correction(variance)


def correction_distribution(variance: float = DEFAULT_CORRECTION_VARIANCE) -> CorrectionDistribution:
    """:math:`V_{corr}` for total Gaussian variance ``variance``, fitted once per value and cached."""
    return _cached(_check_variance(variance))
