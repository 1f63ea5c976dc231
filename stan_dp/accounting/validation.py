"""Argument validation and the neighbouring relation.

Every public function of :mod:`stan_dp.accounting` validates its arguments here,
so that a bad value fails early with a :class:`ValueError` whose message names
the argument.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "RELATIONS",
    "validate_privacy_params",
    "sensitivity_factor",
    "check_relation",
    "weak_delta_message",
]

#: The neighbouring relations understood by the package.
#: ``"replace_one"``: datasets of the same size ``n`` that differ in one row
#: (substitute neighbours; ``n`` is public).  ``"add_remove"``: one dataset is
#: the other with one row added or removed.
RELATIONS: tuple[str, ...] = ("replace_one", "add_remove")


def check_relation(relation: str) -> str:
    """Return ``relation`` if it is a known neighbouring relation.

    Parameters
    ----------
    relation : str
        ``"replace_one"`` or ``"add_remove"``.

    Returns
    -------
    str
        The same string.

    Raises
    ------
    ValueError
        If ``relation`` is not one of :data:`RELATIONS`.
    """
    if not isinstance(relation, str) or relation not in RELATIONS:
        raise ValueError(
            f"relation must be one of {RELATIONS!r}, got {relation!r}"
        )
    return relation


def sensitivity_factor(relation: str) -> float:
    """Factor that turns a per-row clip bound into an L2 sensitivity.

    A sum over rows of quantities each clipped to norm at most ``C`` changes by
    at most ``2 C`` when one row is replaced (``"replace_one"``: the old row's
    term leaves, a new one enters) and by at most ``C`` when one row is added or
    removed (``"add_remove"``).  Samplers set ``sensitivity = factor * C`` and
    noise standard deviation ``sd = noise_multiplier * sensitivity``.

    Parameters
    ----------
    relation : str
        ``"replace_one"`` or ``"add_remove"``.

    Returns
    -------
    float
        ``2.0`` for ``"replace_one"``, ``1.0`` for ``"add_remove"``.

    Raises
    ------
    ValueError
        For any other relation.
    """
    return 2.0 if check_relation(relation) == "replace_one" else 1.0


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_real(
    x: object,
    name: str,
    *,
    positive: bool = False,
    nonnegative: bool = False,
    finite: bool = True,
) -> float:
    """Validate a real scalar and return it as ``float``.

    Raises
    ------
    ValueError
        If ``x`` is not a real number, is NaN, infinite (when ``finite``), or
        violates the sign constraint.  The message names ``name``.
    """
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x.item()
    if not _is_real(x):
        raise ValueError(f"{name} must be a real number, got {x!r}")
    v = float(x)  # type: ignore[arg-type]
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN")
    if finite and math.isinf(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if positive and not v > 0:
        raise ValueError(f"{name} must be positive, got {v}")
    if nonnegative and not v >= 0:
        raise ValueError(f"{name} must be non-negative, got {v}")
    return v


def check_int(x: object, name: str, *, minimum: int = 0) -> int:
    """Validate an integer (Python or NumPy, or an integral float) >= ``minimum``.

    Raises
    ------
    ValueError
        If ``x`` is not integral, is NaN, or is below ``minimum``.
    """
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x.item()
    if isinstance(x, bool):
        raise ValueError(f"{name} must be an integer, got {x!r}")
    if isinstance(x, numbers.Integral):
        v = int(x)
    elif _is_real(x):
        f = float(x)  # type: ignore[arg-type]
        if math.isnan(f):
            raise ValueError(f"{name} must not be NaN")
        if not math.isfinite(f) or f != math.floor(f):
            raise ValueError(f"{name} must be an integer, got {x!r}")
        v = int(f)
    else:
        raise ValueError(f"{name} must be an integer, got {x!r}")
    if v < minimum:
        if minimum == 0:
            raise ValueError(f"{name} must be non-negative, got {v}")
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def validate_privacy_params(epsilon: float, delta: float) -> tuple[float, float]:
    """Validate an ``(epsilon, delta)`` privacy budget.

    Parameters
    ----------
    epsilon : float
        Must be finite and > 0.
    delta : float
        Must lie in the open interval (0, 1).

    Returns
    -------
    tuple of float
        ``(epsilon, delta)`` as floats.

    Raises
    ------
    ValueError
        With a message naming ``epsilon`` or ``delta``.
    """
    eps = check_real(epsilon, "epsilon", positive=True)
    dlt = check_delta(delta)
    return eps, dlt


def check_delta(delta: object) -> float:
    """Validate ``delta`` in (0, 1) and return it as ``float``."""
    d = check_real(delta, "delta")
    if not 0.0 < d < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {d}")
    return d


def as_sequence(x: object, name: str) -> list[object] | None:
    """Return ``x`` as a list if it is a sequence/array, else ``None``."""
    if isinstance(x, np.ndarray):
        if x.ndim == 0:
            return None
        if x.ndim != 1:
            raise ValueError(f"{name} must be a scalar or a 1-d sequence")
        return list(x.tolist())
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        return list(x)
    return None


# --------------------------------------------------------------------------
# monotone searches shared by the accounting functions
# --------------------------------------------------------------------------
_K_MAX = 2**62


def largest_fitting(fits: Callable[[int], bool], guess: int) -> int:
    """Largest ``k >= 1`` with ``fits(k)``, or 0 if ``fits(1)`` is false.

    ``fits`` must be monotone (true up to some ``K``, false beyond); ``guess``
    is only a starting point: the answer is decided by ``fits`` alone, by an
    exponential search from ``guess`` and a bisection.
    """
    k = min(max(int(guess), 1), _K_MAX)
    if fits(k):
        lo, step = k, 1
        while True:  # gallop up: fits(lo) holds
            hi = min(lo + step, _K_MAX)
            if hi == lo:
                return lo  # pragma: no cover - unbounded
            if not fits(hi):
                break
            lo, step = hi, 2 * step
    else:
        hi, step = k, 1  # not fits(hi)
        while True:  # gallop down
            lo = hi - step
            if lo < 1:
                if not fits(1):
                    return 0
                lo = 1
                break
            if fits(lo):
                break
            hi, step = lo, 2 * step
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def smallest_fitting_scale(fits: Callable[[float], bool], guess: float, max_steps: int = 4000) -> float:
    """A scale ``s >= guess`` with ``fits(s)``, moved up from ``guess`` as little as needed.

    If ``fits(guess)`` already holds, ``guess`` is returned.  Otherwise ``s``
    grows by 1, 2, 4, ... ulps until it fits, and the last gap is bisected, so
    the result is the smallest fitting double above ``guess`` to within one
    step of the search (``fits`` is assumed monotone in ``s``).
    """
    s = float(guess)
    if fits(s):
        return s
    lo = s  # not fits(lo)
    step = 1.0
    for _ in range(max_steps):
        hi = math.nextafter(lo + lo * 2.0**-53 * step, math.inf)
        if fits(hi):
            break
        lo, step = hi, 2.0 * step
    else:  # pragma: no cover - defensive
        raise RuntimeError("calibration failed to converge")
    for _ in range(200):  # bisect in value: not fits(lo), fits(hi)
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def weak_delta_message(delta: float, n_public: int | None) -> str | None:
    """Why ``delta`` protects no one at ``n_public`` rows, or ``None`` where it is below ``1 / n``.

    (epsilon, delta)-DP with ``delta >= 1 / n`` admits a mechanism that publishes one row of the
    ``n``, chosen at random, in full (it is ``(0, 1/n)``-DP): every run is then allowed to
    expose some individual.  The usual advice is ``delta`` well below ``1 / n`` (``1e-5`` for
    thousands of rows, or ``1 / n^2``).  ``n_public`` is a public row count (the row count under
    replace-one; under add/remove only a declared ``public_n``); ``None`` checks nothing.
    """
    if n_public is None or not n_public >= 1:
        return None
    if delta < 1.0 / float(n_public):
        return None
    return (f"delta = {delta:g} is at least 1/n = {1.0 / n_public:.3g} (n = {int(n_public)} rows): "
            "(epsilon, delta)-DP with delta >= 1/n allows publishing one row chosen at random in "
            "full, so this budget protects no individual for certain; choose delta well below 1/n "
            f"(1/n^2 = {1.0 / float(n_public) ** 2:.2g}, or 1e-5 for thousands of rows)")
