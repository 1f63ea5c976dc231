r"""Gaussian mechanisms on batches sampled without replacement.

Setting: each release draws a batch of exactly ``batch_size = b`` rows uniformly
without replacement from the ``n`` rows, computes a function of the batch whose
sensitivity (replace one row of the batch) is :math:`\Delta`, and adds
:math:`\mathcal N(0, (z\Delta)^2)` noise.  Neighbours are **replace-one**
(``n`` is public).  Accounting is in Rényi DP with the Wang–Balle–Kasiviswanathan
amplification (seed 003, Theorems 8–9) as implemented by ``dp_accounting``'s
``SampledWithoutReplacementDpEvent``; see :mod:`stan_dp.accounting.rdp`.

Why add/remove is refused
-------------------------
The WBK theorem bounds the divergence between the outputs on two datasets of the
*same* size ``n`` that differ in one row.  Under add/remove neighbours the two
datasets have ``n`` and ``n + 1`` rows, so the batch is drawn from sets of
different sizes with different inclusion probabilities, and the sensitivity of
a rescaled quantity such as :math:`\frac{n}{b}\sum_{j \in B} r_j` changes with
``n`` itself.  No bound for that case is implemented, and stating the replace-one
figure under an add/remove label would be wrong, so ``relation="add_remove"``
raises :class:`ValueError` for subsampled releases.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import rdp
from .validation import (
    check_delta,
    check_int,
    check_real,
    check_relation,
    validate_privacy_params,
)

__all__ = [
    "subsampled_gaussian_rdp",
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_max_count",
    "calibrate_subsampled_gaussian_noise",
    "check_batch",
]


def check_batch(batch_size: object, n: object, relation: str = "replace_one") -> tuple[int, int]:
    """Validate ``(batch_size, n)`` for sampling without replacement.

    Raises
    ------
    ValueError
        If ``n < 1``, ``batch_size`` is not in ``[1, n]``, or ``relation`` is
        ``"add_remove"`` (see the module docstring for why).
    """
    relation = check_relation(relation)
    n_i = check_int(n, "n", minimum=1)
    b_i = check_int(batch_size, "batch_size", minimum=1)
    if b_i > n_i:
        raise ValueError(f"batch_size must be <= n, got batch_size={b_i}, n={n_i}")
    if relation != "replace_one":
        raise ValueError(
            "subsampling without replacement with a fixed batch size is only "
            "accounted for replace-one neighbours (relation='replace_one'); "
            "the Wang-Balle-Kasiviswanathan bound assumes both datasets have n "
            "rows, which add/remove neighbours do not"
        )
    return b_i, n_i


def subsampled_gaussian_rdp(
    noise_multiplier: float,
    count: int = 1,
    *,
    batch_size: int,
    n: int,
    orders: Sequence[float] = rdp.RDP_ORDERS,
    relation: str = "replace_one",
) -> np.ndarray:
    """RDP curve of ``count`` subsampled Gaussian releases.

    Parameters
    ----------
    noise_multiplier : float
        ``z = sd / sensitivity`` (replace-one sensitivity of the batch function).
    count : int
        Number of releases (>= 0).
    batch_size, n : int
        Batch size ``b`` and number of rows ``n``.
    orders : sequence of float
        Rényi orders (> 1).
    relation : str
        Must be ``"replace_one"``.

    Returns
    -------
    numpy.ndarray
        ``count * min(WBK(alpha), alpha / (2 z^2))`` at each order.
    """
    z = check_real(noise_multiplier, "noise_multiplier", positive=True)
    c = check_int(count, "count")
    b, n_i = check_batch(batch_size, n, relation)
    o = [check_real(a, "orders", positive=True) for a in orders]
    if any(a <= 1.0 for a in o):
        raise ValueError("orders must all be > 1")
    return c * rdp.step_rdp(rdp.RdpLine(z, 1, b, n_i), 1.0, o)


def subsampled_gaussian_epsilon(
    noise_multiplier: float,
    count: int,
    delta: float,
    *,
    batch_size: int,
    n: int,
    relation: str = "replace_one",
) -> float:
    """Epsilon of ``count`` Gaussian releases, each on a fresh batch.

    Parameters
    ----------
    noise_multiplier : float
        ``z = sd / sensitivity`` (> 0), sensitivity of the batch-level function
        under replace-one.
    count : int
        Number of releases (>= 0).
    delta : float
        Target delta in (0, 1).
    batch_size, n : int
        Batch size ``b`` (``1 <= b <= n``) and number of rows ``n``.
    relation : str
        Must be ``"replace_one"`` (``"add_remove"`` raises ``ValueError``).

    Returns
    -------
    float
        An upper bound on epsilon (RDP + WBK amplification, converted at
        ``delta``).  At ``b == n`` this is the RDP bound of the plain Gaussian.
    """
    z = check_real(noise_multiplier, "noise_multiplier", positive=True)
    c = check_int(count, "count")
    delta = check_delta(delta)
    b, n_i = check_batch(batch_size, n, relation)
    return rdp.epsilon([rdp.RdpLine(z, c, b, n_i)], delta)


def subsampled_gaussian_max_count(
    noise_multiplier: float,
    epsilon: float,
    delta: float,
    *,
    batch_size: int,
    n: int,
    relation: str = "replace_one",
) -> int:
    """Largest number of subsampled Gaussian releases that fits the budget.

    Returns
    -------
    int
        The largest ``k >= 0`` with
        ``subsampled_gaussian_epsilon(z, k, delta, ...) <= epsilon``.
    """
    z = check_real(noise_multiplier, "noise_multiplier", positive=True)
    epsilon, delta = validate_privacy_params(epsilon, delta)
    b, n_i = check_batch(batch_size, n, relation)
    return rdp.max_multiplier([rdp.RdpLine(z, 1, b, n_i)], [], epsilon, delta)


def calibrate_subsampled_gaussian_noise(
    count: int,
    epsilon: float,
    delta: float,
    *,
    batch_size: int,
    n: int,
    relation: str = "replace_one",
) -> float:
    """Smallest noise multiplier for which ``count`` subsampled releases fit.

    The result is accurate to a relative 1e-6 and rounded up, so
    ``subsampled_gaussian_epsilon(result, count, delta, ...) <= epsilon``.
    """
    c = check_int(count, "count", minimum=1)
    epsilon, delta = validate_privacy_params(epsilon, delta)
    b, n_i = check_batch(batch_size, n, relation)
    return rdp.calibrate_scale([rdp.RdpLine(1.0, c, b, n_i)], epsilon, delta)
