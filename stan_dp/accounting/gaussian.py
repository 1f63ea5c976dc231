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
for the smallest noise multiplier.

Numerics
--------
Written with the scaled complementary error function
:math:`g = \operatorname{erfcx}`, :math:`u_\mp = (\varepsilon \mp M)/(2\sqrt M)`,
the formula is :math:`\delta = \tfrac12 e^{-u_-^2}\,(g(u_-) - g(u_+))`: the
:math:`e^{\varepsilon}` factor cancels analytically, and for a narrow interval
:math:`u_+ - u_- = \sqrt M` the difference is integrated
(:math:`-g'(t) = 2/\sqrt\pi - 2t\,g(t)`) instead of subtracted.  This
double-precision form is used to *search*; every value that is *returned*
(an epsilon, a maximal PLD mean, a delta) is then checked with ``mpmath`` at
adaptive precision (at least 30 digits, more when the two terms of the
formula nearly cancel), and moved to the safe side until the high-precision
:math:`\delta` is within the target.  The check is made at a PLD mean inflated
by 4 ulps, which covers the rounding of :math:`M = \sum c_i/(2z_i^2)` itself.
Results are therefore never optimistic; they are conservative by at most
about :math:`10^{-13}` relative (a few hundred ulps at worst, usually a few).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence

import mpmath
import numpy as np
from scipy import optimize, special

from .validation import (
    as_sequence,
    largest_fitting,
    smallest_fitting_scale,
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
_LN2 = math.log(2.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
# 8-point Gauss-Legendre rule on [-1, 1]
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)
#: relative inflation of M for the high-precision checks (4 ulps): covers the
#: rounding of M = sum c / (2 z^2) in double precision.
_MU_SAFETY = 4.0 * 2.0**-53
#: the double-precision searches aim this far (in log delta) inside the target,
#: so the high-precision check normally passes at the first try.
_LOG_SEARCH_MARGIN = 2e-13


def _log_delta(epsilon: float, mu: float) -> float:
    """log of delta(epsilon) for the PLD N(mu, 2 mu) in double precision.

    -inf when delta is 0 (or below double resolution).  Cancellation-free: see
    the module notes.  Used for searching only; returned values are checked
    with :func:`_delta_mp`.
    """
    if mu <= 0.0:
        return -math.inf
    r = math.sqrt(mu)
    u_lo = (epsilon - mu) / (2.0 * r)
    if u_lo < -5.0:
        # epsilon far below the mean: delta is not small, no cancellation issue.
        s = math.sqrt(2.0 * mu)
        la = float(special.log_ndtr((mu - epsilon) / s))
        lb = float(special.log_ndtr((-mu - epsilon) / s))
        x = epsilon + lb - la
        if x >= 0.0:
            return -math.inf
        return la + math.log(-math.expm1(x))
    h = r  # u_hi - u_lo = sqrt(mu) exactly (not computed as a difference)
    u_hi = u_lo + h
    if h < 0.25 and h * max(1.0, abs(u_lo)) < 0.5:
        # g(u_lo) - g(u_hi) = integral of -g'(t) = 2/sqrt(pi) - 2 t g(t) > 0
        t = u_lo + 0.5 * h * (1.0 + _GL_X)
        dg = _TWO_OVER_SQRT_PI - 2.0 * t * special.erfcx(t)
        diff = 0.5 * h * float(np.dot(_GL_W, dg))
    else:
        diff = float(special.erfcx(u_lo)) - float(special.erfcx(u_hi))
    if not diff > 0.0:
        return -math.inf
    return -u_lo * u_lo - _LN2 + math.log(diff)


_MP = mpmath.mp.clone()
_MP_LOCK = threading.Lock()


def _delta_mp_locked(epsilon: object, mu: float, inflate: bool) -> tuple[object, object]:
    # caller holds _MP_LOCK; ``epsilon`` is a float or an mpf of _MP
    ctx = _MP
    dps = 30
    while True:
        ctx.dps = dps
        e = ctx.mpf(epsilon)
        m = ctx.mpf(mu)
        if inflate:
            m = m * (1 + ctx.mpf(_MU_SAFETY))
        s = 2 * ctx.sqrt(m)
        t1 = ctx.erfc((e - m) / s) / 2
        t2 = ctx.exp(e) * ctx.erfc((e + m) / s) / 2
        d = t1 - t2
        resolution = t1 * ctx.mpf(10) ** (15 - dps)
        if d > resolution:
            return d, t2
        if dps >= 960:
            return max(d, 2 * resolution), t2
        dps *= 2


def _delta_mp(epsilon: float, mu: float, inflate: bool = True) -> tuple[object, object]:
    """delta(epsilon; M) and its slope -d delta/d epsilon = e^eps Phi(b), in mpmath.

    ``M`` is ``mu`` inflated by :data:`_MU_SAFETY` when ``inflate``.  The
    precision starts at 30 digits and is raised until the difference of the
    two terms has at least 15 significant digits (if it never does, an upper
    bound is returned).
    """
    with _MP_LOCK:
        return _delta_mp_locked(epsilon, mu, inflate)


def _newton_root_mp(eps: float, mu: float, delta: float) -> object:
    """High-precision root of delta(.; M) = delta, started at ``eps``.

    delta is convex and decreasing in epsilon, so every Newton iterate after
    the first lies at or below the root; the result is a lower estimate
    accurate far beyond double precision.
    """
    with _MP_LOCK:
        x = _MP.mpf(eps)
        for _ in range(60):
            d, slope = _delta_mp_locked(x, mu, True)
            if not slope > 0:  # pragma: no cover - defensive
                break
            step = (d - delta) / slope
            x = x + step
            if abs(step) <= abs(x) * _MP.mpf(10) ** -25:
                break
        return x


def _delta_ok(epsilon: float, mu: float, delta: float) -> bool:
    """High-precision check that delta(epsilon; M) <= delta (M inflated)."""
    if mu <= 0.0:
        return True
    return _delta_mp(epsilon, mu)[0] <= delta


def _mp_to_float_up(x: mpmath.mpf) -> float:
    """Smallest double >= x (x >= 0)."""
    f = float(x)
    if f < x:
        f = math.nextafter(f, math.inf)
    return f


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
        is 0), evaluated in high precision and rounded up (never below the
        exact value).
    """
    epsilon = check_real(epsilon, "epsilon", nonnegative=True)
    mu = check_real(mu, "mu", nonnegative=True)
    return _delta_upper(epsilon, mu)


def _delta_upper(epsilon: float, mu: float) -> float:
    """delta(epsilon; mu) evaluated in high precision, rounded up to a double."""
    if mu <= 0.0:
        return 0.0
    return min(1.0, _mp_to_float_up(_delta_mp(epsilon, mu)[0]))


@functools.lru_cache(maxsize=8192)
def _epsilon_for_mu(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 with delta(epsilon; mu) <= delta, rounded up.

    The root is searched in double precision slightly inside the target and
    then verified with :func:`_delta_mp`; if the verification fails, it is
    refined by Newton's method in high precision (delta is convex and
    decreasing in epsilon, so the iterates approach the root from below) and
    rounded up until the check passes.  Deterministic, hence cached.
    """
    if mu <= 0.0:
        return 0.0
    log_target = math.log(delta) - _LOG_SEARCH_MARGIN
    mu_search = mu * (1.0 + 2.0 * _MU_SAFETY)

    def g(e: float) -> float:
        return _log_delta(e, mu_search) - log_target

    if g(0.0) <= 0.0 and _delta_ok(0.0, mu, delta):
        return 0.0
    # mu-zCDP => (mu + 2 sqrt(mu log(1/delta)), delta)-DP: a valid upper bracket.
    hi = mu + 2.0 * math.sqrt(mu * -log_target)
    hi = max(hi, 1e-300)
    while g(hi) > 0.0:  # only for round-off; never loops in exact arithmetic
        hi *= 2.0
    if g(0.0) <= 0.0:
        eps = 0.0
    else:
        eps = optimize.brentq(g, 0.0, hi, xtol=1e-15, rtol=1e-15, maxiter=500)
        eps = min(max(eps, 0.0), hi)
        for _ in range(_MAX_NUDGES):
            if g(eps) <= 0.0:
                break
            eps = math.nextafter(eps * (1.0 + 4e-16), math.inf)
    # high-precision verification (and repair)
    d, slope = _delta_mp(eps, mu)
    if d <= delta:
        # convexity: the root lies in [eps - gap, eps]
        gap = (delta - d) / slope if slope > 0 else 0.0
        if gap <= eps * 1e-13:
            return eps
        tighter = _round_up_to_valid(_mp_to_float_up(_newton_root_mp(eps, mu, delta)), mu, delta)
        return min(eps, tighter)
    return _round_up_to_valid(_mp_to_float_up(_newton_root_mp(eps, mu, delta)), mu, delta)


def _round_up_to_valid(eps: float, mu: float, delta: float) -> float:
    """Smallest-step increase of ``eps`` until the high-precision check passes."""
    step_ulps = 1.0
    for _ in range(2000):
        if _delta_ok(eps, mu, delta):
            return eps
        eps = math.nextafter(eps + eps * 2.0**-53 * step_ulps, math.inf)
        step_ulps *= 2.0
    raise RuntimeError("epsilon search failed to converge")  # pragma: no cover


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
    """Largest PLD mean M with delta(epsilon; M) <= delta (rounded down).

    Searched in double precision slightly inside the target, then verified
    (and, if needed, decreased) with the high-precision check.
    """
    log_target = math.log(delta) - _LOG_SEARCH_MARGIN

    def h(log_mu: float) -> float:
        return _log_delta(epsilon, math.exp(log_mu) * (1.0 + 2.0 * _MU_SAFETY)) - log_target

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
            break
        r = math.nextafter(r, -math.inf) - 1e-15
    else:  # pragma: no cover - defensive
        r = lo
    m = math.exp(r)
    step_ulps = 1.0
    for _ in range(2000):
        if _delta_ok(epsilon, m, delta):
            return m
        m = math.nextafter(m - m * 2.0**-53 * step_ulps, 0.0)
        step_ulps *= 2.0
    raise RuntimeError("PLD-mean search failed to converge")  # pragma: no cover


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
    return _pld_mean(zs, cs)


def _pld_mean(zs: Sequence[float], cs: Sequence[int]) -> float:
    """The one arithmetic for M used by every public function of this module."""
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
        :math:`\\delta(\\varepsilon)` (seed 003, Theorem 4(3)), evaluated in
        high precision and rounded up (never below the exact value).
    """
    mu = gaussian_pld_mean(noise_multiplier, count)
    epsilon = check_real(epsilon, "epsilon", nonnegative=True)
    return _delta_upper(epsilon, mu)


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

    def fits(k: int) -> bool:
        # exactly the arithmetic of gaussian_epsilon(z, k, delta)
        return _epsilon_for_mu(_pld_mean([z], [k]), delta) <= epsilon

    guess = _max_mu(epsilon, delta) * (2.0 * z * z)
    k0 = int(min(math.floor(guess), float(2**62))) if math.isfinite(guess) else 2**62
    return largest_fitting(fits, k0)


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

    def fits(z: float) -> bool:
        # exactly the arithmetic of gaussian_epsilon(z, count, delta)
        return _epsilon_for_mu(_pld_mean([z], [count]), delta) <= epsilon

    z = math.sqrt(count / (2.0 * _max_mu(epsilon, delta)))
    return smallest_fitting_scale(fits, z)
