r"""The seeds' own privacy bounds, as named functions for reports and tests.

These are *not* what the samplers use for their budget (that is the exact /
RDP machinery of :class:`~stan_dp.accounting.Budget`); they reproduce the
published rules so that reports can show what each would allow.

Seed 000: Yıldırım & Ermiş, penalty MCMC for differential privacy.
Seed 003: Räisä, *Differentially Private Markov Chain Monte Carlo* (thesis).

Noise multipliers: ``z = sd / sensitivity``.  In seed 003, Theorems 6–7 use
:math:`\sigma^2 = \tau^2 n^{2\alpha} c^2` (so :math:`z = \tau n^{\alpha}`), while
Theorem 9 uses :math:`\sigma^2 = \tau c^2` (so :math:`z = \sqrt{\tau}`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import special

from . import gaussian
from .validation import (
    check_delta,
    check_int,
    check_real,
    validate_privacy_params,
)

__all__ = [
    "dwork_roth_gaussian_epsilon",
    "advanced_composition_epsilon",
    "YildirimTheorem1",
    "yildirim_theorem1",
    "advanced_composition_gaussian_epsilon",
    "advanced_composition_gaussian_max_count",
    "zcdp_rho",
    "zcdp_epsilon",
    "zcdp_max_count",
    "zcdp_penalty_max_iterations",
    "zcdp_hmc_max_iterations",
    "raisa_theorem7_delta",
    "raisa_theorem7_max_iterations",
    "wbk_rdp_bound",
    "THEOREM8_VARIANCE",
    "barker_max_order",
    "barker_base_rdp_epsilon",
    "barker_rdp_epsilon",
    "barker_epsilon",
    "barker_clip_bound",
    "subsampled_penalty_rdp_epsilon",
    "subsampled_penalty_sensitivity_terms",
    "subsampled_penalty_sensitivity",
]


# ==========================================================================
# Seed 000: Gaussian mechanism (Thm 2), advanced composition (Thm 3), Thm 1
# ==========================================================================
def dwork_roth_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    r"""Per-release epsilon of the classical Gaussian mechanism (seed 000, Thm 2).

    Theorem 2 (Dwork & Roth 2013): for :math:`\varepsilon \in (0, 1)`, noise
    :math:`\sigma > \Delta\sqrt{2\log(1.25/\delta)}/\varepsilon` gives
    :math:`(\varepsilon, \delta)`-DP.  With :math:`\sigma = z\Delta` this is
    every :math:`\varepsilon > \sqrt{2\log(1.25/\delta)}/z`; the infimum is
    returned.

    Parameters
    ----------
    noise_multiplier : float
        ``z = sigma / Delta`` (> 0).
    delta : float
        Per-release delta in (0, 1).

    Returns
    -------
    float
        :math:`\sqrt{2\log(1.25/\delta)}/z`.

    Raises
    ------
    ValueError
        If that value is not below 1 (the theorem does not apply).
    """
    z = check_real(noise_multiplier, "noise_multiplier", positive=True)
    delta = check_delta(delta)
    eps = math.sqrt(2.0 * math.log(1.25 / delta)) / z
    if not eps < 1.0:
        raise ValueError(
            f"Theorem 2 (Gaussian mechanism) needs epsilon < 1, but noise_multiplier={z:g} "
            f"and delta={delta:g} give epsilon={eps:.4g}"
        )
    return eps


def advanced_composition_epsilon(
    epsilon: float, delta: float, k: int, delta_prime: float
) -> tuple[float, float]:
    r"""Advanced composition (seed 000, Theorem 3; Dwork et al. 2010).

    ``k`` adaptively composed :math:`(\varepsilon, \delta)`-DP mechanisms are
    :math:`(\varepsilon', k\delta + \delta')`-DP with
    :math:`\varepsilon' = \sqrt{2k\log(1/\delta')}\,\varepsilon + k\varepsilon(e^{\varepsilon} - 1)`.

    Parameters
    ----------
    epsilon, delta : float
        Per-mechanism parameters (epsilon >= 0, delta in [0, 1)).
    k : int
        Number of mechanisms (>= 0).
    delta_prime : float
        The slack :math:`\delta'` in (0, 1).

    Returns
    -------
    tuple of float
        :math:`(\varepsilon', k\delta + \delta')`.
    """
    e = check_real(epsilon, "epsilon", nonnegative=True)
    d = check_real(delta, "delta", nonnegative=True)
    if not d < 1.0:
        raise ValueError(f"delta must lie in [0, 1), got {d}")
    k = check_int(k, "k")
    dp = check_real(delta_prime, "delta_prime")
    if not 0.0 < dp < 1.0:
        raise ValueError(f"delta_prime must lie in (0, 1), got {dp}")
    eps_total = math.sqrt(2.0 * k * math.log(1.0 / dp)) * e + k * e * math.expm1(e)
    return eps_total, k * d + dp


class YildirimTheorem1(NamedTuple):
    """Result of :func:`yildirim_theorem1`.

    Attributes
    ----------
    k : int
        :math:`k(n) = \\lfloor k_0 n^{2\\alpha}/\\log n \\rfloor` iterations.
    epsilon : float
        Epsilon from the proof's chain (Thms 2 and 3 with
        :math:`e^{\\varepsilon}-1 \\le 2\\varepsilon`) evaluated at ``k``.
    delta : float
        :math:`1.25 k n^{-\\beta'} + n^{-\\beta}` (at most eq. (4)).
    epsilon_as_printed : float
        The epsilon bound of the *last display of the proof* of Theorem 1
        (after substituting :math:`\\delta'_n = n^{-\\beta}` and
        :math:`k(n)`), as printed there:
        :math:`2\\sqrt{k_0\\beta'\\beta}\\,c/\\sigma + 4k_0\\beta' c^2/\\sigma^2`
        with :math:`\\beta' = 2\\alpha+\\beta`.  This is *not* eq. (3) of the
        theorem statement, which prints
        :math:`2\\sqrt{k_0(2\\alpha+\\beta)}\\,\\beta\\,c/\\sigma + 4k_0(2\\alpha+\\beta)c^2/\\sigma^2`
        with :math:`\\beta` outside the square root (the two agree only for
        :math:`\\beta = 1`).
    delta_as_printed : float
        Eq. (4) of the statement (identical to the proof's last display):
        :math:`1.25 k_0 n^{-\\beta}/\\log n + n^{-\\beta}`.
    """

    k: int
    epsilon: float
    delta: float
    epsilon_as_printed: float
    delta_as_printed: float


def yildirim_theorem1(
    n: int, c: float, sigma: float, alpha: float, beta: float, k0: float
) -> YildirimTheorem1:
    r"""Yıldırım & Ermiş, Theorem 1 (seed 000): iterations and (ε, δ) of penalty MCMC.

    Assumption A1: the log-likelihood difference has sensitivity at most
    :math:`c n^{-\alpha}`.  With constant noise variance :math:`\sigma^2`,
    :math:`\beta' = 2\alpha + \beta` and :math:`\delta'_n = n^{-\beta}`, the
    proof makes each iteration :math:`(\varepsilon_0, \delta_0)`-DP by Theorem 2,
    :math:`\varepsilon_0 = \frac{c}{\sigma}n^{-\alpha}\sqrt{2\beta'\log n}`,
    :math:`\delta_0 = 1.25 n^{-\beta'}`, then applies Theorem 3 with
    :math:`e^{\varepsilon_0} - 1 \le 2\varepsilon_0`:

    .. math::

       \varepsilon_{n,k} \le \sqrt{4k\beta'\log n\,\log(1/\delta'_n)}\,\frac{c}{\sigma}n^{-\alpha}
                            + 4k\frac{c^2}{\sigma^2}n^{-2\alpha}\beta'\log n,
       \qquad \delta_{n,k} = 1.25 k n^{-\beta'} + \delta'_n,

    for :math:`k = k(n) = \lfloor k_0 n^{2\alpha}/\log n\rfloor`.

    .. note::
       Substituting :math:`k(n)` and :math:`\log(1/\delta'_n) = \beta\log n`
       into the first term gives :math:`2\sqrt{k_0\beta'\beta\log n}\,c/\sigma`;
       the proof's last display prints :math:`2\sqrt{k_0\beta'\beta}\,c/\sigma`,
       without the :math:`\sqrt{\log n}` factor, which understates epsilon for
       :math:`n > e`.  (The theorem statement, eq. (3), prints yet another
       form, :math:`2\sqrt{k_0(2\alpha+\beta)}\,\beta\,c/\sigma`, with
       :math:`\beta` outside the root.)  ``epsilon`` is therefore the value of
       the proof's chain at the integer ``k``; the proof's last display is kept
       as ``epsilon_as_printed``.

    Parameters
    ----------
    n : int
        Number of rows (>= 2).
    c : float
        Constant of Assumption A1 (sensitivity bound :math:`c n^{-\alpha}`), > 0.
    sigma : float
        Noise standard deviation of the log-likelihood difference, > 0.
    alpha, beta, k0 : float
        The theorem's :math:`\alpha > 0`, :math:`\beta > 0`, :math:`k_0 > 0`.

    Returns
    -------
    YildirimTheorem1

    Raises
    ------
    ValueError
        If an argument is invalid or Theorem 2 does not apply
        (:math:`\varepsilon_0 \ge 1`, i.e. condition (5) fails at this ``n``).
    """
    n = check_int(n, "n", minimum=2)
    c = check_real(c, "c", positive=True)
    sigma = check_real(sigma, "sigma", positive=True)
    alpha = check_real(alpha, "alpha", positive=True)
    beta = check_real(beta, "beta", positive=True)
    k0 = check_real(k0, "k0", positive=True)
    logn = math.log(n)
    beta_p = 2.0 * alpha + beta
    eps0 = (c / sigma) * n ** (-alpha) * math.sqrt(2.0 * beta_p * logn)
    if not eps0 < 1.0:
        raise ValueError(
            "Theorem 1 needs sigma > c n^-alpha sqrt(2 (2 alpha + beta) log n) "
            f"(condition (5)); got per-iteration epsilon {eps0:.4g} >= 1"
        )
    k = int(math.floor(k0 * n ** (2.0 * alpha) / logn))
    eps = math.sqrt(4.0 * k * beta_p * logn * beta * logn) * (c / sigma) * n ** (-alpha) + (
        4.0 * k * (c / sigma) ** 2 * n ** (-2.0 * alpha) * beta_p * logn
    )
    dlt = 1.25 * k * n ** (-beta_p) + n ** (-beta)
    eps_printed = 2.0 * math.sqrt(k0 * beta_p * beta) * c / sigma + 4.0 * k0 * (c / sigma) ** 2 * beta_p
    dlt_printed = 1.25 * k0 * n ** (-beta) / logn + n ** (-beta)
    return YildirimTheorem1(k, eps, dlt, eps_printed, dlt_printed)


_SPLITS = np.concatenate([np.logspace(-8, -1, 1401), np.linspace(0.1, 1 - 1e-8, 1801)[1:]])


def _adv_comp_gauss_eps(z: float, k: int, delta: float) -> float:
    """min over delta splits of Thm 3 applied to Thm 2 mechanisms (inf if none valid)."""
    if k == 0:
        return 0.0
    dprime = _SPLITS * delta
    d0 = (1.0 - _SPLITS) * delta / k
    eps0 = np.sqrt(2.0 * np.log(1.25 / d0)) / z
    eps = np.sqrt(2.0 * k * np.log(1.0 / dprime)) * eps0 + k * eps0 * np.expm1(eps0)
    eps = np.where(eps0 < 1.0, eps, np.inf)
    return float(eps.min())


def advanced_composition_gaussian_epsilon(noise_multiplier: float, count: int, delta: float) -> float:
    r"""Epsilon of ``count`` Gaussian releases by the argument of seed 000, Thm 1.

    Each release is :math:`(\varepsilon_0, \delta_0)`-DP by Theorem 2
    (:func:`dwork_roth_gaussian_epsilon`) and ``count`` of them compose by
    Theorem 3 (:func:`advanced_composition_epsilon`, with the exact
    :math:`e^{\varepsilon_0}-1`).  The total ``delta`` is split as
    :math:`k\delta_0 + \delta'`; the best split on a fine grid is used.

    Returns
    -------
    float
        The epsilon, or ``inf`` if no split makes :math:`\varepsilon_0 < 1`.
    """
    z = check_real(noise_multiplier, "noise_multiplier", positive=True)
    k = check_int(count, "count")
    delta = check_delta(delta)
    return _adv_comp_gauss_eps(z, k, delta)


def advanced_composition_gaussian_max_count(noise_multiplier: float, epsilon: float, delta: float) -> int:
    """Largest count allowed by :func:`advanced_composition_gaussian_epsilon`.

    This is the number of penalty-MCMC iterations that the machinery of
    Yıldırım's Theorem 1 (Theorems 2 + 3 of seed 000) allows at noise
    multiplier ``z`` and total budget ``(epsilon, delta)``.
    """
    z = check_real(noise_multiplier, "noise_multiplier", positive=True)
    epsilon, delta = validate_privacy_params(epsilon, delta)
    if _adv_comp_gauss_eps(z, 1, delta) > epsilon:
        return 0
    lo, hi = 1, 2
    while _adv_comp_gauss_eps(z, hi, delta) <= epsilon:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _adv_comp_gauss_eps(z, mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


# ==========================================================================
# Seed 003: zCDP rule (Thm 1, Thm 6, Section 5.2) and the tight Thm 7
# ==========================================================================
def zcdp_rho(epsilon: float, delta: float) -> float:
    r""":math:`\rho = (\sqrt{\varepsilon - \ln\delta} - \sqrt{-\ln\delta})^2` (seed 003, Thm 6).

    The largest :math:`\rho` whose zCDP→ADP conversion (seed 003, Thm 1,
    :math:`\rho + \sqrt{-4\rho\ln\delta}`) equals ``epsilon``.
    """
    epsilon, delta = validate_privacy_params(epsilon, delta)
    return (math.sqrt(epsilon - math.log(delta)) - math.sqrt(-math.log(delta))) ** 2


def zcdp_epsilon(rho: float, delta: float) -> float:
    r"""zCDP → ADP conversion :math:`\varepsilon = \rho + \sqrt{-4\rho\ln\delta}` (seed 003, Thm 1)."""
    rho = check_real(rho, "rho", nonnegative=True)
    delta = check_delta(delta)
    return rho + math.sqrt(-4.0 * rho * math.log(delta))


def zcdp_max_count(noise_multiplier: float, epsilon: float, delta: float) -> int:
    r"""Releases allowed by the zCDP rule: :math:`\lfloor 2z^2\rho\rfloor`.

    Each Gaussian release is :math:`1/(2z^2)`-zCDP (seed 003, Thm 4(2)) and
    zCDP composes additively (Thm 2(3)).
    """
    z = check_real(noise_multiplier, "noise_multiplier", positive=True)
    return int(math.floor(2.0 * z * z * zcdp_rho(epsilon, delta)))


def zcdp_penalty_max_iterations(epsilon: float, delta: float, tau: float, n: int, alpha: float) -> int:
    r"""Seed 003, Theorem 6: DP penalty may run :math:`k = \lfloor 2\tau^2 n^{2\alpha}\rho\rfloor` iterations.

    With noise variance :math:`\sigma^2 = \tau^2 n^{2\alpha} c^2(\theta, \theta')`
    and :math:`\rho = (\sqrt{\varepsilon - \ln\delta} - \sqrt{-\ln\delta})^2`.

    Parameters
    ----------
    epsilon, delta : float
        Budget (:math:`\varepsilon > 0`, :math:`0 < \delta < 1`).
    tau : float
        :math:`\tau > 0`.
    n : int
        Number of rows (>= 1).
    alpha : float
        :math:`\alpha > 0` (the theorem's exponent, not a Rényi order).
    """
    tau = check_real(tau, "tau", positive=True)
    n = check_int(n, "n", minimum=1)
    alpha = check_real(alpha, "alpha", positive=True)
    return int(math.floor(2.0 * tau * tau * n ** (2.0 * alpha) * zcdp_rho(epsilon, delta)))


def zcdp_hmc_max_iterations(
    epsilon: float, delta: float, tau_l: float, tau_g: float, n: int, L: int
) -> int:
    r"""DP HMC iterations by the zCDP rule (seed 003, Section 5.2).

    :math:`k = \lfloor(\rho - \rho_g)/(\rho_l + L\rho_g)\rfloor` with
    :math:`\rho_g = 1/(2\tau_g^2 n)` (one gradient release) and
    :math:`\rho_l = 1/(2\tau_l^2 n)` (one log-likelihood-ratio release): the
    initial gradient, then per iteration one ratio and ``L`` gradients.
    Equivalently noise multipliers :math:`z_l = \tau_l\sqrt n`,
    :math:`z_g = \tau_g\sqrt n`.  (The thesis writes
    :math:`\sigma_l = 2\tau_l\sqrt{n b_l}\|\theta-\theta'\|`; only
    :math:`\sigma_l = 2\tau_l\sqrt n\, b_l\|\theta-\theta'\|` gives the stated
    :math:`\rho_l`, which is what is used here.)

    Returns
    -------
    int
        ``k`` (0 when fewer than one iteration fits).
    """
    tau_l = check_real(tau_l, "tau_l", positive=True)
    tau_g = check_real(tau_g, "tau_g", positive=True)
    n = check_int(n, "n", minimum=1)
    L = check_int(L, "L")
    rho = zcdp_rho(epsilon, delta)
    rho_g = 1.0 / (2.0 * tau_g**2 * n)
    rho_l = 1.0 / (2.0 * tau_l**2 * n)
    return max(0, int(math.floor((rho - rho_g) / (rho_l + L * rho_g))))


def raisa_theorem7_delta(epsilon: float, k: int, tau: float, n: int, alpha: float) -> float:
    r"""Seed 003, Theorem 7: tight delta(epsilon) of ``k`` DP-penalty iterations.

    .. math::

       \delta(\varepsilon) = \tfrac12\Bigl(\operatorname{erfc}\Bigl(\frac{\varepsilon - k\mu}{2\sqrt{k\mu}}\Bigr)
         - e^{\varepsilon}\operatorname{erfc}\Bigl(\frac{\varepsilon + k\mu}{2\sqrt{k\mu}}\Bigr)\Bigr),
       \qquad \mu = \frac{1}{2\tau^2 n^{2\alpha}}.

    Evaluated in log space (``erfc(x) = 2 Phi(-sqrt(2) x)``) so that
    :math:`e^{\varepsilon}` cannot overflow.
    """
    epsilon = check_real(epsilon, "epsilon", nonnegative=True)
    k = check_int(k, "k")
    tau = check_real(tau, "tau", positive=True)
    n = check_int(n, "n", minimum=1)
    alpha = check_real(alpha, "alpha", positive=True)
    if k == 0:
        return 0.0
    km = k / (2.0 * tau * tau * n ** (2.0 * alpha))
    x1 = (epsilon - km) / (2.0 * math.sqrt(km))
    x2 = (epsilon + km) / (2.0 * math.sqrt(km))
    # 0.5 * erfc(x) = Phi(-sqrt(2) x)
    t1 = float(special.log_ndtr(-math.sqrt(2.0) * x1))
    t2 = epsilon + float(special.log_ndtr(-math.sqrt(2.0) * x2))
    if t2 >= t1:
        return 0.0
    return math.exp(t1) * -math.expm1(t2 - t1)


def raisa_theorem7_max_iterations(epsilon: float, delta: float, tau: float, n: int, alpha: float) -> int:
    r"""Largest ``k`` with :func:`raisa_theorem7_delta` ``<= delta`` (solved numerically).

    Theorem 7's :math:`k\mu` is the PLD mean of ``k`` Gaussian releases with
    multiplier :math:`z = \tau n^{\alpha}`; this equals
    ``gaussian_max_count(tau * n**alpha, epsilon, delta)``.
    """
    epsilon, delta = validate_privacy_params(epsilon, delta)
    tau = check_real(tau, "tau", positive=True)
    n = check_int(n, "n", minimum=1)
    alpha = check_real(alpha, "alpha", positive=True)
    mu = 1.0 / (2.0 * tau * tau * n ** (2.0 * alpha))
    k = int(math.floor(gaussian.max_gaussian_pld_mean(epsilon, delta) / mu))
    while k > 0 and raisa_theorem7_delta(epsilon, k, tau, n, alpha) > delta:
        k -= 1
    while raisa_theorem7_delta(epsilon, k + 1, tau, n, alpha) <= delta:
        k += 1
    return k


# ==========================================================================
# Seed 003: WBK amplification (Thms 8, 9), DP Barker, subsampled penalty
# ==========================================================================
def _check_order(alpha: object) -> int:
    a = check_int(alpha, "alpha", minimum=2)
    return a


def wbk_rdp_bound(alpha: int, q: float, base_rdp: Callable[[int], float]) -> float:
    r"""The subsampled-RDP bound used in seed 003, Theorems 8 and 9 (WBK19, Thm 9).

    .. math::

       \varepsilon(\alpha) = \frac{1}{\alpha-1}\ln\Bigl(1 + q^2\binom{\alpha}{2}
         \min\{4(e^{\varepsilon'(2)}-1), 2e^{\varepsilon'(2)}\}
         + 2\sum_{j=3}^{\alpha} q^j\binom{\alpha}{j} e^{(j-1)\varepsilon'(j)}\Bigr)

    Parameters
    ----------
    alpha : int
        Integer Rényi order >= 2.
    q : float
        Sampling ratio ``|B| / n`` in (0, 1].
    base_rdp : callable
        :math:`j \mapsto \varepsilon'(j)`, the RDP of the mechanism on a batch.

    Returns
    -------
    float
        :math:`\varepsilon(\alpha)` for one iteration.  When
        :math:`\varepsilon'(2) = 0` the :math:`j = 2` term is 0 and the
        formula is evaluated without it.

    Raises
    ------
    ValueError
        If ``alpha`` or ``q`` is invalid or ``base_rdp(2)`` is negative or NaN.
    """
    a = _check_order(alpha)
    q = check_real(q, "q", positive=True)
    if q > 1.0:
        raise ValueError(f"q must be <= 1, got {q}")
    e2 = float(base_rdp(2))
    if not (e2 >= 0.0):
        raise ValueError(f"base_rdp(2) must be a non-negative number, got {e2!r}")
    log_terms = [0.0]
    if e2 > 0.0:
        log_min2 = min(math.log(4.0) + e2 + math.log(-math.expm1(-e2)), math.log(2.0) + e2)
        log_terms.append(2.0 * math.log(q) + math.log(special.comb(a, 2, exact=True)) + log_min2)
    # else: min{4(e^0 - 1), 2 e^0} = 0, so the j = 2 term vanishes
    for j in range(3, a + 1):
        log_terms.append(
            math.log(2.0) + j * math.log(q) + math.log(special.comb(a, j, exact=True))
            + (j - 1) * float(base_rdp(j))
        )
    return float(special.logsumexp(log_terms)) / (a - 1)


THEOREM8_VARIANCE = 2.0
"""The total test-noise variance :math:`C` for which seed 003, Theorem 8 is stated.

The closed forms below default to it.  The sampler's own default
(:data:`stan_dp.samplers.barker_correction.DEFAULT_CORRECTION_VARIANCE`) is
smaller, because at :math:`C = 2` no correction distribution comes within
TV 1e-3 of the logistic."""


def _check_correction_variance(correction_variance: object) -> float:
    c = check_real(correction_variance, "correction_variance", positive=True)
    if not 1.0 < c < math.pi**2 / 3.0:
        raise ValueError(
            "correction_variance C must satisfy 1 < C < pi^2/3 (~3.29): C > 1 because the "
            "clipped batch variance can reach 1 (Theorem 8), C < pi^2/3 because N(0, C) must "
            f"fit inside a standard logistic variable; got {c}"
        )
    return c


def barker_max_order(batch_size: int, correction_variance: float = THEOREM8_VARIANCE) -> int:
    r"""Largest admissible Rényi order :math:`\alpha` with :math:`5\alpha < (C-1)|B|` (1 if none).

    At :math:`C = 2` this is Theorem 8's :math:`\alpha < |B|/5`.
    """
    b = check_int(batch_size, "batch_size", minimum=1)
    c = _check_correction_variance(correction_variance)
    return max(1, math.ceil((c - 1.0) * b / 5.0) - 1)


def barker_base_rdp_epsilon(
    alpha: int, batch_size: int, *, correction_variance: float = THEOREM8_VARIANCE
) -> float:
    r"""Seed 003, Theorem 8: RDP :math:`\varepsilon'(\alpha)` of one DP Barker test on a batch.

    .. math::

       \varepsilon'(\alpha) = \frac{5}{2|B|} + \frac{1}{2(\alpha-1)}\ln\frac{2|B|}{|B|-5\alpha}
         + \frac{2\alpha}{|B|-5\alpha}

    Conditions (enforced): :math:`\alpha \in \mathbb N`, :math:`\alpha \ge 2`,
    :math:`\alpha < |B|/5`.  The per-row log-likelihood ratios must also be
    bounded by :math:`\sqrt{|B|}/n` (see :func:`barker_clip_bound`).

    ``correction_variance`` :math:`C` generalises the theorem (stated for
    :math:`C = 2`) by the same proof: the released value is
    :math:`\lambda + \mathcal N(0, C - \sigma_b^2)` with mean sensitivity
    :math:`2/\sqrt{|B|}`, :math:`\sigma_b^2 \in [0, 1]` and
    :math:`|\Delta\sigma_b^2| \le 5/|B|`, so both variances lie in
    :math:`[C-1, C]` and

    .. math::

       \varepsilon'(\alpha) = \frac{5}{2|B|(C-1)} + \frac{1}{2(\alpha-1)}
         \ln\frac{C|B|}{(C-1)|B|-5\alpha} + \frac{2\alpha}{(C-1)|B|-5\alpha},

    needing :math:`5\alpha < (C-1)|B|`; it equals the formula above at
    :math:`C = 2`.

    Raises
    ------
    ValueError
        If ``alpha``, ``batch_size`` or ``correction_variance`` violate the conditions.
    """
    a = _check_order(alpha)
    b = check_int(batch_size, "batch_size", minimum=1)
    c = _check_correction_variance(correction_variance)
    room = (c - 1.0) * b - 5.0 * a
    if not room > 0:
        raise ValueError(
            f"Theorem 8 needs alpha < |B|/5 (at C=2; (C-1)|B|/5 in general); got alpha={a}, batch_size={b}, "
            f"C={c:g} (batch_size must exceed {5 * a / (c - 1.0):g})"
        )
    return 5.0 / (2.0 * b * (c - 1.0)) + math.log(c * b / room) / (2.0 * (a - 1)) + 2.0 * a / room


def barker_rdp_epsilon(
    alpha: int, batch_size: int, n: int, k: int = 1, *,
    correction_variance: float = THEOREM8_VARIANCE,
) -> float:
    r"""Seed 003, Theorem 8: ``k`` iterations of DP Barker are :math:`(\alpha, k\varepsilon(\alpha))`-RDP.

    :math:`\varepsilon(\alpha)` is :func:`wbk_rdp_bound` with
    :math:`q = |B|/n` and :math:`\varepsilon'` = :func:`barker_base_rdp_epsilon`.

    Parameters
    ----------
    alpha : int
        Integer order, :math:`2 \le \alpha < |B|/5`.
    batch_size : int
        :math:`|B|`, with :math:`5\alpha < |B| \le n`.
    n : int
        Number of rows.
    k : int
        Number of iterations (>= 0).
    correction_variance : float
        :math:`C` (see :func:`barker_base_rdp_epsilon`; 2 is the theorem as stated).

    Returns
    -------
    float
        :math:`k\varepsilon(\alpha)`.

    Raises
    ------
    ValueError
        If the conditions of Theorem 8 are violated.
    """
    a = _check_order(alpha)
    b = check_int(batch_size, "batch_size", minimum=1)
    n = check_int(n, "n", minimum=1)
    k = check_int(k, "k")
    if b > n:
        raise ValueError(f"batch_size must be <= n, got batch_size={b}, n={n}")
    c = correction_variance
    barker_base_rdp_epsilon(a, b, correction_variance=c)  # validates alpha < (C-1)|B|/5
    return k * wbk_rdp_bound(a, b / n, lambda j: barker_base_rdp_epsilon(j, b, correction_variance=c))


def barker_epsilon(
    k: int, delta: float, batch_size: int, n: int, *,
    correction_variance: float = THEOREM8_VARIANCE,
) -> float:
    r"""ADP epsilon of ``k`` DP Barker iterations (seed 003, Thm 8 + Thm 1).

    Minimises :math:`k\varepsilon(\alpha) - \ln\delta/(\alpha-1)` over the
    admissible integer orders :math:`2 \le \alpha < (C-1)|B|/5` (at most 256).

    Returns 0 for ``k = 0`` (no data is accessed).

    Raises
    ------
    ValueError
        If no order is admissible (``batch_size <= 10`` at ``C = 2``) and ``k > 0``.
    """
    k = check_int(k, "k")
    delta = check_delta(delta)
    b = check_int(batch_size, "batch_size", minimum=1)
    n = check_int(n, "n", minimum=1)
    c = _check_correction_variance(correction_variance)
    if b > n:
        raise ValueError(f"batch_size must be <= n, got batch_size={b}, n={n}")
    if k == 0:
        return 0.0
    top = barker_max_order(b, c)
    if top < 2:
        raise ValueError(
            f"Theorem 8 needs batch_size > {10 / (c - 1.0):g} for any admissible order "
            f"(C={c:g}), got {b}"
        )
    orders = range(2, min(top, 257) + 1)
    return min(barker_rdp_epsilon(a, b, n, k, correction_variance=c) - math.log(delta) / (a - 1)
               for a in orders)


def barker_clip_bound(batch_size: int, n: int, n0: float | None = None) -> float:
    r"""Bound on per-row log-likelihood ratios required by Theorem 8 (seed 003).

    :math:`\sqrt{|B|}/n` without tempering, :math:`\sqrt{|B|}/n_0` with the
    tempered likelihood :math:`T = n_0/n`.
    """
    b = check_int(batch_size, "batch_size", minimum=1)
    n = check_int(n, "n", minimum=1)
    denom = float(n) if n0 is None else check_real(n0, "n0", positive=True)
    return math.sqrt(b) / denom


def subsampled_penalty_rdp_epsilon(alpha: int, tau: float, batch_size: int, n: int, k: int = 1) -> float:
    r"""Seed 003, Theorem 9: ``k`` subsampled-penalty iterations are :math:`(\alpha, k\varepsilon(\alpha))`-RDP.

    :math:`\varepsilon(\alpha)` is :func:`wbk_rdp_bound` with :math:`q = |B|/n`
    and :math:`\varepsilon'(\alpha) = \alpha/(2\tau)`, for noise variance
    :math:`\sigma^2 = \tau c^2` (so noise multiplier :math:`\sqrt\tau`).
    """
    a = _check_order(alpha)
    tau = check_real(tau, "tau", positive=True)
    b = check_int(batch_size, "batch_size", minimum=1)
    n = check_int(n, "n", minimum=1)
    k = check_int(k, "k")
    if b > n:
        raise ValueError(f"batch_size must be <= n, got batch_size={b}, n={n}")
    return k * wbk_rdp_bound(a, b / n, lambda j: j / (2.0 * tau))


def subsampled_penalty_sensitivity_terms(
    n: int, batch_size: int, T: float, L: float, theta_distance: float
) -> tuple[float, float]:
    r"""The two sensitivity terms of seed 003, Theorem 9 (with Lemma 1).

    With :math:`b = |B|` and :math:`h = \|\theta - \theta'\|_2`, under the
    bound :math:`|r_j| \le L h` on per-row log-likelihood ratios (replace-one
    neighbours):

    .. math::

       \Delta_\lambda = \frac{2nTL}{b}h, \qquad
       \Delta_\sigma = \Bigl(\frac{nT}{b}\Bigr)^2\Bigl|1 - \frac1b\Bigr| L^2h^2
                     + \frac{2(b-1)}{b}\Bigl(\frac{nT}{b}\Bigr)^2 L^2h^2 .

    :math:`\Delta_\lambda` bounds the sensitivity of :math:`\lambda^*` and
    :math:`\Delta_\sigma` that of :math:`\frac12\sigma_b^2` (Lemma 1).
    (Re-deriving Lemma 1 gives the slightly smaller
    :math:`(nT/b)^2[\frac12(1-\frac1b) + \frac{2(b-1)}{b}]L^2h^2`; the
    stated, larger bound is returned, so it is safe.)

    Returns
    -------
    tuple of float
        :math:`(\Delta_\lambda, \Delta_\sigma)`.
    """
    n = check_int(n, "n", minimum=1)
    b = check_int(batch_size, "batch_size", minimum=1)
    if b > n:
        raise ValueError(f"batch_size must be <= n, got batch_size={b}, n={n}")
    T = check_real(T, "T", positive=True)
    L = check_real(L, "L", nonnegative=True)
    h = check_real(theta_distance, "theta_distance", nonnegative=True)
    d_lambda = 2.0 * n * T * L * h / b
    s = (n * T / b) ** 2 * L * L * h * h
    d_sigma = s * abs(1.0 - 1.0 / b) + 2.0 * (b - 1) / b * s
    return d_lambda, d_sigma


def subsampled_penalty_sensitivity(
    n: int, batch_size: int, T: float, L: float, theta_distance: float
) -> float:
    r"""Sensitivity :math:`c(\theta,\theta') = \Delta_\lambda + \Delta_\sigma` of
    :math:`\lambda^* - \frac12\sigma_b^2` (seed 003, Lemma 1 and Theorem 9).

    Parameters
    ----------
    n : int
        Number of rows.
    batch_size : int
        :math:`b = |B|`.
    T : float
        Tempering factor (1 for none).
    L : float
        Per-row bound: :math:`|r_j| \le L\|\theta-\theta'\|_2`.
    theta_distance : float
        :math:`\|\theta - \theta'\|_2`.

    Returns
    -------
    float
        :math:`c(\theta, \theta')`, a replace-one sensitivity of the batch-level
        release; the subsampled penalty adds noise with sd ``z * c``.
    """
    d_lambda, d_sigma = subsampled_penalty_sensitivity_terms(n, batch_size, T, L, theta_distance)
    return d_lambda + d_sigma
