"""The search's start: the default, or a point towards the mode of the program's priors that the
rows prefer.

The mode search starts far from the posterior more often than near it, and at small budgets the
start is the loss (docs/adaptation.md §7, "Small n across the battery").  Without ``init=`` the
start is zeros unconstrained (every positive parameter at 1, Stan's default initialisation
centre).  A program's priors often say more: ``mu ~ normal(178, 20)`` puts heights in cm near
178, ``alpha ~ normal(50000, 20000)`` a salary intercept near 50,000.  The log density with no rows
(prior and Jacobian, :meth:`stan_dp.model.RowModel.log_prior`) depends on the program and its
shared data only — never on a row — so its mode is public and costs no budget
(:func:`prior_mode_start`).  It is taken only along the coordinates where the prior has one; a
coordinate with none (no prior: a Jacobian alone rises without end; a centred hierarchy's ``log
sigma_a`` runs into the funnel's neck; ``sigma ~ uniform(0, 100)`` on a ``<lower=0>`` scale peaks
at the support's edge) keeps the default, and a flat prior's coordinate stays where it is.

A prior's mode is still a guess, and a vague prior's a poor one, so the rows choose
(:func:`choose_start`, one or two releases): how far to go towards it along the locations, then,
from a location they took, along the scales (docs/adaptation.md §3, "The start").
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from scipy import optimize

from stan_dp.adaptation.final_check import check_bound, difference_rows
from stan_dp.adaptation.releases import Ledger, clipped_vector_sum
from stan_dp.aggregates import RowColumns
from stan_dp.density import prior_gradient

__all__ = ["PRIOR_START_GAIN", "PRIOR_START_REACH", "START_FRACTIONS", "START_SHARE", "StartChoice",
           "choose_start", "line_choice", "moves_scales", "prior_mode_start", "step_votes"]

PRIOR_START_REACH = 1e6
"""How far (unconstrained units) the prior's mode may lie from the default start along a
coordinate alone: at the reach the prior is taken to have no mode that way (a Jacobian alone,
``log p = u``, runs there).  Far enough for a location's prior in any unit (an intercept's
``normal(50000, 10000)``)."""

JOINT_REACH = 20.0
"""How far (unconstrained units) the joint mode may lie from the coordinates' modes alone; at the
reach the coordinate is taken to have no joint mode (a ridge between coupled coordinates)."""

PRIOR_START_GAIN = 1e-8
"""The joint optimum along a coordinate counts as its mode where a Newton step there would gain
less than this (nats): ``g^2 / (2 |h|)`` with the prior's gradient ``g`` and curvature ``h`` along
it (central differences of the gradient).  Scale-free, unlike a bound on ``g`` alone: an intercept's
``normal(50000, 20000)`` has a gradient of 1.25e-4 at 0, a log scale's prior gradients of order 1.
At a support's edge or on a Jacobian alone (``g`` about 1, ``h`` about 0 or not finite) the gain is
large."""

_LOW_VALUE = 1e300
"""What the joint optimiser sees where the prior is not finite."""

_BISECTIONS = 200
"""Halvings of a bracket between the last point where a coordinate's prior still rose and the
first where it did not (a doubling search from the start: ``2^200`` covers any float bracket)."""


def _negative_prior(density: Any, theta: np.ndarray) -> tuple[float, np.ndarray]:
    try:
        with np.errstate(all="ignore"):
            value, grad = prior_gradient(density, theta)
    except (ValueError, RuntimeError, FloatingPointError, OverflowError):   # the bridge refuses
        return _LOW_VALUE, np.zeros(theta.size)
    if not (np.isfinite(value) and np.all(np.isfinite(grad))):
        return _LOW_VALUE, np.zeros(theta.size)
    return -float(value), -np.asarray(grad, dtype=float)


def _mode_alone(density: Any, start: np.ndarray, j: int) -> float | None:
    """The prior's mode along coordinate ``j`` with the others at ``start``, or None.

    From the start, doubling steps the way the gradient points (1, 2, 4, ... unconstrained units)
    until the prior stops rising (its gradient turns or vanishes, or the prior is not finite); then
    bisection between the last rising point and that one, to the float.  A turn of the gradient
    brackets the mode (returned); where the prior is not finite beyond the last rising point (a
    support's edge) or the steps pass :data:`PRIOR_START_REACH` (a Jacobian alone) there is none.
    A zero gradient at the start (a flat prior, or the mode already) returns the start."""
    def slope(x: float) -> float:
        theta = start.copy()
        theta[j] = x
        value, grad = _negative_prior(density, theta)
        return np.nan if value >= _LOW_VALUE else -float(grad[j])

    base = float(start[j])
    g0 = slope(base)
    if not np.isfinite(g0):
        return None
    if g0 == 0.0:
        return base
    way = np.sign(g0)

    def rising(x: float) -> bool:
        g = slope(x)
        return bool(np.isfinite(g) and np.sign(g) == way)

    low, step = base, 1.0
    while step <= PRIOR_START_REACH:
        high = base + way * step
        if not rising(high):
            break
        low, step = high, 2.0 * step
    else:
        return None
    for _ in range(_BISECTIONS):
        middle = 0.5 * (low + high)
        if middle in (low, high):
            break
        low, high = (middle, high) if rising(middle) else (low, middle)
    turned = slope(high)
    if not np.isfinite(turned):   # the prior ends where it still rises: an edge, no mode
        return None
    return low if abs(slope(low)) <= abs(turned) else high


def _maximised(density: Any, point: np.ndarray, free: np.ndarray,
               start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounded L-BFGS on ``-log_prior`` over the ``free`` coordinates from ``point`` (the rest held
    at ``start``), within :data:`JOINT_REACH` of ``point``; the optimum and the coordinates there
    that have no mode (at the reach, or a Newton step along them would gain more than
    :data:`PRIOR_START_GAIN`, not finite included)."""
    origin = np.where(free, point, start)
    bounds = [(p - JOINT_REACH, p + JOINT_REACH) if f else (p, p) for p, f in zip(origin, free)]
    fit = optimize.minimize(lambda t: _negative_prior(density, t), origin, jac=True,
                            method="L-BFGS-B", bounds=bounds,
                            options={"maxiter": 1000, "gtol": 1e-10, "ftol": 1e-15})
    optimum = np.where(free, fit.x, start)
    value, grad = _negative_prior(density, optimum)
    at_reach = np.abs(optimum - origin) >= JOINT_REACH * (1.0 - 1e-9)
    curvature = np.full(optimum.size, np.nan)
    for j in np.flatnonzero(free):
        h = 1e-4 * max(1.0, abs(optimum[j]))
        up, down = optimum.copy(), optimum.copy()
        up[j] += h
        down[j] -= h
        v_up, g_up = _negative_prior(density, up)
        v_down, g_down = _negative_prior(density, down)
        if max(v_up, v_down) < _LOW_VALUE:
            curvature[j] = (g_up[j] - g_down[j]) / (2.0 * h)
    with np.errstate(all="ignore"):
        gain = np.where(grad == 0.0, 0.0, grad**2 / (2.0 * np.abs(curvature)))
    no_mode = at_reach | ~(gain <= PRIOR_START_GAIN) | (value >= _LOW_VALUE)
    return optimum, free & no_mode


def prior_mode_start(density: Any, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prior's mode along the coordinates where it has one; the rest held at ``start``.

    Parameters
    ----------
    density : object
        Provides ``log_prior`` (and ``log_prior_grad`` where it can; else central differences,
        :func:`stan_dp.density.prior_gradient`).  Only the prior is evaluated: no row is read.
    start : ndarray, shape (dim,)
        The default start (unconstrained), where the prior must be finite.

    Returns
    -------
    point : ndarray, shape (dim,)
        ``start`` with the coordinates that have a prior mode moved to it.
    moved : ndarray of bool, shape (dim,)
        The coordinates that moved (by more than ``1e-6`` unconstrained units).

    Notes
    -----
    First each coordinate alone, the others at ``start`` (:func:`_mode_alone`): one with no mode
    there (a support's edge, a Jacobian alone, a funnel's scale) is held at ``start``.  Then the
    rest jointly from their modes alone (bounded L-BFGS, :func:`_maximised`): a coordinate with no
    joint mode within :data:`JOINT_REACH` is held too and the rest maximised again (at most
    ``dim`` times; the priors of most programs are independent, and the first pass is already at
    the joint mode).  Deterministic post-processing of the program: no row, no budget.
    """
    start = np.asarray(start, dtype=float)
    dim = start.size
    point = start.copy()
    free = np.zeros(dim, dtype=bool)
    for j in range(dim):
        mode = _mode_alone(density, start, j)
        if mode is not None:
            free[j], point[j] = True, mode
    for _ in range(dim):
        if not free.any():
            break
        optimum, no_mode = _maximised(density, point, free, start)
        if not no_mode.any():
            point = optimum
            break
        free &= ~no_mode
    point = np.where(free, point, start)
    return point, np.abs(point - start) > 1e-6


START_SHARE = 0.01
"""Share of the adaptation budget (PLD mean) for :func:`choose_start` where there is a choice, split
evenly over its releases (two where the prior's mode moves a scale too, else one; the figures
below are for two).  Each is one sum of each row's votes between
:data:`START_FRACTIONS`' successive points (each in ``[-1, 1]``, so a row's vector has l2 norm at
most ``sqrt(K)``, ``K`` = 4, and sensitivity twice that under replace-one): noise sd
``2 sqrt(K) z = 4 z`` per step, ``z = 1 / sqrt(START_SHARE pld_mean)`` — 211 rows at epsilon = 1,
61 at epsilon = 4 and 19 at epsilon = 16 (delta = 1e-5, the whole budget the Gaussian's), against
up to ``n`` per step where the rows agree on it (a point's score sums its steps' votes).  Where they
do not, the points are about as good and any will do."""

START_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
"""The points :func:`line_choice` offers the rows besides where it stands: these fractions of the
way to the prior's mode (unconstrained, so geometric in a scale).  The end alone is not enough: a
vague prior's mode can be as far from the posterior as the default start on the other side."""


class StartChoice(NamedTuple):
    """What :func:`choose_start` released and chose."""

    point: np.ndarray
    """The chosen start (unconstrained)."""
    fraction: float
    """How far towards the prior's mode the locations moved (0: not at all; 1: to it)."""
    scale_fraction: float
    """How far towards the prior's mode the scales moved (0 where the locations did not move, or
    the prior's mode moves no scale)."""
    scores: np.ndarray
    """Per :data:`START_FRACTIONS` point of each way (locations, then scales: shape ``(2, K)``), the
    released votes summed over the steps to it (rows); NaN for the scales where that way was not
    offered."""
    noise_sd: float
    """Each release's noise sd per step (rows)."""


def step_votes(density: Any, points: np.ndarray, default: np.ndarray) -> np.ndarray:
    """Per row, its log-likelihood's change over each step ``default -> points[0] -> points[1] ...``,
    each cut to ``[-1, 1]`` nat (a row impossible at one end of a step votes a full nat against
    it; impossible at both, 0).  Shape ``(n, K)``; computed where the rows live."""
    from_default = difference_rows(density, points, default)   # impossible: -+1e300, no overflow
    steps = np.diff(from_default, axis=1, prepend=0.0)
    return np.clip(np.nan_to_num(steps, nan=0.0), -1.0, 1.0)


def line_choice(holder: Any, here: np.ndarray, there: np.ndarray, noise_multiplier: float,
                rng_noise: np.random.Generator, ledger: Ledger,
                what: str) -> tuple[np.ndarray, float, np.ndarray]:
    """The point on the way from ``here`` to ``there`` the rows prefer (one release).

    The way is cut at :data:`START_FRACTIONS` into ``K`` steps.  One release of the sum over rows
    of :func:`step_votes` (each row's change over each step cut to ``[-1, 1]`` nat: the row's vector
    lies in the cube, l2 norm at most ``sqrt(K)`` = the release's bound) with noise multiplier
    ``noise_multiplier``; a point's score is the released votes summed over the steps to it, and
    the point with the largest score is taken where that score is positive, else ``here``.  A
    step's votes count the rows preferring its far end (weighted by how much, up to a nat), so the
    choice does not fade where every point is far: heights around 170 cm, the way from 0 to 178 —
    every row prefers each point to 0 by over a hundred nats, but 178 to 133.5 only those above
    155.75 (93 %), and that step is voted ``+0.86 n``.  Returns the point, its fraction of the way
    (0: ``here``) and the scores.
    """
    points = np.array([here + t * (there - here) for t in START_FRACTIONS])
    k = len(points)
    stat = holder.row_statistic(step_votes, points, here)
    released, _ = clipped_vector_sum(rng_noise, RowColumns(holder, stat, 0, k), check_bound(k),
                                     noise_multiplier, ledger, what)
    del stat
    # ---- post-processing of the release ----
    scores = np.cumsum(np.asarray(released, dtype=float))
    best = int(np.argmax(scores))
    if scores[best] > 0.0:
        return points[best].copy(), float(START_FRACTIONS[best]), scores
    return np.array(here, dtype=float), 0.0, scores


def choose_start(holder: Any, default: np.ndarray, prior_mode: np.ndarray, scales: np.ndarray | None,
                 noise_multiplier: float, rng_noise: np.random.Generator,
                 ledger: Ledger) -> StartChoice:
    """Let the rows choose the start between the default start and the prior's mode: locations
    first, then scales (:func:`line_choice`; the second release is made where the prior's mode
    moves a scale, :func:`moves_scales`, whether its choice is used or not: the plan counts it).

    First the way from ``default`` to it with only the locations moved (the coordinates not in
    ``scales``, the coordinates on Stan's log transform, ``None`` for none); then, from the point
    chosen, the way with the scales moved too.  The second choice is used only where the first moved:
    rows judge a scale by their residuals, which at a wrong location are the outcome's own size
    (``y ~ normal(alpha + X beta, sigma)`` with ``sigma ~ exponential(0.1)`` and outcomes around 12
    at ``alpha`` = 0: they chose ``sigma`` = 10 over 1 where the residual sd is 2, and the run went
    from 0.49 to 6.4 sds off); a location a prior placed and the rows took is near enough for them
    to judge its scale (``mu ~ normal(178, 20)``, ``sigma ~ normal(0, 20)`` on 40 heights).  The
    log prior's difference is left out: it is exact and unclipped (``mu ~ normal(-500, 10)`` adds
    1,250 nats at ``mu = -500`` against at most ``n`` votes), so it would override the rows it is
    there to consult, and it favours the prior's mode by construction.  Where the rows do not tell
    the points apart the choice is the noise's, and any will do.  ``holder`` holds the rows
    (:func:`stan_dp.aggregates.queries`).
    """
    default = np.asarray(default, dtype=float)
    prior_mode = np.asarray(prior_mode, dtype=float)
    scales = _mask(scales, default.size)
    located, fraction, first = line_choice(holder, default, np.where(scales, default, prior_mode),
                                           noise_multiplier, rng_noise, ledger, "start choice")
    scaled, scale_fraction, second = located, 0.0, np.full(len(START_FRACTIONS), np.nan)
    if moves_scales(default, prior_mode, scales):   # public: the plan counts this release too
        scaled, scale_fraction, second = line_choice(holder, located,
                                                     np.where(scales, prior_mode, located),
                                                     noise_multiplier, rng_noise, ledger,
                                                     "start choice")
        if fraction == 0.0:   # no location taken: the scales' votes are on the outcome's size
            scaled, scale_fraction = located, 0.0
    return StartChoice(scaled, fraction, scale_fraction, np.vstack([first, second]),
                       float(ledger.entries[-1].noise_sd))


def moves_scales(default: np.ndarray, prior_mode: np.ndarray, scales: np.ndarray | None) -> bool:
    """Whether the prior's mode moves some scale (``scales``: the log-transformed coordinates,
    ``None`` for none) away from the default start (public): the start's choice then has its second
    release (``AdaptationSettings.start_releases`` = 2)."""
    default = np.asarray(default, dtype=float)
    return bool(np.any(_mask(scales, default.size) & (np.asarray(prior_mode, dtype=float) != default)))


def _mask(scales: np.ndarray | None, dim: int) -> np.ndarray:
    """``scales`` as a boolean mask of ``dim`` coordinates (``None``: none)."""
    return np.zeros(dim, dtype=bool) if scales is None else np.asarray(scales, dtype=bool)
