"""Chain-side warm-up: a mode search on released gradients and Stan's dual-averaging step size.

What a sampler does to itself during warm-up, kept apart from its kernel
(as BlackJAX keeps ``adaptation/`` apart from its kernels); DP HMC
(:mod:`stan_dp.samplers.hmc`) uses both parts:

* :func:`mode_search` — averaged noisy gradient ascent (Polyak–Ruppert) on
  gradients released by a mechanism the caller passes in, from which the
  chain starts;
* :func:`adapt_step_size` — the warm-up schedule of the step size: dual
  averaging (Hoffman & Gelman 2014, with Stan's constants,
  :func:`dual_averaging`) on the released acceptance probability, restarted
  at :data:`ADAPT_RESTARTS` of the warm-up and frozen at its end.

Everything here is post-processing of released values: the search sees only
what ``release`` returns (the caller accounts for those releases), the step
size only released acceptance probabilities.  No data is touched and nothing
is released here.  The module imports no sampler; it takes plain values and
returns plain values.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Protocol, TypeVar

import numpy as np

__all__ = [
    "ADAPT_RESTARTS",
    "Adaptation",
    "adapt_step_size",
    "dual_averaging",
    "mode_search",
    "new_adaptation",
]

ADAPT_RESTARTS = (2 / 3, 5 / 6)
"""Fractions of the warm-up at which the dual averaging restarts (forgetting the burn-in)."""

DUAL_AVERAGING_GAMMA = 0.05
"""Stan's ``gamma``: how strongly ``log step`` is pulled back towards ``mu``."""
DUAL_AVERAGING_T0 = 10.0
"""Stan's ``t0``: damps the first iterations of the averaged acceptance error."""
DUAL_AVERAGING_KAPPA = 0.75
"""Stan's ``kappa``: the weight of iteration ``t`` in the averaged step is ``t^-kappa``."""


# ------------------------------------------------------------- mode search --
class _Released(Protocol):
    """What :func:`mode_search` needs of a release: the released gradient."""

    @property
    def grad(self) -> np.ndarray: ...


_R = TypeVar("_R", bound=_Released)


def mode_search(release: Callable[[np.random.Generator, np.ndarray], _R | None],
                rng_noise: np.random.Generator, start: np.ndarray,
                releases: int, step: float) -> tuple[np.ndarray, _R]:
    """Private mode search: averaged noisy gradient ascent on released gradients.

    ``releases - 1`` steps ``theta <- theta + step * G(theta)`` (one gradient
    release each), then one release at the average of the iterates of the
    second half (Polyak-Ruppert averaging), where the chain starts.  Near a
    mode with Hessian ``-H`` the average has error ``~ H^-1 xi_bar``
    (``xi_bar`` the mean release noise of the averaging window): it uses the
    released gradients efficiently, whatever ``step`` within the stable range
    ``step * h < 2`` (``h`` the largest curvature), which only sets how fast
    the transient is forgotten.  Far from the mode a clipped gradient sum has
    norm at most ``n T b_g`` plus noise, so a step of ``1 / (n T)`` moves at
    most ``b_g`` per release.  Everything is computed from released values
    (post-processing); the caller accounts for the releases (DP HMC: as the
    chain's one-off releases).

    Parameters
    ----------
    release : callable
        ``release(rng_noise, theta)``: one gradient release at ``theta`` (an
        object with the released gradient as ``.grad``), or ``None`` with
        no release made where ``theta`` is outside the prior support (the
        step is then halved).  E.g.
        :func:`stan_dp.samplers.hmc.make_noisy_gradient`.
    rng_noise : numpy.random.Generator
        The noise stream, passed through to ``release``.
    start : ndarray
        Data-independent start point.
    releases : int
        ``K``: at most ``K`` calls of ``release`` that make a release.
    step : float
        Ascent step.

    Returns
    -------
    position : ndarray
        Where the chain starts: the averaged point, or the last iterate if
        the average left the prior support (or nothing was averaged).
    first : object
        The release made at ``position``.

    Raises
    ------
    ValueError
        If ``release`` returns ``None`` at ``start``.
    """
    theta = np.array(start, dtype=float)
    out = release(rng_noise, theta)
    if out is None:
        raise ValueError("the log prior is not finite at the initial point")
    total, count = np.zeros_like(theta), 0
    for j in range(1, releases - 1):
        proposal = theta + step * out.grad
        nxt = release(rng_noise, proposal)
        if nxt is None:  # outside the prior support: no release made, shorter step next time
            step *= 0.5
            continue
        theta, out = proposal, nxt
        if j >= releases // 2:
            total, count = total + theta, count + 1
    if count == 0:
        return theta, out
    final = release(rng_noise, total / count)
    return (total / count, final) if final is not None else (theta, out)


# --------------------------------------------------------------- step size --
class Adaptation(NamedTuple):
    """Warm-up step-size adaptation state (dual averaging, Hoffman & Gelman 2014)."""

    mu: float
    """Log step the iterates are pulled towards (``log(boost * step)`` at a (re)start)."""
    log_step_bar: float
    """Averaged log step: the step used after the warm-up."""
    h_bar: float
    """Averaged ``target - acceptance``."""
    count: int
    """Updates since the last (re)start."""


def new_adaptation(step_size: float, boost: float = 10.0) -> Adaptation:
    """Dual averaging (re)started at ``step_size``, pulled towards ``boost * step_size``."""
    return Adaptation(math.log(boost * step_size), math.log(step_size), 0.0, 0)


def dual_averaging(a: Adaptation, accept: float, target: float) -> tuple[Adaptation, float]:
    """One step of Stan's dual averaging (gamma 0.05, t0 10, kappa 0.75).

    With ``t = a.count + 1``::

        h_bar    = (1 - 1/(t + t0)) h_bar + (target - accept) / (t + t0)
        log_step = mu - sqrt(t) / gamma * h_bar
        log_bar  = t^-kappa log_step + (1 - t^-kappa) log_bar

    Returns the updated state and the next iteration's step ``exp(log_step)``.
    """
    count = a.count + 1
    eta = 1.0 / (count + DUAL_AVERAGING_T0)
    h_bar = (1 - eta) * a.h_bar + eta * (target - accept)
    log_step = a.mu - math.sqrt(count) / DUAL_AVERAGING_GAMMA * h_bar
    w = count ** -DUAL_AVERAGING_KAPPA
    log_bar = w * log_step + (1 - w) * a.log_step_bar
    return a._replace(count=count, h_bar=h_bar, log_step_bar=log_bar), math.exp(log_step)


def adapt_step_size(a: Adaptation | None, step_size: float, iteration: int, accept: float,
                    *, warmup: int, target: float) -> tuple[Adaptation | None, float]:
    """Warm-up step-size schedule from released quantities only (post-processing).

    Dual averaging on the released acceptance probability, restarted (from
    twice the current averaged step) at :data:`ADAPT_RESTARTS` of the warm-up
    so that the large steps accepted while the chain runs down to the mode
    are forgotten; at the end of the warm-up the step size is frozen at the
    averaged value of the last window.  (The metric is not adapted: with DP
    noise a chain moves too little during warm-up for a useful variance
    estimate.)

    Parameters
    ----------
    a : Adaptation or None
        The adaptation state; ``None``: no adaptation.
    step_size : float
        The current step size (returned unchanged when nothing adapts).
    iteration : int
        Iterations completed, this one included (1-based).
    accept : float
        This iteration's released acceptance probability.
    warmup : int
        Warm-up length; after it nothing changes.
    target : float
        Target acceptance probability.

    Returns
    -------
    a : Adaptation or None
    step_size : float
        The step of the next iteration.
    """
    if a is None or iteration > warmup:
        return a, step_size
    a, step = dual_averaging(a, accept, target)
    if iteration in {int(f * warmup) for f in ADAPT_RESTARTS} and iteration < warmup:
        a = new_adaptation(math.exp(a.log_step_bar), boost=2.0)
        step = math.exp(a.log_step_bar)
    if iteration == warmup:
        step = math.exp(a.log_step_bar)
    return a, step
