"""Private mode and curvature: damped Newton in a learned frame, averaged one-step estimates.

The search works in a *frame* ``A`` (a ``d x d`` matrix; local coordinates
``u`` with ``theta = theta_k + A u``) that it learns as it goes, so that the
clip bounds can be the public forecast of :mod:`stan_dp.adaptation.forecast`
instead of a guess in the model's own units.  In the posterior's own frame
(``A A' = Sigma``) a regular model's per-row scores have norms
``~ sqrt(chi2_d / n)`` and its per-row Hessians Frobenius norms
``~ chi2_d / n``, whatever the units of the data (metres or kilometres, an
offset predictor correlated with the intercept: a full-matrix frame absorbs
any affine reparametrisation).

Steps (every data access a Gaussian release written to the ledger):

0. **Far phase** (``settings.far_rounds``, :mod:`stan_dp.adaptation.far`):
   sign-led steps on released per-coordinate gradient votes bring a start
   that is far from the posterior (a scale parameter at 1 under an outcome
   around 100) to it; the steps below start where it ends.
1. **Scale** at the initial point: a private 90th percentile ``t_j`` of the
   per-row curvatures ``|d^2 loglik_i / d theta_j^2|`` (central differences
   of the per-row gradients) for every coordinate
   (:func:`~stan_dp.adaptation.quantile.private_quantiles`) gives the
   initial diagonal frame ``A_0 = diag(1 / sqrt(n t_j))``: the local
   curvature's scale, erring narrow (a high percentile; a coordinate only a
   fifth of the rows depend on, like a group effect, still gets a scale).  (The gradients' spread would overstate the curvature
   by ``~ r^2 / sigma^2`` far from the mode: a scale parameter started two
   decades too small then freezes every coordinate.)  A coordinate whose
   median is zero (rows mostly do not depend on it, e.g. a group effect)
   starts at scale 1.
   With ``settings.orient`` (by default where the public forecast says the
   release can show a ridge) the frame is then turned along
   the principal directions of the rows' curvature (:func:`_oriented_frame`),
   so that a ridge the diagonal frame hides (an intercept and a slope on a
   predictor far from 0) is not left to the rounds.
2. **Rounds** ``k = 0..K-1`` at ``theta_k`` in frame ``A_k``: release
   ``G = sum_i clip_{C_g}(A_k' g_i)`` and ``H = sum_i clip_{C_H}(-A_k' H_i A_k)``
   (per-row Hessians by central differences of per-row gradients along the
   frame's axes, symmetrised; Frobenius clip), add the exact prior terms
   (public), and make ``H`` positive definite (:func:`_shrunk_eigen`: the
   released part's eigenvalues shrunk by their signal-to-noise ratio, ``tau``
   twice the noise's spectral norm, the exact prior added, absolute values,
   floored at ``min(1, tau)``): a noisy release cannot widen the frame by
   noise alone; a direction it cannot resolve keeps its scale where
   ``tau >= 1`` and widens by at most ``1 / sqrt(tau)`` a round where
   ``tau < 1`` (its curvature is then shown to be below about ``tau``).  The one-step estimate
   ``theta_k + A_k H^-1 G`` is recorded with its noise covariance
   ``A_k H^-1 (s_G^2 I) H^-1 A_k'``; the chain of points moves to it within a
   trust region (frame units: unbounded until an overshoot — the released
   directional derivative at the new point points back, and the search
   returns to the secant point, in the frame the step was made in unless the
   step's release showed that frame ten times too wide,
   :data:`KEEP_FRAME_CURVATURE`; a move to a pool of one round is judged
   too, against :data:`POOL_OVERSHOOT` — then twice the distance to that point,
   grown x4 after every full step) and public caps on each unconstrained
   coordinate (:attr:`AdaptationSettings.max_step`) and on each log- or
   logit-transformed one (:data:`LOG_STEP_MAX`, :data:`BOUNDED_STEP_MAX`, 3 e-folds); the frame becomes
   ``A_{k+1} = A_k Q Lambda^{-1/2} Q'`` (``H = Q Lambda Q'``; the symmetric root,
   :func:`_next_frame`).
   Near the mode, part of each round's count releases counts the rows
   beyond the gradient bound (the clipping bias the result reports); with
   ``settings.adaptive_clip`` the bound rises while they are more than the
   pooled noise can cover (:func:`allowed_clipped_rows`): clipping bias at
   strong signal.  A round away from the pool raises its bounds by a private
   median of the norms instead, never below the factor the counts reached
   (:func:`_median_bound_factor`).
3. **Pool** the rounds whose Newton step is within a few posterior sds (plus
   its noise) of their point: their mean released curvature (in ``theta``
   space, made positive definite once against the pooled noise; a round made
   in a frame much narrower than the current one is left out of the mean,
   :func:`~stan_dp.adaptation.pooling.curvature_weights`) and their
   one-step estimates with it, precision-weighted (:func:`_pooled_estimate`);
   the search moves to the pooled estimate (with a declared group's location
   and scale, which no row depends on, at the expected prior's mode given the
   pooled elements:
   :func:`~stan_dp.adaptation.groups.pooled_mode_with_expected_hyperparameters`),
   and rounds far from it in its metric leave the pool.  Where that left at
   most half of the last run of near rounds in the pool (rounds far from it
   by their noise alone), the others within their noise's reach of its
   estimate come back unless Hausman's test says they disagree with it, or
   they disagree among themselves beyond their noise (:func:`_final_rounds`).  The
   final pool gives the mode, the covariance (inverse pooled curvature) and
   the noise covariance.  The search has
   *settled* when at least two rounds are pooled and the pooled curvature is
   resolved in every direction; otherwise the result says so.
4. **Exact prior** (settled searches): coordinates the prior holds (a
   hierarchical mean or scale: their released data curvature is within 3
   noise sds of 0, the exact prior's beyond) are moved to the exact
   conditional maximum of the log prior given the others
   (:func:`_exact_prior_mode`, public), and the curvature takes the prior's
   at that point, not an average over the rounds' points.
5. **Final check** (where the plan has it: the rounds are blind,
   :func:`~stan_dp.adaptation.plan.check_planned`): one release of the rows'
   clipped log-likelihood differences between every round's point and the
   estimate; a search that did not settle reports the point the rows prefer
   beyond the check's noise instead (:mod:`stan_dp.adaptation.final_check`).

This module holds the rounds (:func:`private_mode`, every release a round
makes); the rest lives beside it, by what it knows: :mod:`.plan` (the settings
and every release planned from public facts), :mod:`.initial_frame` (step 1),
:mod:`.curvature` (per-row curvature and a round's frame algebra:
:func:`_shrunk_eigen`, :func:`_next_frame`, :func:`_gain_floor`),
:mod:`.pooling` (steps 3 and 4, post-processing), :mod:`.final_check` (step 5) and
:mod:`.result`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stan_dp.adaptation.curvature import (_gain_floor, _next_frame, _round_rows, _step_eigen, flat_likelihood,
                                          centred_coordinates, log_coordinates, logit_coordinates,
                                          prior_neg_hessian, reported_covariance)
from stan_dp.adaptation.clipped_count import pooled_clipped_rows
from stan_dp.adaptation.curvature_bound import CurvatureBound
from stan_dp.adaptation.far import far_phase
from stan_dp.adaptation.groups import (NO_LOCATION, element_axes_widened, floor_elements_scaled,
                                       group_directions, group_locations, grouped_frame,
                                       hyperparameter_scale, hyperparameters_at_expected_mode,
                                       pooled_mode_with_expected_hyperparameters,
                                       resolved_off_ridges, ridge_curvature_from_prior,
                                       ridge_curvature_over_scales, ridge_noise_from_prior,
                                       ridges_at_prior_mode, rowless_hyperparameters,
                                       unpooled_bounded_scales)
from stan_dp.adaptation.final_check import final_check
from stan_dp.adaptation.forecast import whitened_grad_scale, whitened_hessian_scale
from stan_dp.adaptation.initial_frame import _initial_scale, _oriented_frame, initial_scale_release
from stan_dp.adaptation.plan import (NOISE_SPECTRAL_FACTOR, AdaptationSettings, allowed_clipped_rows,
                                     clip_inflation, clip_median_tail, noise_multipliers, planned_settings)
from stan_dp.adaptation.pooling import (_exact_prior_mode, _final_rounds, _pooled_estimate,
                                        curvature_diagonal_sd, model_reach, trimmed_pool)
from stan_dp.adaptation.prior_start import choose_start
from stan_dp.adaptation.quantile import private_quantiles
from stan_dp.adaptation.releases import Ledger, clipped_matrix_sum, clipped_vector_sum, noisy_counts
from stan_dp.adaptation.result import TAIL_MULTIPLE, AdaptationResult
from stan_dp.adaptation.skew import skew_check
from stan_dp.aggregates import RowColumns, queries
from stan_dp.density import prior_gradient

__all__ = ["private_mode", "BOUNDED_STEP_MAX", "KAPPA_STEP", "KAPPA_ADJUST_MAX", "KEEP_FRAME_CURVATURE",
           "LOG_STEP_MAX", "OVERSHOOT", "POOL_OVERSHOOT"]


KAPPA_STEP = 1.3
"""Factor by which ``adaptive_clip`` raises the gradient bound."""
KAPPA_ADJUST_MAX = 4.0
"""Largest factor ``adaptive_clip`` applies to the public gradient bound."""


LOG_STEP_MAX = 3.0
"""Largest move of a log-transformed coordinate (a parameter declared with a lower bound only, read
from the program: :func:`~stan_dp.adaptation.curvature.log_coordinates`) in one round's full step:
a factor ``e^3`` (about 20) on the parameter.  A capped round is not near, as under
:attr:`~stan_dp.adaptation.plan.AdaptationSettings.max_step`.

Along ``log s`` the rows' curvature scales like ``s`` (a rate: Poisson, exponential) or ``1 / s^2``
(a scale: ``r^2 / sigma^2``), so over a move of ``D`` the quadratic model that set the step is off
by a factor up to ``e^(2 D)``: beyond a few e-folds the step is an extrapolation.  A Poisson rate of
mostly-zero counts (``real<lower=0> lambda``, mean 0.05, 1,000 rows, epsilon = 16) left by the far
phase at ``log lambda = -12.4`` (mode -2.96), where every row's curvature is ``lambda = 4e-6``, took
a first step of +273; the overshoot's step back (a tenth of it) left it at ``lambda = 3e6``, from
where the remaining 28 rounds did not return (128 and 153 posterior sds off in two of four runs).
Capped at 3 (with :func:`_median_bound_factor`'s floor) the four runs ended 0.03-2.97 sds off, at
6 0.09-23, at 10 0.61-97 (the step back from a capped step that overshot lands in the flat region
again) (docs/adaptation.md §3, "Log-scale steps")."""
BOUNDED_STEP_MAX = 3.0
""":data:`LOG_STEP_MAX` for a logit-transformed coordinate (a parameter declared with both bounds,
read from the program: :func:`~stan_dp.adaptation.curvature.logit_coordinates`): near either bound
its unconstrained value is the log of the distance to that bound, and a scale declared
``real<lower=0, upper=100> sigma`` (the BUGS idiom) behaves there as ``log sigma`` does.  Without
the cap, ``d_km ~ normal(a + b * temp, sigma)`` (600 rows, ``temp`` centred, ``sigma`` 0.002
under ``uniform(0, 100)``) took Newton steps of 5-64 along ``u = logit(sigma / 100)`` from where
the far phase left it (``tests/test_uniform_scale.py``'s NumPy replica, epsilon = 16, 8 seeds);
capped, 2 of 12 runs ended more than 10 posterior sds off instead of 4; the Stan program
(``benchmarks/user_programs/kmc.stan``, the mode against NUTS, seeds 1-6) 0.56, 0.40, 0.34, 32,
0.57, 0.93 instead of 0.56, 0.55, 20, 31, 42, 0.64 (docs/adaptation.md §7, "A scale far above its
mode under a uniform prior")."""
KEEP_FRAME_CURVATURE = 100.0
"""A step-back (an overshoot or a collapse after a full step) returns to the frame that step was made
in, unless the step's own release resolved a curvature of at least this many times that frame's
unit along some direction (its largest eigenvalue, frame units, after the noise's shrinkage): that
frame was then at least ten times too wide there, measured at the point the search steps back
towards, and the step-back keeps the narrower frame that release set.

Restoring the step's frame is right for an ordinary overshoot: the release past the line maximum
describes a point the search leaves, and the frame it stepped in was about right (its largest
eigenvalue 0.6-5 at the step-backs of the user programs ``poishier``, ``cross``, ``skewn`` and
``cauchyreg``).  But where a scale comes down from far above its mode the coefficients' curvature
grows like ``1 / sigma^2``; the restored frame was 30-100 times too wide along them, the next full
step in it overshot again (seen through ``sigma``'s pull), and the search alternated for every
remaining round, each release reading a larger curvature in the restored frame (12 -> 3e4): the
NumPy replica of ``d_km ~ normal(a + b * temp, sigma)`` with ``real<lower=0, upper=100> sigma``
(``tests/test_uniform_scale.py``, epsilon = 16, noise seeds 1-24 on two data sets) ended more than
10 posterior sds off in 7 of 48 runs (up to 1,271); with this in none (at most 1.69).  Keeping
the release's frame at every step-back closed that too but cost the user programs whose
step-backs are ordinary; this threshold left all 132 of their runs and the README's GLMs as they
were, and changed 2 of 648 battery runs (docs/adaptation.md §7, "A scale far above its mode under
a uniform prior")."""
OVERSHOOT = 0.5
"""A full Newton step overshot when the released slope back along it at the new point is more than
this times the slope it stepped along (and beyond the noise: :func:`_went_too_far`)."""
POOL_OVERSHOOT = 10.0
"""The same factor for a move to the estimate of a pool that holds one round (:func:`_went_too_far`).

Along a step ``du = g / lam`` (frame units) on a quadratic whose curvature along it is ``r lam``,
the slope at the new point is ``(1 - r)`` times the slope stepped along: a factor ``f`` means
``r > 1 + f``, the curvature underestimated ``1 + f`` times (0.5: the step went beyond 1.5 times
the line maximum).  A move to a pool's estimate near the mode lands on the estimate's noise, which
turns the slope back by about as much as it stepped along: a Poisson GLM at 1,000 rows, epsilon = 1
had ratios of -0.3 to -1.9 at 2-5.5 noise sds, and judged with the full step's 0.5, 20 of its 24
runs changed (median worst error 4.02 -> 6.42 sds; the same rule was measured worse on the ordered
logit and the gamma GLM too: docs/adaptation.md §7).  A pool's move whose slope came back 135 to
2e13 times what it stepped along went into a region where the rows are flat and the prior holds:
a Student-t regression at 500 rows, epsilon = 1, whose first round (blind, every eigenvalue at the
floor, and near by its large noise) moved ``log sigma`` by +23 and the next round, on the prior's
gradient alone, 1e8 sds the other way (now 38); ``radon``'s group scale ran to infinity so in 4 of
24 runs at 1,000 rows, epsilon = 4 (5e27-6e55 sds; now 28, 32, 61 and 3.9e4, the last 58 with
Newton's step beyond the curvature cap: :data:`~stan_dp.adaptation.curvature.STEP_CURVATURE_TOP`).
10 separates the two: 11 times too little curvature is not noise, and no other run of the paired
ones changed (docs/adaptation.md §3, "A move to a pool of one round is judged too")."""


def _went_too_far(slope: float, previous_slope: float, back_norm: float, sd_g: float, pooled: bool) -> bool:
    """Whether the last move overshot: the released slope back along it at the new point.

    ``slope`` is the released gradient (frame units) dotted with the move ``back`` (norm
    ``back_norm``, in this frame), ``previous_slope`` the same at the point the move left,
    ``sd_g`` the gradient release's noise sd.  Overshot: ``slope`` is negative beyond 2 noise sds
    of its projection and beyond :data:`OVERSHOOT` (a full Newton step) or :data:`POOL_OVERSHOOT`
    (``pooled``: a move to the estimate of a pool that holds one round) times
    ``previous_slope``; a pool's move that did not go up the released slope
    (``previous_slope <= 0``) has no such ratio and is not judged.
    """
    if pooled and not previous_slope > 0.0:   # the pool's estimate was not along the released gradient
        return False
    factor = POOL_OVERSHOOT if pooled else OVERSHOOT
    return bool(slope < -2.0 * sd_g * back_norm and slope < -factor * previous_slope)


def _median_bound_factor(median: float, raised: float, kappa_far: float) -> float:
    """Factor on the public gradient bound in a round that starts with no pooled round:
    ``kappa_far`` times the released median of the rows' whitened norms (in units of the bound),
    and at least ``raised``, the factor the near rounds' clipped-row counts have raised the bound
    to (``adaptive_clip``; 1 until they do).

    Without that floor a round the search stepped back to, out of the pool, returned to the
    public bound that the counts had shown clips too many rows, in a frame wider than the
    posterior's, where those rows are clipped hardest.  A Poisson rate with 5 % of counts
    non-zero (3,000 rows, epsilon = 16): every such row's whitened gradient was 7 times the
    bound, their clipped sum fell below the many zero rows' pull, the released gradient pointed
    away from the mode (-16 noise sds at a quarter of the rate), and the search alternated 20
    rounds between that point and the pool's, 23 posterior sds off (docs/adaptation.md §3,
    "Rounds").  Post-processing of released values.
    """
    return max(raised, kappa_far * median)


def _without_rowless(grad: np.ndarray, hess: np.ndarray, frame: np.ndarray,
                     rowless: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A near round's released data gradient and curvature (``frame`` units) with their parts
    along the ``rowless`` coordinates removed, mapped to theta space (post-processing).

    ``rowless`` are a declared group's location and ``log sigma`` (a zero-mean group's scale too)
    whose released count says no row depends on them
    (:func:`~stan_dp.adaptation.groups.rowless_hyperparameters`): the rows' summed
    gradient and curvature in theta space are exactly 0 along them.  In the frame ``A`` of the
    release that says ``W' g = 0`` and ``H W = 0`` for ``W`` an orthonormal basis of the span of
    ``A^-1 e_r`` (``r`` rowless).  The release's noise is isotropic there, so the least-squares
    estimate under that constraint is the orthogonal projection, ``Pi g`` and ``Pi H Pi`` with
    ``Pi = I - W W'``: it removes the noise along ``W`` and leaves the rest (its noise
    ``Pi E Pi`` has at most the spectral norm of ``E``).  Zeroing the theta-space entries instead
    is an oblique projection where the frame mixes a location with its elements
    (:func:`~stan_dp.adaptation.groups.grouped_frame`): in ``radon`` (1,000 rows, epsilon = 16) it
    moved the noise of twenty element columns onto the group's direction and the searches ended
    along the intercepts' ridge with the slope, 4.9-9.9 sds off against 1.2-2.2.

    Why: the noise along ``W`` reached ``theta`` all the same (``A^-T E A^-1``): with
    ``mu ~ normal(m0, 100)`` and no row on ``m0`` (six group intercepts, 1,000 rows, epsilon =
    16) the reported precision's ``m0`` row was 1.6-2.0 on the diagonal and up to 5.6 off it,
    where the exact one is the prior's alone, 6e-4 and -1e-4, and ``m0``'s draws had sd 0.7-1.0
    against 40.9 (docs/adaptation.md §3, "A group's location with no rows").  The pooled
    estimate's noise model is kept (``s^2`` along every frame axis, where ``Pi`` left none along
    ``W``: the safe side); the prior holds those coordinates and moves them to its conditional
    mode (:func:`~stan_dp.adaptation.pooling._exact_prior_mode`).
    """
    inv_frame = np.linalg.inv(frame)
    if not rowless.any():
        return inv_frame.T @ grad, inv_frame.T @ hess @ inv_frame
    w, _ = np.linalg.qr(inv_frame[:, rowless])
    grad = grad - w @ (w.T @ grad)
    hess = hess - w @ (w.T @ hess)
    hess = hess - (hess @ w) @ w.T
    grad, hess = inv_frame.T @ grad, inv_frame.T @ hess @ inv_frame
    # exactly 0 there (the projection leaves round-off)
    return np.where(rowless, 0.0, grad), np.where(rowless[:, None] | rowless[None, :], 0.0, hess)


def private_mode(
    density: Any,
    *,
    n_public: int,
    pld_mean: float,
    relation: str,
    rng_noise: np.random.Generator,
    init: np.ndarray,
    settings: AdaptationSettings = AdaptationSettings(),
    trace: list | None = None,
    prior_mode: np.ndarray | None = None,
) -> AdaptationResult:
    """Private mode, curvature and frame of ``density`` with PLD-mean budget ``pld_mean``.

    Parameters
    ----------
    density : RowDensity
        Needs ``row_log_lik_grad`` (or the aggregate queries of :mod:`stan_dp.aggregates`:
        the per-row statistics are computed where the rows live) and ``log_prior``
        (``log_prior_grad`` used if present).
    n_public : int
        Row count used in the public bounds (public under replace-one; under
        add/remove a value the user declared public).
    pld_mean : float
        Budget of the whole adaptation as a PLD mean ``sum 1 / (2 z^2)``.
    relation : str
        Neighbouring relation.
    rng_noise : numpy.random.Generator
        Privacy noise stream.
    init : ndarray
        Data-independent starting point (unconstrained).
    settings : AdaptationSettings
        Tuning constants.  Where ``settings.start_share`` is positive, the search first lets the
        rows choose its start on the way from ``init`` to ``prior_mode`` (one or two releases,
        :func:`~stan_dp.adaptation.prior_start.choose_start`).
    trace : list, optional
        If given, one dict per round is appended (released quantities only).  A Newton
        round's dict carries its point, step, released eigenvalues and bounds, the frame it used
        (``frame``; ``frame_sd`` is the next round's), its released gradient in that frame
        (data part plus the exact prior) with the release's noise sd (``grad``, ``grad_sd``)
        and the pool's size after it (``pooled``): enough to set each frame against a
        reference posterior (docs/adaptation.md §7, "Frames the rounds do not correct").
    prior_mode : ndarray, optional
        The prior's mode (:func:`~stan_dp.adaptation.prior_start.prior_mode_start`, public), the
        other start the rows choose from; needed where ``settings.start_share`` is positive.

    Returns
    -------
    AdaptationResult
    """
    d = int(density.dim)
    s = planned_settings(settings, n_public, d, pld_mean)
    ledger = Ledger(relation)
    zs = noise_multipliers(pld_mean, s)   # the same plan adaptation_releases() accounts
    z_q, z_c, z_g, z_h = zs["scale"], zs["clip"], zs["gradient"], zs["curvature"]
    c_g = clip_inflation(s, n_public, pld_mean, relation) * whitened_grad_scale(n_public, d)
    c_h = s.kappa_hessian * whitened_hessian_scale(n_public, d)
    median_tail = clip_median_tail(n_public, z_c)   # public, the same every round

    theta = np.array(init, dtype=float)
    holder = queries(density)
    bounded = logit_coordinates(density, d)   # public: read from the program
    logs = log_coordinates(density, d)   # public: read from the program (LOG_STEP_MAX)
    start_choice = None
    if s.start_share:
        if prior_mode is None:
            raise ValueError("settings.start_share is positive but no prior_mode was given")
        start_choice = choose_start(holder, theta, prior_mode, logs, zs["start"], rng_noise, ledger)
        theta = start_choice.point.copy()
    far_points: list[np.ndarray] = []
    declared = group_locations(density, d)   # public: read from the program (none: as before)
    groups = group_directions(declared, d)
    # public: the declared groups' elements (all False where there are none)
    elements = np.any([m for m, _ in declared], axis=0) if declared else np.zeros(d, dtype=bool)
    if s.far_rounds:
        far_scale, far_floor = _initial_scale(holder, theta, n_public, s, zs["far scale"], rng_noise, ledger,
                                              "far scale count", groups=groups)
        far_points = far_phase(holder, density, theta, local_sd=far_scale, moving=~far_floor,
                               n_public=n_public, rounds=s.far_rounds, multipliers=zs,
                               max_step=s.max_step, rng_noise=rng_noise, ledger=ledger, groups=groups,
                               on_round=None if trace is None else trace.append)
        theta = far_points[-1].copy()
    initial = initial_scale_release(holder, theta, n_public, s, z_q, rng_noise, ledger, "scale count",
                                    sparse_rows=True, groups=groups,
                                    elements=elements)
    scale, at_floor = initial.scale, initial.at_floor
    group_scale, group_at_floor, scale, at_floor = scale[d:], at_floor[d:], scale[:d], at_floor[:d]
    data_coordinates = ~at_floor
    # a group's location and scale no row depends on, a zero-mean group's scale too: their data
    # gradient and curvature are 0 (_without_rowless; docs/adaptation.md §3, "A zero-mean group's
    # scale in the pooled rounds")
    rowless = rowless_hyperparameters(density, d, data_coordinates, zero_mean=True)
    # a group's location and scale that no row depends on: the exact prior's scale (public)
    scale = hyperparameter_scale(density, theta, scale, at_floor, s.fd_step)
    # a group's elements too few rows depend on to count: the group's quantile over their rows
    scale = floor_elements_scaled(scale, at_floor, declared, initial.threshold[d:], group_at_floor,
                                  initial.depending, initial.count_sd)
    # a group's direction in its location's column, where its elements have no scale; the
    # orientation then sees that column as one the rows depend on (a ridge with a slope on an
    # unscaled predictor turns there as an intercept's would)
    frame, grouped = grouped_frame(np.diag(scale), declared, group_scale, group_at_floor, at_floor)
    # the released count of rows depending on each column of the frame (a grouped column's is its
    # group's direction's): where few rows depend on a ridge, its direction count looks among them
    depending = initial.depending[:d].copy()
    for g, (_, loc) in enumerate(declared):
        if loc != NO_LOCATION and grouped[loc]:
            depending[loc] = initial.depending[d + g]
    turned = False
    if s.orient:
        frame, turned = _oriented_frame(holder, theta, frame, data_coordinates | grouped, n_public, s,
                                        zs["orientation"], zs["direction"], rng_noise, ledger,
                                        depending=depending, count_sd=initial.count_sd,
                                        elements=elements)

    rounds: list[dict[str, Any]] = []
    pull: list[np.ndarray] = []   # per round: released gradient per coordinate, in its noise sds
    pool: list[dict[str, Any]] = []
    streak: list[dict[str, Any]] = []   # every near round since the last round that was not near
    tail_counts: list[float] = []   # released: rows beyond TAIL_MULTIPLE x the bound, per near round
    tail_sd = math.inf
    # adaptive_clip: factor on the public gradient bound near the mode, and the released counts
    # of rows beyond the bound at the current factor, and their mean's noise sd
    adjust, clipped_counts, sd_n = 1.0, [], math.nan
    level = 0   # raises so far: the bound is c_g * KAPPA_STEP ** level near the mode
    level_counts: dict[int, list[float]] = {}   # every level's released counts (clipped_count)
    allowed = allowed_clipped_rows(z_g, s.rounds, relation)
    adaptive = bool(s.adaptive_clip)
    if not 0 < s.clipped_repeats < s.clip_rounds:
        raise ValueError("clipped_repeats must be between 1 and clip_rounds - 1")
    if not s.first_radius > 0:   # NaN too
        raise ValueError(f"first_radius must be positive (inf: no trust region), got {s.first_radius!r}")
    outer = bool(flat_likelihood(holder))   # public: the program's outcome family (FLAT_FAMILIES)
    # the factor on the public curvature bound near the mode, and the counts that raise it
    curvature_bound = CurvatureBound(s.raise_curvature, s.raise_curvature_tail, c_h, n_public, z_c, s.rounds)
    # the rest of the near rounds' count releases count the gradient's tail
    tail_repeats = s.clip_rounds - s.clipped_repeats - curvature_bound.releases
    if tail_repeats < 1:
        raise ValueError("clipped_repeats must leave a tail count: at most clip_rounds - 1, one fewer "
                         "for each of raise_curvature and raise_curvature_tail")
    # trust region of a full step, frame units: the first round's (first_radius sqrt(d)), then
    # one set by an overshoot; 4 times larger after every full step that was not taken back
    radius = s.first_radius * math.sqrt(d)
    gain = s.step_gain * n_public   # largest summed first-order gain per eigen-direction
    path = [np.array(init, dtype=float), *far_points]   # ends at theta, where the rounds start
    previous: dict[str, Any] | None = None
    evaluated: list[np.ndarray] = []   # every round's point: the final check's candidates
    for k in range(s.rounds):
        evaluated.append(theta.copy())
        # near the mode only (a pool exists): far out, where the rows saturate, their curvature in
        # the bounded parameter vanishes and the steps it sets wandered (docs/adaptation.md §3,
        # "Bounded coordinates")
        stat = holder.row_statistic(_round_rows, theta, frame, s.fd_step, np.array([c_g, c_h]),
                                    centred_coordinates(bounded, theta, frame, n_public) if pool else None,
                                    outer)
        whitened = RowColumns(holder, stat, 0, d)
        mats = RowColumns(holder, stat, d, d + d * d)
        norms = RowColumns(holder, stat, d + d * d, d + d * d + 2)
        # the level this round's releases are made at: a raise below takes effect from the next
        # round; away from the pool the medians' bound is at least this level's (whose count,
        # the larger, the report then uses: clipped_count)
        release_level = level
        release_near = bool(pool)   # this round's releases are a near round's
        if release_near:
            # Near the mode the bounds are the public forecast and the medians
            # are not needed: the same count releases (same multiplier) check
            # the tail instead — rows beyond TAIL_MULTIPLE times the gradient bound.
            tail = RowColumns(holder, stat, d + d * d, d + d * d + 1)
            counts = noisy_counts(rng_noise, tail, np.array([TAIL_MULTIPLE]), z_c, ledger,
                                  f"tail count, round {k}", repeats=tail_repeats)
            tail_counts.append(float(np.mean(counts)))
            tail_sd = z_c / math.sqrt(tail_repeats)
            # the curvature bound's counts: a raise holds from this round on, and the pool, whose
            # rounds were released at the lower bound, restarts (curvature_bound)
            if curvature_bound.near_round(rng_noise, RowColumns(holder, stat, d + d * d + 1, d + d * d + 2),
                                          ledger, k):
                pool.clear()
                streak.clear()
            bound_g, bound_h = c_g * adjust, c_h * curvature_bound.adjust
            # rows beyond this round's bound (released), pooled over the rounds at this bound: the
            # clipping bias the result reports (every run); with adaptive_clip, too many of them
            # raise the bound for the next rounds (post-processing; none after the last round: a
            # raise there would leave the report naming a bound no count was made at)
            counts = noisy_counts(rng_noise, tail, np.array([adjust]), z_c, ledger,
                                  f"clipped count, round {k}", repeats=s.clipped_repeats)
            clipped_counts.append(float(np.mean(counts)))
            level_counts.setdefault(level, []).append(clipped_counts[-1])
            sd_n = z_c / math.sqrt(s.clipped_repeats * len(clipped_counts))
            if (adaptive and k + 1 < s.rounds and float(np.mean(clipped_counts)) - 2.0 * sd_n > allowed
                    and adjust * KAPPA_STEP <= KAPPA_ADJUST_MAX):
                adjust *= KAPPA_STEP
                clipped_counts = []
                level += 1
        else:
            # Far from the mode (or in a frame that is still wrong) the rows are
            # larger than the public forecast: a private median of both norms
            # raises the clip bounds so that the step is not throttled by clipping.
            # where the count noise is large the medians look higher up (clip_median_tail): a
            # false count at the top of the search would raise the bounds a million-fold
            medians, _ = private_quantiles(rng_noise, norms, tail=median_tail,
                                           n_public=n_public, rounds=s.clip_rounds, noise_multiplier=z_c,
                                           ledger=ledger, what=f"clip count, round {k}",
                                           log2_range=(-20.0, 60.0))
            bound_g = c_g * _median_bound_factor(float(medians[0]), adjust, s.kappa_far)
            bound_h = c_h * max(curvature_bound.adjust, s.kappa_far * float(medians[1]))
        g_rel, _ = clipped_vector_sum(rng_noise, whitened, bound_g, z_g, ledger, f"gradient sum, round {k}")
        sd_g = ledger.entries[-1].noise_sd
        h_rel, sd_h = clipped_matrix_sum(rng_noise, mats, bound_h, z_h, ledger, f"curvature sum, round {k}")
        _, pg = prior_gradient(density, theta)
        grad = g_rel + frame.T @ np.where(np.isfinite(pg), pg, 0.0)
        prior_hess = prior_neg_hessian(density, theta, frame, s.fd_step)
        tau = NOISE_SPECTRAL_FACTOR * sd_h * math.sqrt(2.0 * d)
        curvature_bound.observe(h_rel, prior_hess, tau, near=release_near)
        lam_step, lam, q = _step_eigen(h_rel, prior_hess, tau)   # lam capped: frame, noise level, pool
        lam, gain_capped = _gain_floor(lam, q, g_rel, gain)
        du = q @ ((q.T @ grad) / np.maximum(lam, lam_step))   # Newton's step beyond the cap too
        h_inv = (q / lam) @ q.T
        inv_frame = np.linalg.inv(frame)
        used_frame = frame   # the frame this round's releases were made in (rebound, never mutated)
        # theta-space gradient A^-T grad; its release's noise there has sd s |column j of A^-1|
        with np.errstate(divide="ignore", invalid="ignore"):
            pull.append((inv_frame.T @ grad) / (sd_g * np.linalg.norm(inv_frame, axis=0)))

        # Did the previous full step go too far?  The released directional
        # derivative here points back (overshoot), or the released curvature
        # collapsed (rows left their domain or saturated): step back instead.
        # A move to a pool of one round is that round's own Newton step, judged
        # too, but only for an overshoot far beyond its estimate's noise
        # (POOL_OVERSHOOT); a pool's move lands on that noise, not out of the rows' domain.
        overshoot = collapse = False
        if previous is not None and previous["full"] and (not previous["near"] or previous["single"]):
            back = inv_frame @ previous["move"]
            slope = float(grad @ back)
            overshoot = _went_too_far(slope, previous["slope"], float(np.linalg.norm(back)), sd_g,
                                      pooled=previous["near"])
            collapse = (not previous["near"] and float(np.trace(h_rel)) < s.collapse * d
                        and float(np.trace(h_rel)) < tau)
        if (overshoot or collapse) and previous["near"]:
            pool.clear()   # the one pooled round's estimate went too far: it leaves the pool
            streak.clear()
        if overshoot or collapse:
            t = 0.25
            if overshoot and not collapse and previous["slope"] > 0:
                t = previous["slope"] / (previous["slope"] - slope)
            t = float(np.clip(t, 0.1, 0.5))
            radius = max(2.0 * t * previous["length"], math.sqrt(d))
            move = t * previous["move"]
            theta = previous["theta"] + move
            if previous["top_curvature"] < KEEP_FRAME_CURVATURE:   # else keep the frame its release set
                frame = previous["frame"]
            previous = {"theta": previous["theta"], "frame": frame, "move": move, "full": False,
                        "slope": previous["slope"] * t, "near": False, "single": False,
                        "length": t * previous["length"], "top_curvature": 0.0}
            rounds.append({"ok": False})
        else:
            if previous is not None and previous["full"]:
                radius *= 4.0   # the last full step did not overshoot: the trust region grows
                gain *= 4.0
            length = float(np.linalg.norm(du))
            trusted = length <= radius
            if not trusted:
                du = du * (radius / length)
            move = frame @ du
            biggest = float(np.max(np.abs(move))) if move.size else 0.0
            capped = biggest > s.max_step
            if capped:
                move *= s.max_step / biggest
            # a few e-folds along a log or logit coordinate: beyond, the quadratic model extrapolates
            for mask, cap in ((logs, LOG_STEP_MAX), (bounded, BOUNDED_STEP_MAX)):
                along = float(np.max(np.abs(move[mask]))) if mask is not None else 0.0
                if along > cap:
                    move *= cap / along
                    capped = True
            noise_level = sd_g * math.sqrt(float(np.sum(h_inv * h_inv)))
            # Near: the Newton step is within a few posterior sds plus its noise and was not
            # shortened (coordinate cap, trust region, gain cap).  Whether the release resolved
            # the curvature is not asked here but of the pool (settled: no pooled eigenvalue at
            # the noise floor), since in an unresolved frame a short step in frame units says
            # little about the distance; a round with most eigenvalues at the floor can pass
            # (the floored curvature makes its noise level large: docs/adaptation.md §7, "Many
            # groups at small n").
            near = (float(np.linalg.norm(du)) <= 3.0 * (noise_level + math.sqrt(d)) and not capped
                    and trusted and not gain_capped)
            rounds.append({"ok": near, "one_step": theta + frame @ du,
                           "noise_cov": sd_g**2 * frame @ h_inv @ h_inv @ frame.T,
                           "curvature": inv_frame.T @ ((q * lam) @ q.T) @ inv_frame})
            if near:
                # Near the mode: pool this round's released gradient and curvature
                # with the previous near rounds and move to the pooled estimate,
                # so that neither the evaluation point nor the frame wanders by
                # the noise of a single round.
                # in theta space, without their parts along a group's location and scale that no
                # row depends on (exactly 0: _without_rowless)
                data_grad, data_hess = _without_rowless(g_rel, h_rel, used_frame, rowless)
                pool.append({"theta": theta.copy(), "grad": data_grad + np.where(np.isfinite(pg), pg, 0.0),
                             "level": release_level, "grad_sd": sd_g,
                             "hess": data_hess,
                             "prior_hess": inv_frame.T @ prior_hess @ inv_frame, "sd_h": sd_h,
                             "frame": used_frame, "data_coordinates": data_coordinates, "projected": rowless,
                             "hess_diag_sd": curvature_diagonal_sd(sd_h, inv_frame)})
                streak.append(pool[-1])
                pooled = _pooled_estimate(pool, frame)
                # In a frame the release could not resolve, a short step in frame units
                # says little about the distance: once the pooled curvature resolves it,
                # rounds far from the pooled mode (in its metric) leave the pool.
                # Rounds far from the pooled mode leave the pool; where it is trusted at none of
                # them, the round just made stays alone and starts a new run (trimmed_pool).
                kept, pooled, extrapolated = trimmed_pool(pool, pooled, frame, model_reach(d))
                if extrapolated:
                    streak[:] = kept
                pool[:] = kept
                # a group's location and scale, which no row depends on, at the expected prior's
                # mode given the pooled elements (an EM step each pooled round; none declared: as is)
                pooled = pooled._replace(mode=pooled_mode_with_expected_hyperparameters(
                    density, pooled, frame, s.fd_step, data_coordinates))
                move = pooled.mode - theta
                new_frame = pooled.frame
            else:
                pool.clear()
                streak.clear()
                new_frame = _next_frame(frame, lam, q)
            previous = {"theta": theta.copy(), "frame": frame.copy(), "move": move, "full": True,
                        "slope": float(grad @ (inv_frame @ move)), "near": near,
                        "single": near and len(pool) == 1,
                        "length": float(np.linalg.norm(du)), "top_curvature": float(np.max(lam))}
            theta = theta + move
            frame = new_frame
        if trace is not None:
            trace.append({"theta": path[-1], "step": move.copy(), "overshoot": overshoot,
                          "collapse": collapse, "eig": lam.copy(), "ok": rounds[-1]["ok"],
                          "gain_capped": gain_capped,
                          "tau": tau, "bound_g": bound_g, "bound_h": bound_h,
                          "frame_sd": np.sqrt(np.diag(frame @ frame.T)), "frame": used_frame.copy(),
                          "grad": grad.copy(), "grad_sd": sd_g, "pooled": len(pool)})
        path.append(theta.copy())

    dispersion, heterogeneity, least_curvature, upward = math.nan, 0.0, math.nan, None
    pool = _final_rounds(pool, streak, frame)   # near rounds that left the pool, back where they agree
    if len(pool) >= 2:
        pooled = _pooled_estimate(pool, frame, random_effects=True)
        # resolved off the rows' flat directions: along them only the prior holds the estimate
        settled = resolved_off_ridges(density, pooled, frame)
        # the saddle check in the frame the rounds were pooled in: its noise bound tau is that
        # frame's (in a widened one it understates the noise up to 4-fold, and 17 of 24 radon runs
        # at 1,000 rows, epsilon = 16 read as saddles, none before)
        least_curvature, upward = pooled.least_curvature, pooled.upward
        if not settled:
            # a group's elements divide their gradients by the curvature their own diagonal
            # entries read, not by the eigenvalue floor (element_axes_widened)
            wider = element_axes_widened(density, pooled, frame)
            if np.any(wider != 1.0):
                frame = frame * wider
                pooled = _pooled_estimate(pool, frame, random_effects=True)
        dispersion, heterogeneity = pooled.dispersion, pooled.heterogeneity
        # along an intercept ridge (mu + a[g]) the rows' gradient is exactly 0: the prior's maximum
        pooled = pooled._replace(mode=ridges_at_prior_mode(density, pooled.mode))
        if settled:
            # "rowless" for the prior's hold: at the counts' floor and not a group's element, which
            # the program says rows depend on (a 20-row intercept whose clipped curvature read
            # within noise of 0 was sent to the group's location: _exact_prior_mode)
            mode, noise_cov, curvature = _exact_prior_mode(density, pooled, frame, s.fd_step,
                                                           rowless=~data_coordinates & ~elements)
        else:   # an unresolved pool's quadratic model is not trusted beyond its one-step estimates;
            # a group's location and scale, which no row depends on, at the expected prior's mode
            mode, noise_cov, curvature = hyperparameters_at_expected_mode(density, pooled, frame, s.fd_step,
                                                                          data_coordinates)
        used = len(pool)
    else:
        last = [r for r in rounds if "one_step" in r][-1:]
        if last and "one_step" not in rounds[-1]:
            # the last round took that estimate back (it lies at or beyond the point judged too
            # far, or where the rows' curvature collapsed): report where the search stands after
            # the step back, with that round's noise and curvature
            last = [{**last[0], "one_step": theta}]
        if not last:  # every round stepped back: report where the search stands
            last = [{"one_step": theta, "noise_cov": np.diag(np.full(d, np.inf)),
                     "curvature": np.linalg.inv(frame @ frame.T)}]
        mode, noise_cov, curvature = last[0]["one_step"], last[0]["noise_cov"], last[0]["curvature"]
        mode = unpooled_bounded_scales(density, ridges_at_prior_mode(density, mode), curvature, noise_cov,
                                       data_coordinates)
        used, settled = len(last), False
    checked = -1
    if s.check_share:
        # the plan's last release: where the search did not settle, a point the rounds evaluated
        # that the rows prefer by far replaces the estimate (final_check)
        mode, checked = final_check(holder, density, evaluated, mode, zs["check"], rng_noise, ledger,
                                    use=not settled)
    # the rows' log likelihood is flat along a ridge: the prior's maximum there, again
    # after the hyperparameters moved (they set its curvature) and wherever the check put the estimate
    mode = ridges_at_prior_mode(density, mode)
    # and its curvature along them is the prior's, exactly (the release's is noise alone there);
    # the estimate's position along them follows its other coordinates, and so does its noise
    curvature = ridge_curvature_from_prior(density, mode, curvature, frame, s.fd_step)
    noise_cov = ridge_noise_from_prior(density, mode, noise_cov, frame, s.fd_step)
    # the prior's curvature there at the scale's mode understates the variance: averaged over its law
    curvature = ridge_curvature_over_scales(density, mode, curvature, frame, s.fd_step)
    covariance, frame = reported_covariance(curvature, frame)
    skew, skew_sd = np.zeros(d), np.zeros(d)
    if s.skew_share:
        # the plan's last release: how far the posterior's mean is from this mode by its shape,
        # in the reported frame (skew_check); post-processing of the mode and frame just released
        skew, skew_sd = skew_check(holder, density, mode, frame, n_public, zs["skew"], rng_noise, ledger)
    # the prior's share of the curvature at the mode, per coordinate the rows depend on
    prior_theta = np.linalg.inv(frame).T @ prior_neg_hessian(density, mode, frame, s.fd_step) @ np.linalg.inv(frame)
    total = np.diag(0.5 * (curvature + curvature.T))
    with np.errstate(all="ignore"):
        shares = np.diag(prior_theta) / total
    shares = shares[data_coordinates & np.isfinite(shares)]
    prior_share = float(np.max(shares)) if shares.size else 0.0
    tail_rows = float(np.mean(tail_counts)) if tail_counts else math.nan
    tail_rows_sd = tail_sd / math.sqrt(len(tail_counts)) if tail_counts else math.inf
    # the counts at the final bound (sd_n: of the counts since the last raise), or where the
    # estimate pools rounds, theirs at the bounds they were released at (clipped_count)
    clipped_rows = float(np.mean(clipped_counts)) if clipped_counts else math.nan
    clipped_sd = sd_n if clipped_counts else math.nan
    if used >= 2:
        pooled_count = pooled_clipped_rows([r["level"] for r in pool], [r["grad_sd"] for r in pool],
                                           level_counts, level, KAPPA_STEP,
                                           z_c / math.sqrt(s.clipped_repeats))
        if np.isfinite(pooled_count[0]):
            clipped_rows, clipped_sd = pooled_count
    return AdaptationResult(mode, covariance, 0.5 * (noise_cov + noise_cov.T), frame, c_g, ledger,
                            used, settled, np.array(path), prior_share, tail_rows, tail_rows_sd, adjust,
                            turned, clipped_rows, dispersion, heterogeneity, clipped_sd,
                            np.array(pull).reshape(len(pull), d), checked, skew_shift=skew,
                            skew_shift_sd=skew_sd, least_curvature=least_curvature,
                            upward=upward, curvature_adjust=curvature_bound.adjust,
                            start_choice=start_choice)
