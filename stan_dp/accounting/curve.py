r"""Composition of a given per-step Rényi-DP curve (for mechanisms that are not Gaussian releases).

DP Barker's per-iteration privacy is not a Gaussian mechanism with a noise
multiplier: seed 003, Theorem 8 gives its RDP :math:`\varepsilon(\alpha)` per
iteration directly, at integer orders :math:`2 \le \alpha < (C-1)|B|/5`.  This
module composes such a curve over ``k`` steps (RDP composition is addition,
seed 003, Theorem 2(2)), converts it to ``(epsilon, delta)`` with the same
conversion as the rest of the package (:func:`stan_dp.accounting.rdp.rdp_to_epsilon`,
Canonne–Kamath–Steinke 2020, Prop. 12, never worse than seed 003, Theorem 1),
and finds the largest ``k`` that fits a budget.

The functions here are additive to :class:`stan_dp.accounting.Budget`, whose
release plans are Gaussian; the sampling driver uses them when a sampler
declares its per-step curve (``SamplerSpec.step_rdp``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import bounds, rdp
from .validation import check_int, check_real, largest_fitting, validate_privacy_params

__all__ = [
    "ACCOUNTANT_CURVE",
    "RdpCurve",
    "curve_epsilon",
    "curve_max_steps",
    "barker_step_rdp",
]

#: Accountant name recorded for runs accounted through a per-step RDP curve.
ACCOUNTANT_CURVE = "rdp-per-step-curve"


@dataclass(frozen=True)
class RdpCurve:
    """Per-step RDP of one iteration, at a finite set of orders.

    Parameters
    ----------
    orders : tuple of float
        Rényi orders (> 1).
    values : tuple of float
        RDP :math:`\\varepsilon(\\alpha)` of one step at each order (>= 0).
    name : str
        Short description recorded in reports (e.g. ``"dp-barker-theorem8"``).
    """

    orders: tuple[float, ...]
    values: tuple[float, ...]
    name: str = "rdp-curve"

    def __post_init__(self) -> None:
        o = tuple(check_real(a, "orders") for a in self.orders)
        v = tuple(check_real(x, "values", nonnegative=True) for x in self.values)
        if not o:
            raise ValueError("an RDP curve needs at least one order")
        if len(o) != len(v):
            raise ValueError(f"orders and values must have the same length, got {len(o)} and {len(v)}")
        if any(a <= 1.0 for a in o):
            raise ValueError("orders must all be > 1")
        if not any(x > 0 for x in v):
            raise ValueError("the curve releases nothing; steps are not limited by privacy")
        object.__setattr__(self, "orders", o)
        object.__setattr__(self, "values", v)


def curve_epsilon(curve: RdpCurve, steps: int, delta: float, gaussian_pld_mean: float = 0.0) -> float:
    """Epsilon at ``delta`` of ``steps`` compositions of ``curve``.

    Parameters
    ----------
    curve : RdpCurve
        Per-step RDP.
    steps : int
        Number of steps (>= 0); for a sampler, ``chains * (warmup + iterations)``.
    delta : float
        Target delta in (0, 1).
    gaussian_pld_mean : float
        Gaussian releases composed with the steps, as their PLD mean
        ``M = sum c / (2 z^2)``: their RDP at order ``alpha`` is ``alpha M``
        (Mironov 2017, Prop. 7), added order by order.

    Returns
    -------
    float
        An upper bound on epsilon (0 for ``steps = 0`` and no Gaussian releases).
    """
    k = check_int(steps, "steps")
    m = check_real(gaussian_pld_mean, "gaussian_pld_mean", nonnegative=True)
    _, delta = validate_privacy_params(1.0, delta)
    if k == 0 and m == 0:
        return 0.0
    total = k * np.asarray(curve.values) + m * np.asarray(curve.orders)
    return rdp.rdp_to_epsilon(total, delta, curve.orders)


def curve_max_steps(curve: RdpCurve, epsilon: float, delta: float, gaussian_pld_mean: float = 0.0) -> int:
    """Largest number of steps whose composition fits ``(epsilon, delta)`` (0 if none).

    ``gaussian_pld_mean``: Gaussian releases composed with the steps (see
    :func:`curve_epsilon`).

    Decided by :func:`curve_epsilon` itself (a closed-form candidate from the
    per-order conversion, then an exact search), so a returned count is
    always accepted by :func:`curve_epsilon`.
    """
    epsilon, delta = validate_privacy_params(epsilon, delta)
    o = np.asarray(curve.orders, dtype=float)
    v = np.asarray(curve.values, dtype=float)
    off = np.log1p(-1.0 / o) - np.log(delta * o) / (o - 1.0) + gaussian_pld_mean * o
    with np.errstate(divide="ignore", invalid="ignore"):
        cand = (epsilon - off) / v
    cand = cand[np.isfinite(cand)]
    guess = int(min(max(0.0, math.floor(float(cand.max()))), 2.0**62)) if cand.size else 1
    return largest_fitting(lambda k: curve_epsilon(curve, k, delta, gaussian_pld_mean) <= epsilon, guess)


def barker_step_rdp(
    batch_size: int, n: int, correction_variance: float,
    max_order: int = 256,
) -> RdpCurve:
    r"""Per-iteration RDP of DP Barker (seed 003, Theorem 8) at every admissible integer order.

    At each integer order :math:`2 \le \alpha \le \min(\text{max\_order}, \alpha_{\max})`
    with :math:`5\alpha < (C-1)|B|`, the value is
    :math:`\min\{\varepsilon(\alpha), \varepsilon'(\alpha)\}`: Theorem 8's
    amplified bound (:func:`~stan_dp.accounting.bounds.barker_rdp_epsilon`)
    capped by the un-amplified batch-level bound
    (:func:`~stan_dp.accounting.bounds.barker_base_rdp_epsilon`); the cap is
    valid for any mechanism run on a batch drawn without replacement (see
    :mod:`stan_dp.accounting.rdp`) and only matters for ``|B|`` close to ``n``.

    Parameters
    ----------
    batch_size : int
        :math:`|B|`, ``<= n``.
    n : int
        Number of rows.
    correction_variance : float
        Total test-noise variance :math:`C`, ``1 < C < pi^2/3`` (Theorem 8 as
        stated: 2; :func:`stan_dp.barker`'s default: 1.6).  Required, so that
        a curve always names the ``C`` it accounts for.
    max_order : int
        Largest order considered (>= 2).

    Raises
    ------
    ValueError
        If ``batch_size > n`` or no order is admissible (``batch_size`` too
        small for Theorem 8: ``|B| > 10/(C-1)`` is needed).
    """
    b = check_int(batch_size, "batch_size", minimum=1)
    n_i = check_int(n, "n", minimum=1)
    m = check_int(max_order, "max_order", minimum=2)
    if b > n_i:
        raise ValueError(f"batch_size must be <= n, got batch_size={b}, n={n_i}")
    top = min(bounds.barker_max_order(b, correction_variance), m)
    if top < 2:
        raise ValueError(
            f"batch_size={b} is too small for Theorem 8 with correction_variance "
            f"{correction_variance:g}: it needs 5*alpha < (C-1)*batch_size for alpha = 2, "
            f"i.e. batch_size > {10.0 / (correction_variance - 1.0):g}"
        )
    orders = tuple(float(a) for a in range(2, top + 1))
    c = correction_variance
    values = tuple(
        min(bounds.barker_rdp_epsilon(a, b, n_i, correction_variance=c),
            bounds.barker_base_rdp_epsilon(a, b, correction_variance=c))
        for a in range(2, top + 1)
    )
    return RdpCurve(orders, values, f"dp-barker-theorem8(C={c:g})")
