r"""Privacy noise for publishable runs: OS entropy and exact integer samplers.

A run with ``seed=None`` draws every piece of privacy randomness from a
:class:`SecureNoise` stream (see :func:`stan_dp.mechanisms.chain_streams`):

* the random bits come from the operating system's CSPRNG
  (:class:`random.SystemRandom`, i.e. ``os.urandom``);
* Gaussian (resp. Laplace) noise is *discrete* Gaussian (resp. discrete
  Laplace) noise on a fine power-of-two grid :math:`\gamma\mathbb Z`, drawn with
  the exact samplers of Canonne, Kamath & Steinke (2020, Algorithms 1-3):
  integer and rational arithmetic only, no floating point anywhere in the
  sampling, so the floating-point attacks of Mironov (2012) have nothing to
  work with;
* the released value is rounded to the grid *before* the noise is added, so
  the output carries no low-order bits of the raw value;
* uniform integers (minibatch indices) are exact (rejection sampling on
  random bits) and uniform reals have 53-bit resolution.

The grid and its accounting are explained in ``docs/noise.md``;
:func:`grid_delta_bound` is the closed form of the extra ``delta``.

Samplers take any ``source`` with ``randrange(n)`` returning an exactly
uniform integer in ``[0, n)`` (and ``randbytes(k)`` for the vectorised integer
draws): :class:`random.SystemRandom` in production, a seeded
:class:`random.Random` in the distribution tests (the algorithms are
exact whatever the bits; only their secrecy needs the OS).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

__all__ = [
    "GRID_BITS",
    "RandomSource",
    "SecureNoise",
    "bernoulli",
    "bernoulli_exp",
    "discrete_laplace",
    "discrete_gaussian",
    "default_grid_exponent",
    "rounding_tv_bound",
    "grid_delta_bound",
    "laplace_grid_scale",
]

GRID_BITS = 52
r"""The grid spacing is :math:`\gamma = 2^{\lfloor \log_2 sd\rfloor - 52} \le sd \cdot 2^{-52}`.

The discrete noise then has an sd of at least :math:`2^{52}` grid units, and
the rounding of the released value moves it by at most :math:`2^{-53}` noise
sds (see ``docs/noise.md``)."""


class RandomSource(Protocol):
    """What the exact samplers need: an exactly uniform integer in ``[0, n)``."""

    def randrange(self, n: int) -> int:  # pragma: no cover - protocol
        ...


def bernoulli(num: int, den: int, source: RandomSource) -> bool:
    """Exact Bernoulli(``num / den``) for integers ``0 <= num <= den``, ``den > 0``."""
    return source.randrange(den) < num


def _bernoulli_exp_small(num: int, den: int, source: RandomSource) -> bool:
    """Bernoulli(exp(-num/den)) for ``0 <= num/den <= 1`` (CKS 2020, Algorithm 1, first case)."""
    k = 1
    while bernoulli(num, den * k, source):
        k += 1
    return k % 2 == 1


def bernoulli_exp(num: int, den: int, source: RandomSource) -> bool:
    """Exact Bernoulli(exp(-num/den)) for a rational ``num/den >= 0`` (CKS 2020, Algorithm 1).

    Parameters
    ----------
    num, den : int
        ``num >= 0``, ``den > 0``.
    source : RandomSource
        Random integers.

    Returns
    -------
    bool
        ``True`` with probability exactly ``exp(-num/den)``.
    """
    if num < 0 or den <= 0:
        raise ValueError(f"bernoulli_exp needs num >= 0 and den > 0, got {num}/{den}")
    whole, rest = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_small(1, 1, source):
            return False
    return _bernoulli_exp_small(rest, den, source)


def discrete_laplace(scale_num: int, scale_den: int, source: RandomSource) -> int:
    """Exact discrete Laplace: ``P(z) ∝ exp(-|z| scale_den / scale_num)`` on the integers.

    CKS 2020, Algorithm 2 with ``t = scale_num``, ``s = scale_den`` (scale
    ``t/s``): a geometric ``X`` with ``P(X = x) ∝ exp(-x/t)`` is built from a
    uniform remainder in ``[0, t)`` and an exp(-1)-geometric quotient, then
    ``floor(X / s)`` is geometric with ratio ``exp(-s/t)`` and gets a random sign
    (zero counted once).

    Parameters
    ----------
    scale_num, scale_den : int
        Positive integers; the scale is ``scale_num / scale_den``.
    source : RandomSource
        Random integers.
    """
    t, s = int(scale_num), int(scale_den)
    if t <= 0 or s <= 0:
        raise ValueError(f"discrete_laplace needs a positive rational scale, got {t}/{s}")
    while True:
        u = source.randrange(t)
        if not bernoulli_exp(u, t, source):
            continue
        v = 0
        while bernoulli_exp(1, 1, source):
            v += 1
        y = (u + t * v) // s
        negative = source.randrange(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_gaussian(sigma2_num: int, sigma2_den: int, source: RandomSource) -> int:
    """Exact discrete Gaussian: ``P(z) ∝ exp(-z² / (2 sigma²))`` on the integers.

    CKS 2020, Algorithm 3: propose ``Y`` from a discrete Laplace of scale
    ``t = floor(sigma) + 1`` and accept with probability
    ``exp(-(|Y| - sigma²/t)² / (2 sigma²))``, a rational exponent.

    Parameters
    ----------
    sigma2_num, sigma2_den : int
        Positive integers; ``sigma² = sigma2_num / sigma2_den``.
    source : RandomSource
        Random integers.
    """
    n, d = int(sigma2_num), int(sigma2_den)
    if n <= 0 or d <= 0:
        raise ValueError(f"discrete_gaussian needs a positive rational variance, got {n}/{d}")
    t = math.isqrt(n // d) + 1  # floor(sigma) + 1
    # (|Y| - n/(d t))² / (2 n/d) = (|Y| d t - n)² / (2 n d t²)
    den = 2 * n * d * t * t
    while True:
        y = discrete_laplace(t, 1, source)
        a = abs(y) * d * t - n
        if bernoulli_exp(a * a, den, source):
            return y


def default_grid_exponent(sd: float, bits: int = GRID_BITS) -> int:
    """``e`` with grid ``2**e = 2**(floor(log2 sd) - bits)``, so ``2**e <= sd * 2**-bits``."""
    sd = float(sd)
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"the noise sd must be positive and finite, got {sd!r}")
    return math.frexp(sd)[1] - 1 - int(bits)


def _round_to_grid(x: float, e: int) -> int:
    """``round(x / 2**e)`` in exact arithmetic (ties up)."""
    p, q = float(x).as_integer_ratio()
    if e >= 0:
        q <<= e
    else:
        p <<= -e
    return (2 * p + q) // (2 * q)


def _from_grid(m: int, e: int) -> float:
    """``m * 2**e`` correctly rounded to a float (a deterministic function of the released integer).

    ``m`` may exceed the float range when ``2**e`` is tiny; exact integer
    division rounds once, correctly.
    """
    try:
        return float(m << e) if e >= 0 else m / (1 << -e)
    except OverflowError:  # pragma: no cover - |value| beyond 1e308
        return math.copysign(math.inf, m)


def rounding_tv_bound(sigma: float) -> float:
    r"""Upper bound on TV(discrete Gaussian :math:`N_{\mathbb Z}(0, \sigma^2)`, round(:math:`N(0, \sigma^2)`)).

    For :math:`\sigma \ge 1` (grid units),
    :math:`\tfrac12\sum_z |r(z) - \varphi(z)| \le \tfrac1{48}(\int|\varphi''| + \int|\varphi'''|)
    \le \tfrac{1}{48}(4e^{-1/2}/\sqrt{2\pi} + 5\sqrt{2/\pi})/\sigma^2` (midpoint rule; ``r`` the
    rounded-Gaussian pmf, ``φ`` the density) plus the normalising-constant
    error :math:`\sum_{k\ge1} e^{-2\pi^2\sigma^2k^2} \le 2e^{-2\pi^2\sigma^2}`.
    See ``docs/noise.md``.
    """
    s = float(sigma)
    if not s >= 1.0:
        raise ValueError(f"the bound holds for sigma >= 1 grid unit, got {sigma!r}")
    midpoint = (4 * math.exp(-0.5) / math.sqrt(2 * math.pi) + 5 * math.sqrt(2 / math.pi) / s) / (48 * s * s)
    return midpoint + 2 * math.exp(-2 * math.pi ** 2 * s * s)


def grid_delta_bound(coordinates: int, epsilon: float, bits: int = GRID_BITS) -> float:
    r"""Extra ``delta`` of a run whose Gaussian releases use the secure grid path.

    A run whose ``coordinates`` noised coordinates (all releases, all chains)
    are accounted as a composition of continuous Gaussian mechanisms with
    total PLD mean :math:`\mu` satisfies, with the secure path,
    :math:`(\varepsilon, \delta(\varepsilon; \mu) + \Delta\delta)`-DP with

    .. math::

       \Delta\delta = \frac{\sqrt{N}\,2^{-k}}{\sqrt{2\pi}}
                      + (1 + e^{\varepsilon})\,N\,\tau(2^k),

    ``N = coordinates``, ``k = bits``, ``τ`` = :func:`rounding_tv_bound`: the
    first term is the rounding (sensitivity ``Δ + γ√d``, and
    :math:`\partial\delta/\partial\mu = \varphi(\varepsilon/\mu - \mu/2) \le 1/\sqrt{2\pi}`),
    the second the coupling of discrete and rounded continuous noise.
    """
    n = int(coordinates)
    if n < 0:
        raise ValueError(f"coordinates must be >= 0, got {coordinates!r}")
    k = int(bits)
    rounding = math.sqrt(n) * 2.0 ** -k / math.sqrt(2 * math.pi)
    coupling = (1.0 + math.exp(float(epsilon))) * n * rounding_tv_bound(2.0 ** k)
    return rounding + coupling


def laplace_grid_scale(epsilon: float, sensitivity: float, dim: int, e: int) -> Fraction:
    r"""Discrete-Laplace scale, in grid units ``2**e``, that keeps a rounded release exactly ε-DP.

    Rounding ``s`` to the grid raises the l1 sensitivity of the integer query
    ``round(s / γ)`` from ``Δ/γ`` to at most ``Δ/γ + d``; the discrete Laplace of
    scale ``t = (Δ/γ + d) / ε`` is then exactly ε-DP (no slack).
    """
    gamma = Fraction(2) ** e
    return (Fraction(float(sensitivity)) / gamma + int(dim)) / Fraction(float(epsilon))


def _add_on_grid(values: np.ndarray, exponent: int, draw: Any) -> np.ndarray:
    """Round each finite value to the grid ``2**exponent`` and add one integer draw of ``draw()``.

    The arithmetic on the grid is exact (integers); the result is converted
    back by one correctly rounded division.  Non-finite values pass through
    (the clipped quantities released here are always finite).
    """
    flat = values.reshape(-1)
    out = np.empty(flat.shape)
    for i, x in enumerate(flat.tolist()):
        out[i] = x if not math.isfinite(x) else _from_grid(_round_to_grid(x, exponent) + draw(), exponent)
    return out.reshape(values.shape)


class SecureNoise:
    """The noise stream of a publishable (``seed=None``) run.

    Not a :class:`numpy.random.Generator`: it offers only what the mechanisms
    need, so any code path that was not adapted fails loudly instead of
    silently drawing insecure noise.

    Parameters
    ----------
    source : RandomSource, optional
        Random integers; default :class:`random.SystemRandom` (OS entropy).
        Anything else is for tests only.
    bits : int
        Grid resolution ``k`` (:data:`GRID_BITS`).
    """

    def __init__(self, source: Any = None, bits: int = GRID_BITS) -> None:
        self._source = random.SystemRandom() if source is None else source
        self.bits = int(bits)

    def __repr__(self) -> str:
        return f"SecureNoise(bits={self.bits})"

    # --- uniform draws -------------------------------------------------
    def randbelow(self, n: int) -> int:
        """Exactly uniform integer in ``[0, n)``."""
        return self._source.randrange(int(n))

    def random(self) -> float:
        """Uniform on ``{k 2^-53 : 0 <= k < 2^53}`` (53-bit resolution, exact on that grid)."""
        return math.ldexp(self._source.randrange(1 << 53), -53)

    def uniform_integers(self, bound: int, count: int) -> np.ndarray:
        """``count`` independent, exactly uniform integers in ``[0, bound)``, ``1 <= bound <= 2**63``.

        Vectorised rejection sampling on random 64-bit words masked to the bit
        length of ``bound - 1`` (each word is accepted with probability > 1/2).
        """
        bound, count = int(bound), int(count)
        if not 1 <= bound <= 1 << 63:
            raise ValueError(f"bound must lie in [1, 2**63], got {bound}")
        mask = np.uint64((1 << max(1, (bound - 1).bit_length())) - 1)
        out = np.empty(count, dtype=np.int64)
        filled = 0
        while filled < count:
            m = 2 * (count - filled) + 8
            words = np.frombuffer(self._source.randbytes(8 * m), dtype=np.uint64) & mask
            words = words[words < np.uint64(bound)][: count - filled]
            out[filled:filled + words.size] = words.astype(np.int64)
            filled += words.size
        return out

    def sample_without_replacement(self, n: int, size: int) -> np.ndarray:
        """``size`` distinct integers of ``[0, n)``, every subset equally likely; sorted.

        Exact: draws uniform integers (:meth:`uniform_integers`) and keeps the
        first ``size`` distinct values, whose set is uniform over the
        ``size``-subsets by symmetry (a permutation of ``[0, n)`` maps the
        sequence to one of the same probability).  For ``size > n/2`` the
        complement is drawn instead.  No floating point involved.
        """
        n, size = int(n), int(size)
        if not 0 <= size <= n:
            raise ValueError(f"cannot draw {size} distinct values from {n}")
        if 2 * size > n:
            keep = np.ones(n, dtype=bool)
            keep[self.sample_without_replacement(n, n - size)] = False
            return np.flatnonzero(keep).astype(np.int64)
        seq = np.empty(0, dtype=np.int64)
        while True:
            seq = np.concatenate([seq, self.uniform_integers(n, size + size // 2 + 8)])
            values, first = np.unique(seq, return_index=True)
            if values.size >= size:
                return np.sort(seq[np.sort(first)[:size]])
    # --- exact noise ---------------------------------------------------
    def discrete_gaussian(self, sigma2: Fraction) -> int:
        """One exact discrete Gaussian draw of variance parameter ``sigma2`` (rational)."""
        f = Fraction(sigma2)
        return discrete_gaussian(f.numerator, f.denominator, self._source)

    def discrete_laplace(self, scale: Fraction) -> int:
        """One exact discrete Laplace draw of scale ``scale`` (rational)."""
        f = Fraction(scale)
        return discrete_laplace(f.numerator, f.denominator, self._source)

    def gaussian_release(self, value: Any, sd: float, grid_exponent: int | None = None) -> Any:
        """``γ (round(value/γ) + N_Z(0, (sd/γ)²))`` elementwise, ``γ = 2**grid_exponent``.

        Parameters
        ----------
        value : float or ndarray
            Quantity with bounded sensitivity.
        sd : float
            Noise sd; ``0`` releases ``value`` unchanged (no privacy, as the
            numpy path).
        grid_exponent : int, optional
            Data-independent grid; default :func:`default_grid_exponent` of
            ``sd`` (data-independent whenever ``sd`` is).  Must satisfy
            ``2**grid_exponent <= sd * 2**-bits``.

        Returns
        -------
        float or ndarray
            Same shape as ``value``.  Non-finite entries pass through (as with
            ``value + noise`` in floating point).
        """
        sd = float(sd)
        scalar = np.ndim(value) == 0
        v = np.asarray(value, dtype=float)
        if sd == 0.0:
            return float(v) if scalar else v.copy()
        e = default_grid_exponent(sd, self.bits) if grid_exponent is None else int(grid_exponent)
        sigma = Fraction(sd) / Fraction(2) ** e
        if sigma < Fraction(2) ** self.bits:
            raise ValueError(f"grid 2**{e} is too coarse for noise sd {sd!r} (need <= sd * 2**-{self.bits})")
        sigma2 = sigma * sigma
        out = _add_on_grid(v, e, lambda: self.discrete_gaussian(sigma2))
        return float(out.reshape(-1)[0]) if scalar else out

    def laplace_release(self, value: Any, epsilon: float, sensitivity: float) -> np.ndarray:
        """Exactly ε-DP Laplace release on the grid ``2**e``, ``e`` from the scale ``Δ/ε``.

        ``value`` is rounded to the grid and discrete Laplace noise of scale
        :func:`laplace_grid_scale` (grid units) is added to each coordinate.
        """
        v = np.asarray(value, dtype=float)
        e = default_grid_exponent(float(sensitivity) / float(epsilon), self.bits)
        scale = laplace_grid_scale(epsilon, sensitivity, v.size, e)
        return _add_on_grid(v, e, lambda: self.discrete_laplace(scale))
