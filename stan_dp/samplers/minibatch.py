r"""Pieces shared by the minibatch samplers (subsampled penalty, DP Barker).

Both samplers evaluate, at each iteration, the per-row log-likelihood ratios
:math:`r_j` of a batch :math:`B` of ``b`` rows drawn **without replacement**
from the ``n`` rows, tempered and clipped to :math:`x_j = \operatorname{clip}(T r_j)`,
and use

.. math::

   \hat\lambda_{data} = \frac{n}{b}\sum_{j\in B} x_j, \qquad
   \sigma_b^2 = \Bigl(1 - \frac bn\Bigr)\Bigl(\frac nb\Bigr)^2\sum_{j\in B}(x_j - \bar x)^2 .

:math:`\sigma_b^2` is seed 003's estimate of the variance of
:math:`\hat\lambda_{data}` (Section 4.1) times the finite-population correction
:math:`1 - b/n` of sampling without replacement: it vanishes at ``b = n``,
where :math:`\hat\lambda_{data}` is exact, and, being a factor in ``[0, 1]``,
it can only lower every sensitivity bound derived for the uncorrected value
(Lemma 1, Theorem 8).  It still divides by ``b`` rather than ``b - 1`` as in
the seed, which underestimates the variance by a factor ``(b-1)/b``
(0.2 % at ``b = 500``).

The batch indices are drawn from the chain's *noise* stream: subsampling
amplification needs them secret, and they never leave the sampler.  In a
``seed=None`` run that stream is a :class:`~stan_dp.secure_noise.SecureNoise`
(exactly uniform subsets from the OS CSPRNG, see ``docs/noise.md``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from stan_dp.aggregates import RatioSums, ratio_sums_from_values
from stan_dp.density import RowDensity
from stan_dp.inference import validate_positive
from stan_dp.secure_noise import SecureNoise

__all__ = [
    "MinibatchState",
    "init",
    "validate_batch_size",
    "resolve_temperature",
    "draw_batch",
    "batch_estimate",
]


class MinibatchState(NamedTuple):
    """State of a minibatch chain.  Nothing data-dependent is cached (the batch changes)."""

    position: np.ndarray
    log_prior: float
    aux: np.ndarray


def init(density: RowDensity, position: np.ndarray, aux: np.ndarray | None = None) -> MinibatchState:
    """Initial state at a data-independent ``position`` (touches no data)."""
    theta = np.array(position, dtype=float)
    return MinibatchState(theta, float(density.log_prior(theta)),
                          np.empty(0) if aux is None else np.asarray(aux, dtype=float))


def validate_batch_size(batch_size: object, n_rows: int) -> int:
    """``batch_size`` as an int in ``[2, n_rows]``; ``ValueError`` naming it otherwise."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise ValueError(f"batch_size must be an integer, got {batch_size!r}")
    b = int(batch_size)
    if b < 2:
        raise ValueError(f"batch_size must be >= 2 (the batch variance needs two rows), got {b}")
    if b > n_rows:
        raise ValueError(f"batch_size must be <= the number of rows n={n_rows}, got {b}")
    return b


def resolve_temperature(temperature: object, n0: object, n_rows: int) -> float:
    """The tempering factor ``T``: ``temperature``, or ``n0 / n_rows`` when ``n0`` is given.

    Raises
    ------
    ValueError
        If both are given (``temperature`` other than 1), or either is not
        positive, or ``n0 > n_rows``.
    """
    t = validate_positive("temperature", temperature)
    if n0 is None:
        return t
    if t != 1.0:
        raise ValueError("give either temperature or n0 (temperature = n0 / n_rows), not both")
    m = validate_positive("n0", n0)
    if m > n_rows:
        raise ValueError(f"n0 must be <= the number of rows n={n_rows} (T = n0/n <= 1), got {m:g}")
    return m / n_rows


def draw_batch(rng_noise: np.random.Generator | SecureNoise, n_rows: int, batch_size: int) -> np.ndarray:
    """``batch_size`` distinct row indices, uniformly without replacement, sorted (O(b) time).

    The batch is part of the privacy mechanism (amplification by subsampling
    needs it secret and uniform).  A :class:`~stan_dp.secure_noise.SecureNoise`
    stream (``seed=None``) draws it with Floyd's algorithm from exact uniform
    integers of the OS CSPRNG: every subset has probability exactly
    ``1 / C(n, b)``, no floating point involved.  A numpy generator (seeded
    runs) uses ``choice`` as before.
    """
    if isinstance(rng_noise, SecureNoise):
        return rng_noise.sample_without_replacement(n_rows, batch_size)
    return np.sort(rng_noise.choice(n_rows, batch_size, replace=False))


def batch_estimate(sums: RatioSums | np.ndarray, n_rows: int) -> tuple[float, float]:
    """``(n/b) sum x`` and its variance estimate ``(1 - b/n) (n/b)^2 sum (x - mean x)^2``.

    ``sums`` is the batch's aggregate (:class:`stan_dp.aggregates.RatioSums`)
    of the tempered, clipped (finite) contributions ``x``, or the array ``x``.
    """
    if not isinstance(sums, RatioSums):
        sums = ratio_sums_from_values(np.asarray(sums, dtype=float), np.zeros(np.size(sums)), np.inf)
    b = sums.count
    scale = n_rows / b
    return float(scale * sums.totals[0]), float((1.0 - b / n_rows) * scale * scale * sums.m2)
