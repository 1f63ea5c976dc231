r"""Exact accounting for adaptive compositions of Gaussian mechanisms.

Units
-----
Every noise multiplier is ``z = noise sd / sensitivity``, where the sensitivity
is the one the sampler actually has under its neighbouring relation (see
:func:`~stan_dp.accounting.sensitivity_factor`).  In these units the accounting
does not depend on the relation.

The closed form
---------------
A Gaussian mechanism with sensitivity :math:`\Delta` and noise sd
:math:`\sigma = z\Delta` has privacy-loss distribution (PLD)
:math:`\mathcal N(\mu, 2\mu)` with :math:`\mu = \Delta^2/(2\sigma^2) = 1/(2z^2)`
(seed 003, Section 5.2, after Sommer et al. 2019, Lemma 11).  The PLD of an
adaptive composition is the convolution of the PLDs, so ``count_i`` releases
with multipliers ``z_i`` have PLD :math:`\mathcal N(M, 2M)` with

.. math:: M = \sum_i \frac{\mathrm{count}_i}{2 z_i^2},

and the composition is :math:`(\varepsilon, \delta(\varepsilon))`-DP with
(seed 003, Theorem 4(3), written for a general :math:`M`)

.. math::

   \delta(\varepsilon) = \tfrac12\Bigl(
       \operatorname{erfc}\Bigl(\frac{\varepsilon - M}{2\sqrt M}\Bigr)
       - e^{\varepsilon}\operatorname{erfc}\Bigl(\frac{\varepsilon + M}{2\sqrt M}\Bigr)
   \Bigr)
   = \Phi\Bigl(\frac{M-\varepsilon}{\sqrt{2M}}\Bigr)
     - e^{\varepsilon}\Phi\Bigl(\frac{-M-\varepsilon}{\sqrt{2M}}\Bigr).

This is tight: no smaller :math:`\delta` holds for that :math:`\varepsilon`.
The functions below solve it for :math:`\varepsilon`, for the largest count, or
for the smallest noise multiplier.  Every root is bracketed and the bracket end
on the safe side is returned and re-checked against the formula, so results are
never optimistic (at most a few ulps conservative).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy import optimize, special

from .validation import (
    as_sequence,
    check_delta,
    check_int,
    check_real,
    validate_privacy_params,
)

__all__ = [
    "gaussian_pld_mean",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_max_count",
    "calibrate_gaussian_noise",
    "max_gaussian_pld_mean",
    "delta_for_pld_mean",
    "epsilon_for_pld_mean",
]

_MAX_NUDGES = 200


# --------------------------------------------------------------------------
# closed form in terms of the PLD mean M
# --------------------------------------------------------------------------
def _log_delta(epsilon: float, mu: float) -> float:
    """log of delta(epsilon) for the PLD N(mu, 2 mu); -inf when delta is 0."""
    if mu <= 0.0:
        return -math.inf
    s = math.sqrt(2.0 * mu)
    la = float(special.log_ndtr((mu - epsilon) / s))
    lb = float(special.log_ndtr((-mu - epsilon) / s))
    x = epsilon + lb - la  # log of the ratio of the two terms, < 0 in exact math
    if x >= 0.0:
        return -math.inf
    return la + math.log(-math.expm1(x))


def delta_for_pld_mean(epsilon: float, mu: float) -> float:
    """Tight delta(epsilon) of a Gaussian composition with PLD mean ``mu``.

    Parameters
    ----------
    epsilon : float
        Non-negative epsilon.
    mu : float
        PLD mean :math:`M = \\sum \\mathrm{count}/(2z^2)`, non-negative.

    Returns
    -------
    float
        :math:`\\delta(\\varepsilon)` of seed 003, Theorem 4(3) (0 when ``mu``
        is 0).
    """
    epsilon = check_real(epsilon, "epsilon", nonnegative=True)
    mu = check_real(mu, "mu", nonnegative=True)
    return math.exp(_log_delta(epsilon, mu))


def _epsilon_for_mu(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 with delta(epsilon; mu) <= delta (upper-rounded)."""
    if mu <= 0.0:
        return 0.0
    log_target = math.log(delta)

    def g(e: float) -> float:
        return _log_delta(e, mu) - log_target

    if g(0.0) <= 0.0:
        return 0.0
    # mu-zCDP => (mu + 2 sqrt(mu log(1/delta)), delta)-DP: a valid upper bracket.
    hi = mu + 2.0 * math.sqrt(mu * -log_target)
    hi = max(hi, 1e-300)
    while g(hi) > 0.0:  # only for round-off; never loops in exact arithmetic
        hi *= 2.0
    eps = optimize.brentq(g, 0.0, hi, xtol=1e-15, rtol=1e-15, maxiter=500)
    eps = min(max(eps, 0.0), hi)
    for _ in range(_MAX_NUDGES):
        if g(eps) <= 0.0:
            return eps
        eps = eps * (1.0 + 4e-16) + 1e-300
        eps = math.nextafter(eps, math.inf)
    return hi


def epsilon_for_pld_mean(mu: float, delta: float) -> float:
    """Tight epsilon(delta) of a Gaussian composition with PLD mean ``mu``.

    Parameters
    ----------
    mu : float
        PLD mean :math:`M \\ge 0`.
    delta : float
        Target delta in (0, 1).

    Returns
    -------
    float
        The smallest :math:`\\varepsilon \\ge 0` with
        :math:`\\delta(\\varepsilon) \\le` ``delta`` (rounded up).
    """
    mu = check_real(mu, "mu", nonnegative=True)
    delta = check_delta(delta)
    return _epsilon_for_mu(mu, delta)


def _fits_mu(mu: float, epsilon: float, delta: float) -> bool:
    """Whether PLD mean ``mu`` fits: decided by the same epsilon that is reported."""
    return _epsilon_for_mu(mu, delta) <= epsilon


def _max_mu(epsilon: float, delta: float) -> float:
    """Largest PLD mean M with delta(epsilon; M) <= delta (rounded down)."""
    log_target = math.log(delta)

    def h(log_mu: float) -> float:
        return _log_delta(epsilon, math.exp(log_mu)) - log_target

    big_l = -log_target
    # rho-zCDP with this rho converts exactly to (epsilon, delta) (seed 003,
    # Thm 1), and the Gaussian PLD N(M, 2M) is M-zCDP: a valid lower bracket.
    rho = (math.sqrt(epsilon + big_l) - math.sqrt(big_l)) ** 2
    lo = math.log(rho)
    while h(lo) > 0.0:  # round-off guard
        lo -= 1e-3
    hi = lo + math.log(2.0)
    while h(hi) <= 0.0:
        lo = hi
        hi += math.log(2.0)
    r = optimize.brentq(h, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=500)
    r = max(min(r, hi), lo)
    for _ in range(_MAX_NUDGES):
        if h(r) <= 0.0:
            return math.exp(r)
        r = math.nextafter(r, -math.inf) - 1e-15
    return math.exp(lo)


def max_gaussian_pld_mean(epsilon: float, delta: float) -> float:
    """Largest total PLD mean :math:`M` that fits ``(epsilon, delta)``.

    Any set of Gaussian releases with :math:`\\sum \\mathrm{count}/(2z^2) \\le M`
    is ``(epsilon, delta)``-DP; a larger sum is not (tight).

    Parameters
    ----------
    epsilon : float
        Budget epsilon > 0.
    delta : float
        Budget delta in (0, 1).

    Returns
    -------
    float
        :math:`M^*` (rounded down).
    """
    epsilon, delta = validate_privacy_params(epsilon, delta)
    return _max_mu(epsilon, delta)


# --------------------------------------------------------------------------
# noise multipliers and counts
# --------------------------------------------------------------------------
def _pairs(
    noise_multiplier: float | Sequence[float], count: int | Sequence[int]
) -> tuple[list[float], list[int]]:
    zs = as_sequence(noise_multiplier, "noise_multiplier")
    cs = as_sequence(count, "count")
    if zs is None and cs is None:
        zl: list[object] = [noise_multiplier]
        cl: list[object] = [count]
    elif zs is None:
        assert cs is not None
        zl, cl = [noise_multiplier] * len(cs), cs
    elif cs is None:
        zl, cl = zs, [count] * len(zs)
    else:
        if len(zs) != len(cs):
            raise ValueError(
                "noise_multiplier and count must have the same length, got "
                f"{len(zs)} and {len(cs)}"
            )
        zl, cl = zs, cs
    z_out = [check_real(z, "noise_multiplier", positive=True) for z in zl]
    c_out = [check_int(c, "count") for c in cl]
    return z_out, c_out


def gaussian_pld_mean(
    noise_multiplier: float | Sequence[float], count: int | Sequence[int] = 1
) -> float:
    """PLD mean :math:`M = \\sum_i \\mathrm{count}_i / (2 z_i^2)`.

    Parameters
    ----------
    noise_multiplier : float or sequence of float
        ``z_i = sd_i / sensitivity_i`` (> 0).
    count : int or sequence of int
        Number of releases with each multiplier (>= 0).

    Returns
    -------
    float
        :math:`M`; the composition's PLD is :math:`\\mathcal N(M, 2M)`.
    """
    zs, cs = _pairs(noise_multiplier, count)
    return float(sum(c / (2.0 * z * z) for z, c in zip(zs, cs)))


def gaussian_delta(
    noise_multiplier: float | Sequence[float],
    count: int | Sequence[int],
    epsilon: float,
) -> float:
    """Tight delta of composed Gaussian mechanisms at a given epsilon.

    Parameters
    ----------
    noise_multiplier : float or sequence of float
        ``z_i = sd_i / sensitivity_i``.
    count : int or sequence of int
        Releases per multiplier.
    epsilon : float
        Epsilon >= 0.

    Returns
    -------
    float
        :math:`\\delta(\\varepsilon)` (seed 003, Theorem 4(3)).
    """
    mu = gaussian_pld_mean(noise_multiplier, count)
    epsilon = check_real(epsilon, "epsilon", nonnegative=True)
    return math.exp(_log_delta(epsilon, mu))


def gaussian_epsilon(
    noise_multiplier: float | Sequence[float],
    count: int | Sequence[int],
    delta: float,
) -> float:
    """Tight epsilon of an adaptive composition of Gaussian mechanisms.

    Parameters
    ----------
    noise_multiplier : float or sequence of float
        ``z = noise sd / sensitivity`` (> 0).  A sequence describes a mix of
        mechanisms, e.g. DP HMC's log-ratio and gradient releases.
    count : int or sequence of int
        Number of releases (>= 0) for each multiplier; a scalar is broadcast.
    delta : float
        Target delta in (0, 1).

    Returns
    -------
    float
        The smallest epsilon with :math:`\\delta(\\varepsilon) \\le` ``delta``
        for the PLD :math:`\\mathcal N(M, 2M)`, :math:`M=\\sum c_i/(2z_i^2)`
        (exact; rounded up in the last bits).

    Examples
    --------
    >>> round(gaussian_epsilon(1.0, 1, 1e-5), 4)
    4.3772
    """
    mu = gaussian_pld_mean(noise_multiplier, count)
    delta = check_delta(delta)
    return _epsilon_for_mu(mu, delta)


def gaussian_max_count(noise_multiplier: float, epsilon: float, delta: float) -> int:
    """Largest number of Gaussian releases with multiplier ``z`` that fits.

    Parameters
    ----------
    noise_multiplier : float
        ``z = noise sd / sensitivity`` (> 0).
    epsilon, delta : float
        The budget.

    Returns
    -------
    int
        The largest ``k >= 0`` with ``gaussian_epsilon(z, k, delta) <= epsilon``
        (0 when not even one release fits).
    """
    z = check_real(noise_multiplier, "noise_multiplier", positive=True)
    epsilon, delta = validate_privacy_params(epsilon, delta)
    mu1 = 1.0 / (2.0 * z * z)

    def fits(k: int) -> bool:
        return _fits_mu(k * mu1, epsilon, delta)

    k = int(math.floor(_max_mu(epsilon, delta) / mu1))
    while k > 0 and not fits(k):
        k -= 1
    while fits(k + 1):
        k += 1
    return k


def calibrate_gaussian_noise(count: int, epsilon: float, delta: float) -> float:
    """Smallest noise multiplier for which ``count`` Gaussian releases fit.

    Parameters
    ----------
    count : int
        Number of releases (>= 1).
    epsilon, delta : float
        The budget.

    Returns
    -------
    float
        ``z = sqrt(count / (2 M*))`` with :math:`M^*` from
        :func:`max_gaussian_pld_mean`, rounded up so that
        ``gaussian_epsilon(z, count, delta) <= epsilon``.
    """
    count = check_int(count, "count", minimum=1)
    epsilon, delta = validate_privacy_params(epsilon, delta)
    z = math.sqrt(count / (2.0 * _max_mu(epsilon, delta)))
    for _ in range(_MAX_NUDGES):
        if _fits_mu(count / (2.0 * z * z), epsilon, delta):
            return z
        z = math.nextafter(z, math.inf) * (1.0 + 1e-15)
    raise RuntimeError("calibration failed to converge")  # pragma: no cover
