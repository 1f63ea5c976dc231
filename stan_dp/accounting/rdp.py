r"""Rényi-DP composition engine for plans that contain subsampled releases.

Used whenever a release plan contains at least one Gaussian mechanism applied
to a batch of ``b`` rows drawn without replacement from ``n`` rows (the PLD of
that mechanism has no closed form).  Everything is composed in RDP, where
composition is addition (seed 003, Theorem 2(2)), over the fixed grid
:data:`RDP_ORDERS`, and converted to ``(epsilon, delta)`` by
``dp_accounting.rdp.compute_epsilon`` (the conversion of Canonne, Kamath &
Steinke 2020, Prop. 12, which is never worse than seed 003, Theorem 1).

Per-step RDP
------------
* Plain Gaussian with multiplier ``z`` (= sd / sensitivity):
  :math:`\varepsilon(\alpha) = \alpha / (2 z^2)` (seed 003, Theorem 4(1)).
* Gaussian on a batch sampled without replacement, replace-one neighbours:
  the Wang–Balle–Kasiviswanathan amplification bound (seed 003, Theorems 8–9;
  WBK 2019 Theorem 9 / its strengthened form Theorem 27) as computed by
  ``dp_accounting``'s ``RdpAccountant`` for a ``SampledWithoutReplacementDpEvent``
  wrapping ``GaussianDpEvent(z)`` under ``NeighboringRelation.REPLACE_ONE``.
  The multiplier passed is ``z`` itself: ``dp_accounting``'s RDP accountant
  reads it relative to the full replace-one sensitivity of the batch-level
  function (at ``b == n`` it returns exactly :math:`\alpha/(2z^2)`, which the
  tests pin), which is the sensitivity our samplers use.
* Additionally, the per-step value is capped by the un-amplified Gaussian value
  :math:`\alpha/(2z^2)`.  This is valid: couple the batches drawn from two
  replace-one neighbours so that they use the same indices; each pair of
  batches is then equal or replace-one neighbours, and the Rényi divergence is
  jointly quasi-convex, so the mixture is no worse than the worst pair.  The
  cap only matters for ``b`` close to ``n``, where the WBK bound is loose.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import dp_accounting
import numpy as np
from dp_accounting.rdp import compute_epsilon
from scipy import optimize

from .validation import largest_fitting

__all__ = ["RDP_ORDERS", "RdpLine", "dp_accounting_sampled_wor_rdp", "step_rdp"]

#: Rényi orders used for all RDP accounting.  Orders up to 256 use
#: ``dp_accounting``'s exact-sum WBK bound; 512 and 1024 its cheaper bound.
RDP_ORDERS: tuple[float, ...] = (
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0,
    10.0, 11.0, 12.0, 13.0, 14.0, 16.0, 18.0, 20.0, 22.0, 24.0, 28.0, 32.0,
    40.0, 48.0, 56.0, 64.0, 80.0, 96.0, 128.0, 256.0, 512.0, 1024.0,
)
_ORDERS = np.asarray(RDP_ORDERS, dtype=float)


class RdpLine(NamedTuple):
    """``count`` Gaussian releases with multiplier ``z``; optionally subsampled."""

    z: float
    count: int
    batch_size: int | None = None
    n: int | None = None

    @property
    def subsampled(self) -> bool:
        return self.batch_size is not None


@functools.lru_cache(maxsize=65536)
def _wor_rdp_one(z: float, b: int, n: int, order: float) -> float:
    acc = dp_accounting.rdp.RdpAccountant(
        orders=[order],
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    )
    acc.compose(
        dp_accounting.SampledWithoutReplacementDpEvent(
            source_dataset_size=n,
            sample_size=b,
            event=dp_accounting.GaussianDpEvent(z),
        )
    )
    return float(acc.rdp[0])


def dp_accounting_sampled_wor_rdp(
    z: float, batch_size: int, n: int, orders: Sequence[float] = RDP_ORDERS
) -> np.ndarray:
    """Raw per-step RDP from ``dp_accounting`` for one subsampled Gaussian.

    Composes one ``SampledWithoutReplacementDpEvent(n, batch_size,
    GaussianDpEvent(z))`` into an ``RdpAccountant`` under ``REPLACE_ONE`` and
    reads its RDP curve (cached per order).

    Parameters
    ----------
    z : float
        Noise multiplier relative to the replace-one sensitivity.
    batch_size, n : int
        Batch size ``b`` and number of rows ``n`` (``1 <= b <= n``).
    orders : sequence of float
        Rényi orders.

    Returns
    -------
    numpy.ndarray
        RDP at each order, without the Gaussian cap of :func:`step_rdp`.
    """
    z, b, n = float(z), int(batch_size), int(n)
    return np.array([_wor_rdp_one(z, b, n, float(o)) for o in orders], dtype=float)


def step_rdp(line: RdpLine, scale: float = 1.0, orders: Sequence[float] = RDP_ORDERS) -> np.ndarray:
    """Per-release RDP of one line at noise multiplier ``line.z * scale``."""
    z = line.z * scale
    o = np.asarray(orders, dtype=float)
    plain = o / (2.0 * z * z)
    if not line.subsampled:
        return plain
    assert line.batch_size is not None and line.n is not None
    sub = dp_accounting_sampled_wor_rdp(z, line.batch_size, line.n, o)
    return np.minimum(sub, plain)


def rdp_vector(
    lines: Iterable[RdpLine], scale: float = 1.0, orders: Sequence[float] = RDP_ORDERS
) -> np.ndarray:
    """Total RDP of all releases in ``lines`` (each ``count`` times)."""
    total = np.zeros(len(orders), dtype=float)
    for line in lines:
        if line.count:
            total = total + line.count * step_rdp(line, scale, orders)
    return total


def rdp_to_epsilon(rdp: np.ndarray, delta: float, orders: Sequence[float] = RDP_ORDERS) -> float:
    """Convert an RDP curve to epsilon at ``delta`` (``dp_accounting``'s conversion)."""
    if not np.any(rdp > 0):
        return 0.0
    eps, _ = compute_epsilon(list(orders), list(map(float, rdp)), delta)
    return float(eps)


def epsilon(lines: Sequence[RdpLine], delta: float, scale: float = 1.0) -> float:
    """Epsilon of the composition of ``lines`` at ``delta``."""
    return rdp_to_epsilon(rdp_vector(lines, scale), delta)


def _conversion_offset(delta: float, orders: np.ndarray) -> np.ndarray:
    # epsilon = rdp + log1p(-1/a) - log(delta * a) / (a - 1)   (CKS20, Prop. 12)
    return np.log1p(-1.0 / orders) - np.log(delta * orders) / (orders - 1.0)


def max_multiplier(
    per_unit: Sequence[RdpLine],
    fixed: Sequence[RdpLine],
    target_epsilon: float,
    delta: float,
    fits: Callable[[int], bool] | None = None,
) -> int:
    """Largest ``k >= 0`` such that ``k * per_unit + fixed`` fits ``(epsilon, delta)``.

    Returns 0 if even ``k = 1`` does not fit (the caller decides whether
    ``fixed`` alone fits).

    ``fits(k)``, if given, decides whether ``k`` fits and must be the exact
    computation the caller reports (e.g. :meth:`Budget.epsilon_spent` on the
    grouped lines), so the answer can never disagree with it by rounding.
    The default composes ``k * per_unit + fixed`` exactly as
    :func:`epsilon` does for the lines ``RdpLine(z, k * count)`` of
    ``per_unit`` (plus ``fixed``).
    """
    r_unit = rdp_vector(per_unit)
    r_fixed = rdp_vector(fixed)
    if not np.any(r_unit > 0):
        raise ValueError("the plan releases nothing; iterations are not limited by privacy")

    if fits is None:

        def fits(k: int) -> bool:
            lines = [ln._replace(count=ln.count * k) for ln in per_unit] + list(fixed)
            return epsilon(lines, delta) <= target_epsilon

    # Closed-form candidate from the per-order conversion, then verify exactly.
    off = _conversion_offset(delta, _ORDERS)
    with np.errstate(divide="ignore", invalid="ignore"):
        cand = (target_epsilon - off - r_fixed) / r_unit
    cand = cand[np.isfinite(cand)]
    k = int(max(0.0, math.floor(float(cand.max())))) if cand.size else 0
    k = min(k, 2**62)
    return largest_fitting(fits, k)


def _plain_upper_scale(lines: Sequence[RdpLine], target_epsilon: float, delta: float) -> float:
    """Scale at which the lines fit when every amplification is ignored."""
    a = sum(line.count / (2.0 * line.z * line.z) for line in lines)

    def f(log_s: float) -> float:
        return rdp_to_epsilon(a * _ORDERS / math.exp(2.0 * log_s), delta) - target_epsilon

    lo, hi = 0.0, 0.0
    while f(hi) > 0:
        hi += 1.0
    lo = hi - 1.0
    while f(lo) <= 0:
        hi = lo
        lo -= 1.0
    r = optimize.brentq(f, lo, hi, xtol=1e-12)
    while f(r) > 0:
        r += 1e-12
    return math.exp(r)


def _effective_plain(lines: Sequence[RdpLine]) -> list[RdpLine]:
    """Plain lines that roughly mimic the amplified ones (a starting guess only).

    For small ``q = b/n`` the WBK bound behaves like a Gaussian with multiplier
    ``z / (2 q)``; nothing below relies on this being an upper bound.
    """
    out = []
    for ln in lines:
        if ln.subsampled:
            assert ln.batch_size is not None and ln.n is not None
            q = ln.batch_size / ln.n
            out.append(RdpLine(ln.z / min(1.0, 2.0 * q), ln.count))
        else:
            out.append(ln)
    return out


def _argmin_order(lines: Sequence[RdpLine], scale: float, delta: float) -> int:
    r = rdp_vector(_effective_plain(lines), scale)
    e = r + _conversion_offset(delta, _ORDERS)
    return int(np.argmin(e))


def calibrate_scale(
    lines: Sequence[RdpLine], target_epsilon: float, delta: float, rtol: float = 1e-6
) -> float:
    """Smallest scale ``s`` (to ``rtol``) at which ``lines`` with multipliers
    ``z * s`` fit ``(epsilon, delta)``; always rounded to the safe side.

    To keep the cost low (``dp_accounting``'s WBK bound costs O(alpha^2) per
    order), the search evaluates epsilon by a local descent over the order grid
    from a fixed starting order instead of the whole grid.  The epsilon of any
    single order is a valid bound, so this can only make the result
    conservative, never optimistic; in practice the descent finds the grid
    optimum because epsilon is unimodal in the order.
    """
    lines = [ln for ln in lines if ln.count]
    if not lines:
        raise ValueError("the plan releases nothing; there is no noise to calibrate")
    if not any(ln.subsampled for ln in lines):
        # Pure Gaussian in RDP: the cheap plain search is the answer.
        scale = _plain_upper_scale(lines, target_epsilon, delta)
        while epsilon(lines, delta, scale) > target_epsilon:
            scale *= 1.0 + 1e-12
        return scale

    m = len(_ORDERS)

    def eps_at(s: float, j: int) -> float:
        # Same arithmetic as the full-grid epsilon at order j, so the full-grid
        # epsilon reported later is never above this value.
        o = _ORDERS[j : j + 1]
        return rdp_to_epsilon(rdp_vector(lines, s, o), delta, o)

    def solve_for_order(j: int, s_start: float) -> float:
        """Smallest s (rounded up) with eps_at(s, j) <= target."""

        def f(log_s: float) -> float:
            return eps_at(math.exp(log_s), j) - target_epsilon

        step = math.log(1.25)
        a = b = math.log(s_start)
        fa = fb = f(a)
        if fa > 0:
            for _ in range(4000):
                b += step
                fb = f(b)
                if fb <= 0:
                    break
                a, fa = b, fb
        else:
            for _ in range(4000):
                a -= step
                fa = f(a)
                if fa > 0:
                    break
                b, fb = a, fa
        if not (fa > 0 >= fb):  # pragma: no cover - defensive
            raise RuntimeError("calibration failed to bracket the noise scale")
        r = optimize.brentq(f, a, b, xtol=rtol / 4.0)
        for _ in range(200):
            if f(r) <= 0:
                return math.exp(r)
            r += rtol / 4.0
        return math.exp(b)  # pragma: no cover

    s0 = _plain_upper_scale(_effective_plain(lines), target_epsilon, delta)
    j = _argmin_order(lines, s0, delta)
    s_best = solve_for_order(j, s0)
    # Move to a neighbouring order while it allows less noise at the current
    # solution (epsilon is unimodal in the order, so this reaches the optimum).
    for _ in range(m):
        better = [nj for nj in (j - 1, j + 1) if 0 <= nj < m and eps_at(s_best, nj) < target_epsilon]
        if not better:
            return s_best
        j = better[0]
        s_best = min(s_best, solve_for_order(j, s_best))
    return s_best
