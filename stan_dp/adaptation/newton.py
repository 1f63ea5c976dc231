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
   noise alone, and a direction it cannot resolve keeps its scale.  The one-step estimate
   ``theta_k + A_k H^-1 G`` is recorded with its noise covariance
   ``A_k H^-1 (s_G^2 I) H^-1 A_k'``; the chain of points moves to it within a
   trust region (frame units: unbounded until an overshoot — the released
   directional derivative at the new point points back, and the search
   returns to the secant point — then twice the distance to that point,
   grown x4 after every full step) and a public cap on each unconstrained
   coordinate (:attr:`AdaptationSettings.max_step`); the frame becomes
   ``A_{k+1} = A_k Q Lambda^{-1/2} Q'`` (``H = Q Lambda Q'``; the symmetric root,
   :func:`_next_frame`).
   Near the mode, part of each round's count releases counts the rows
   beyond the gradient bound (the clipping bias the result reports); with
   ``settings.adaptive_clip`` the bound rises while they are more than the
   pooled noise can cover (:func:`allowed_clipped_rows`): clipping bias at
   strong signal.
3. **Pool** the rounds whose Newton step is within a few posterior sds (plus
   its noise) of their point: their mean released curvature (in ``theta``
   space, made positive definite once against the pooled noise) and their
   one-step estimates with it, precision-weighted (:func:`_pooled_estimate`);
   the search moves to the pooled estimate, and rounds far from it in its
   metric leave the pool.  The final pool gives the mode, the covariance
   (inverse pooled curvature) and the noise covariance.  The search has
   *settled* when at least two rounds are pooled and the pooled curvature is
   resolved in every direction; otherwise the result says so.
4. **Exact prior** (settled searches): coordinates the prior holds (a
   hierarchical mean or scale: their released data curvature is within 3
   noise sds of 0, the exact prior's beyond) are moved to the exact
   conditional maximum of the log prior given the others
   (:func:`_exact_prior_mode`, public), and the curvature takes the prior's
   at that point, not an average over the rounds' points.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import numpy as np

from scipy import optimize, stats

from stan_dp.accounting import Release, sensitivity_factor
from stan_dp.adaptation.far import (FAR_ROUNDS, far_multipliers, far_phase, far_releases, planned_far_share,
                                    planned_first_median_boost)
from stan_dp.adaptation.forecast import whitened_grad_scale, whitened_hessian_scale
from stan_dp.adaptation.quantile import LOG2_RANGE, private_quantiles
from stan_dp.adaptation.ridge import entry_threshold, thresholded_ridges
from stan_dp.adaptation.releases import Ledger, clipped_matrix_sum, clipped_vector_sum, noisy_counts
from stan_dp.aggregates import RowColumns, queries
from stan_dp.density import prior_gradient

__all__ = [
    "AdaptationSettings",
    "AdaptationResult",
    "prior_neg_hessian",
    "private_mode",
    "noise_multipliers",
    "adaptation_releases",
    "round_count",
    "scale_tail",
    "planned_quantile_share",
]


SCALE_TAIL = 0.1
"""The initial scale is the ``1 - SCALE_TAIL`` quantile of the per-row curvatures (or higher
up the tail when the count noise demands it: :func:`scale_tail`)."""


SCALE_TAIL_SDS = 3.7
"""The initial scale's quantile search targets at least this many count-noise sds of rows
(:func:`scale_tail`)."""
DEPENDING_SDS = 3.0
"""A coordinate counts as depending on the rows (:func:`_initial_scale`) only where its released
count of depending rows is beyond this many noise sds."""
DEPENDING_LOWER_SDS = 2.0
"""The initial scale's tail holds at most half of the released count of depending rows less this
many noise sds (a lower bound on the rows that depend on the coordinate: :func:`_initial_scale`)."""
SPARSE_SDS = 2.0
"""A coordinate at the initial scale's floor whose released count of depending rows is beyond this
many noise sds (rows surely depend on it, too few to measure its scale) is no wider than the
widest coordinate measured (:func:`_initial_scale`)."""


def tail_rows(rows, dim: int, noise_multiplier: float) -> np.ndarray:
    """Rows the scale search's tail should hold, of ``rows``: ``SCALE_TAIL`` of them, and at least
    ``SCALE_TAIL_SDS`` count-noise sds (``noise_multiplier * sqrt(dim)``; :func:`scale_tail`)."""
    sd = noise_multiplier * math.sqrt(dim)
    return np.maximum(SCALE_TAIL * np.asarray(rows, dtype=float), SCALE_TAIL_SDS * sd)


def scale_tail(n_public, dim: int, noise_multiplier: float):
    """Tail fraction of the initial scale search: at least 3.7 count-noise sds of rows, at most half.

    ``n_public`` may be an array; the fraction is then per column.

    The binary search compares a noisy count with ``tail * n``; at a threshold
    above every row the count is 0, and a noise draw above the target would
    send the search (and the frame) off by decades.  With the target at 3.7
    noise sds (``noise_multiplier * sqrt(d)``) that happens with probability
    ``1e-4`` per round.  Public.
    """
    n = np.asarray(n_public, dtype=float)
    tail = np.minimum(0.5, tail_rows(n, dim, noise_multiplier) / n)
    return float(tail) if tail.ndim == 0 else tail


QUANTILE_SHARE = 0.05
"""Share of the adaptation budget (PLD mean) for the initial scale where the rows are many enough
(:func:`planned_quantile_share`)."""
QUANTILE_SHARE_MAX = 0.25
"""Largest share :func:`planned_quantile_share` gives the initial scale."""
PLANNED_SCALE_TAIL = 0.3
"""Largest tail fraction :func:`planned_quantile_share` lets :func:`scale_tail` force on the
initial scale's search (a budget permitting)."""


def planned_quantile_share(n_public: int, dim: int, pld_mean: float, quantile_rounds: int) -> float:
    """Share of the adaptation budget for the initial scale, from public facts.

    :data:`QUANTILE_SHARE`, raised (to at most :data:`QUANTILE_SHARE_MAX`)
    until :func:`scale_tail` is at most :data:`PLANNED_SCALE_TAIL`, i.e. until
    ``SCALE_TAIL_SDS`` count-noise sds are at most that fraction of the rows:
    ``z sqrt(dim) <= PLANNED_SCALE_TAIL n / SCALE_TAIL_SDS`` with
    ``z = sqrt(quantile_rounds / (2 share pld_mean))`` (:func:`noise_multipliers`).

    Why: where the count noise pushes the tail to the cap of one half, the
    search finds the rows' median curvature to within about one count-noise sd
    of rows, and the lower side of that error is unbounded in scale.  Per-row
    GLM curvatures ``w x^2`` (``x^2 ~ chi2_1``) with 99 % of the rows above the
    threshold instead of 50 % put it 2,800 times below the median, a frame
    ``sqrt(2800) ~ 50`` times too wide along that coordinate, where every
    round's noise lands.  At n = 1e3, epsilon = 1, D = 11 (count-noise sd 192
    rows at the share 0.05) 8 of 24 NumPy seeds of a standardised logistic
    regression had some coordinate's frame 3.2-12 times its posterior sd, and
    those runs ended 9-510 sds off; with the share raised to 0.25 every frame
    was within 0.39-1.09 of it and the worst error at most 9.8 (median 10.7 ->
    7.5; docs/adaptation.md §3, "Initial scale").  With the defaults it binds only
    where n is small for the budget (n = 1e3: epsilon <= 2 at D = 11, epsilon
    = 1 at D >= 3).
    """
    z_max = PLANNED_SCALE_TAIL * n_public / (SCALE_TAIL_SDS * math.sqrt(dim))
    need = quantile_rounds / (2.0 * pld_mean * z_max**2)
    return float(min(QUANTILE_SHARE_MAX, max(QUANTILE_SHARE, need)))


NOISE_SPECTRAL_FACTOR = 1.5
"""``tau = NOISE_SPECTRAL_FACTOR * s * sqrt(2 d)``: a symmetric Gaussian noise matrix with
diagonal sd ``s`` and off-diagonal ``s / sqrt(2)`` has spectral norm ``~ s sqrt(2 d)``."""


class AdaptationSettings(NamedTuple):
    """Tuning constants of :func:`private_mode` (data-independent)."""

    rounds: int | None = None
    """Newton rounds (each one gradient and one curvature release); ``None``: :func:`round_count`."""
    min_rounds: int = 8
    """Fewest rounds :func:`round_count` plans."""
    max_rounds: int = 30
    """Most rounds :func:`round_count` plans."""
    resolution: float = 1.0
    """:func:`round_count` plans rounds whose curvature noise ``tau`` (in the posterior's
    frame, where the curvature is the identity) is at most this."""
    kappa: float | None = None
    """Gradient clip bound in the frame, as a multiple of ``C_w = sqrt(chi2_{d,0.9} / n)``;
    ``None``: :func:`clip_inflation`, which grows with ``n`` and the budget."""
    kappa_hessian: float = 1.5
    """Curvature clip bound in the frame, as a multiple of ``chi2_{d,0.9} / n``.  1.5 clips under
    1% of the rows of a GLM with normal predictors (chi2_10 beyond 1.5 times its 90th percentile)
    and halves the curvature noise of 3, so :func:`round_count` plans about four times as many
    rounds: rms error 1.30 -> 0.97 sd (logistic D = 10, n = 1e4, epsilon = 1; no run settled at 3,
    all at 1.5), 0.32 -> 0.26 (epsilon = 4), 0.50 -> 0.39 (n = 1e5, epsilon = 1); a varying-intercept
    model (n = 3000, epsilon = 4) went from 40-200 sd off and unsettled to settled within 1-4 sd.
    At n = 1e3 (never settled either way) 0.75 -> 0.80 (logistic) and 1.38 -> 1.30 (Poisson)."""
    quantile_share: float | None = None
    """Share of the adaptation budget (PLD mean) for the initial scale; ``None``:
    :func:`planned_quantile_share` (0.05 unless the rows are too few for its count noise)."""
    far_rounds: int = FAR_ROUNDS
    """Rounds of the far phase before the Newton rounds (:mod:`stan_dp.adaptation.far`; 0: none)."""
    far_share: float | None = None
    """Share of the adaptation budget (PLD mean) for the far phase (with ``far_rounds > 0``).
    ``None``: :func:`~stan_dp.adaptation.far.planned_far_share` (``FAR_SHARE`` = 0.1, cut where the
    rows are many enough to resolve the votes with less, raised up to ``FAR_SHARE_MAX`` = 0.3 where
    they need more; none where even that cannot resolve them)."""
    far_first_boost: float | None = None
    """Factor on the far phase's first median budget (:func:`~stan_dp.adaptation.far.far_multipliers`);
    ``None``: :func:`~stan_dp.adaptation.far.planned_first_median_boost` (1 unless the rows are too few
    for its count noise)."""
    quantile_rounds: int = 12
    """Binary-search rounds of the initial scale (and of the orientation's directional scales)."""
    orient: bool | None = None
    """Turn the initial frame along the rows' curvature (:func:`_oriented_frame`, two more
    releases).  ``None``: where :func:`orientation_detection_forecast` (public) says its release
    shows a ridge's entry (:func:`planned_settings`).  Median worst error over 24 seeds (NumPy,
    exact posterior), unoriented -> oriented: a D = 10 logistic regression with an
    intercept-slope ridge (a predictor in metres) 15.5 -> 2.4 posterior sds (n = 1e4,
    epsilon = 1) and 8.5 -> 1.5 (n = 1e3, epsilon = 4), a Poisson GLM with it 9.3 -> 1.4
    (n = 1e3, epsilon = 4); standardised predictors within noise (epsilon = 4: logistic 0.53 ->
    0.52, Poisson 0.42 -> 0.46); docs/adaptation.md §3 "Orientation"."""
    orientation_share: float = 0.025
    """Share of the adaptation budget (PLD mean) for the orientation release
    (:func:`_oriented_frame`: the sum of per-row curvatures normalised to unit Frobenius norm);
    with ``orient=None`` cut where a smaller one suffices (:func:`planned_settings`)."""
    direction_share: float = 0.03
    """Share of the adaptation budget (PLD mean) for the private scales along the orientation's
    directions (``quantile_rounds`` count releases); cut with ``orientation_share``."""
    hessian_share: float | None = None
    """Share of each round's gradient and curvature budget for the curvature release.  ``None``:
    :data:`HESSIAN_SHARE`, cut by :func:`planned_settings` where less resolves the curvature."""
    clip_share: float = 0.1
    """Share of each round's budget for the private medians that raise the clip bounds."""
    clip_rounds: int = 7
    """Binary-search rounds of those medians (over ``2^-20 .. 2^60`` times the forecast)."""
    adaptive_clip: bool | None = None
    """Near the mode, raise the gradient bound while a released count says that more rows are
    clipped than the pooled noise covers (:func:`allowed_clipped_rows`).  The count is made in
    every run (``clipped_repeats`` of the ``clip_rounds`` count releases of each near round; the
    rest count the tail): it gives :attr:`AdaptationResult.clipping_bias_bound` either way.
    ``None``: :func:`stan_dp.sample` turns it on exactly when its public forecast does not warn
    (where the run claims 0.5 sd, clipping bias must not break the claim; where it warns anyway,
    :func:`clip_inflation`'s rms-optimal balance is kept); :func:`private_mode` reads ``None`` as
    off."""
    clipped_repeats: int = 3
    """Count releases per near round spent on the rows beyond the bound (the rest of the
    ``clip_rounds`` on the tail)."""
    kappa_far: float = 3.0
    """Clip bounds are at least ``kappa_far`` times the private median of the norms."""
    max_step: float = math.inf
    """Largest move of any unconstrained coordinate in one round (public cap)."""
    step_gain: float = 100.0
    """Largest first-order gain of the mean row log-likelihood along any eigen-direction of a
    Newton round's step at the start (:func:`_gain_floor`); it grows by 4 after every full step
    that was not taken back.  A Newton step in the released frame ``du = Q diag(1/lam) Qᵀ g``
    changes the summed log-likelihood by ``gᵀ du`` to first order; per row that is
    parametrisation-free, ~1 for a GLM started at 0 (``|eta| <~ 2``) and ``k^2`` for a
    location ``k`` per-row sds away.  Where the frame is wrong by decades the unresolved step
    is decades too long: a normal regression with ``male`` (40 %) and flat priors, n = 1059,
    epsilon = 1, moved ``b_male`` to 1e9 and ``sigma`` to 0 in one round (1.5e10 posterior sds
    off) when the initial scale took its tail of all rows; with the count of depending rows
    (:func:`_initial_scale`) that coordinate's scale is often 1 (its count unresolved, ~20 times
    too wide) and without the cap sigma still ended 0.26 to inf times its posterior mean in 5 of
    32 NumPy seeds (none with it; ``tests/test_step_gain.py``)."""
    collapse: float = 0.01
    """A round whose released curvature trace falls below ``collapse * d`` (and below its
    noise) after a full step counts as a collapse: the step is taken back."""
    fd_step: float = 1e-3
    """Central-difference step for per-row Hessians, in frame units."""
    initial_fd_step: float = 1e-5
    """Central-difference step (unconstrained units) of the initial per-row curvature."""


KAPPA_SLOPE = 1.4
"""``a`` in :func:`clip_inflation`'s ``kappa = a sqrt(ln(n mu / k) - c)``."""
KAPPA_OFFSET = 5.0
"""``c`` in :func:`clip_inflation`'s ``kappa = a sqrt(ln(n mu / k) - c)``."""
KAPPA_MIN = 1.25
"""Smallest clip inflation :func:`clip_inflation` returns."""


def clip_inflation(settings: "AdaptationSettings", n_public: int, pld_mean: float,
                   relation: str = "replace_one") -> float:
    """``kappa``: the gradient clip bound in the frame as a multiple of ``C_w`` (public).

    ``settings.kappa`` when given; otherwise

        kappa = max(1.25, 1.4 sqrt(ln(n mu / k) - 5)),

    ``mu = sqrt(2 pld_mean)`` the Gaussian-DP parameter of the budget and
    ``k`` the sensitivity factor (2 replace-one, 1 add/remove): a function of
    public facts only.

    Why this form: clipping moves the root of the clipped score by the
    clipped rows' excess, ``n`` terms of size ``~ C_w h(kappa)`` in posterior
    units, where ``h`` is the tail of the whitened per-row gradient norms
    beyond ``kappa C_w``; the release's noise is ``~ k kappa C_w / mu``.  For
    norms with a sub-Gaussian tail ``h(kappa) ~ exp(-b kappa^2)``, balancing
    the two gives ``b kappa^2 ~ ln(n mu / (k kappa))``: ``kappa`` grows like
    the square root of ``ln(n mu / k)``.  Below the balance the bias rises
    steeply (a cliff), above it the noise rises linearly, so the constants
    err high.  They are fitted on NumPy logistic regression (D = 10) and a
    Poisson GLM (D = 5) with standard-normal predictors against the exact
    posterior mode, 12 seeds per cell, scanning kappa in {1.25, 1.5, 2, 2.5, 3}
    (rms error over coordinates and seeds, posterior sds):

    ==========  =====  ==========  ===================================
    n           eps    this rule   best measured (rms at kappa = 3)
    ==========  =====  ==========  ===================================
    1e3         4      1.5         1.25-1.5 (logistic 0.73 vs 1.50)
    1e4         1      2.1         1.5-2 (logistic 1.35 vs 2.17)
    1e4         4      2.6         2.5 (logistic 0.26 vs 0.35; 2.0: 0.41,
                                   1.25: 4.6 — the cliff)
    ==========  =====  ==========  ===================================

    At large ``n`` the bias dominates: at a fixed ``kappa = 3`` the noiseless
    root of the clipped score (logistic regression, 3 standard-normal
    predictors) is off by 0.014, 0.031, 0.091 and 0.151 sd at n = 1e4, 1e5,
    1e6, 4e6, growing like ``sqrt(n)`` (about 0.9 sd at 1e8: silently wrong);
    this rule gives ``kappa`` 3.6 at n = 1e6 and epsilon = 1, where the
    root is within 0.02 sd (``tests/test_auto.py``).  The tail of the norms
    sets ``h``, so heavier-tailed rows keep more bias.
    """
    if settings.kappa is not None:
        return float(settings.kappa)
    k = sensitivity_factor(relation)
    x = math.log(max(int(n_public), 1) * math.sqrt(2.0 * pld_mean) / k)
    return float(max(KAPPA_MIN, KAPPA_SLOPE * math.sqrt(max(0.0, x - KAPPA_OFFSET))))


TAIL_MULTIPLE = 2.0
"""Near the mode, the rounds count the rows whose whitened gradient norm exceeds this multiple of
the clip bound (:attr:`AdaptationResult.tail_rows`)."""
TAIL_ROWS_ALLOWED = 5.0
""":attr:`AdaptationResult.heavy_tail` when more rows than this lie beyond ``TAIL_MULTIPLE`` times
the bound (at 3 noise sds).  With the rule of :func:`clip_inflation`, GLMs with Gaussian predictors
have 0-4 such rows (logistic D = 10, Poisson D = 5, n = 1e4-1e5); each one's clipped excess is at
least the bound, so a handful already moves the mode by a sizeable fraction of its noise.  With
standardised heavy-tailed predictors there are more: log-normal 4-35 (logistic) and 16-163
(Poisson), t3 1-8 and 15-106, and the noiseless root of the clipped score was 0.26-1.1 (logistic)
and 15-107 (Poisson) posterior sds from the mode (NumPy, exact posterior and frame, n = 1e4-1e5,
epsilon 1 and 4)."""


class AdaptationResult(NamedTuple):
    """What the private adaptation found (all post-processing of releases)."""

    mode: np.ndarray
    """Private mode (unconstrained)."""
    covariance: np.ndarray
    """Inverse of the averaged private curvature (posterior covariance estimate)."""
    noise_covariance: np.ndarray
    """Covariance of the privacy noise in :attr:`mode`."""
    frame: np.ndarray
    """``A`` with ``A A' = covariance`` (symmetric square root)."""
    grad_clip: float
    """Gradient clip bound used in the frame (public)."""
    ledger: Ledger
    rounds_averaged: int
    settled: bool
    """At least two trailing rounds qualified for the average."""
    path: np.ndarray
    """The search's points ``theta_k`` (post-processing of releases): the start, the far phase's
    points (``far_rounds`` of them, when it runs), then one per Newton round."""
    prior_share: float
    """Largest share of the curvature at the mode that the prior supplies, over the coordinates
    the rows depend on (those whose initial scale was found).  Near 1 the mode is held by the
    prior, not the data: typically the degenerate neck of a hierarchical funnel (a group sd
    at 0, the group effects at their mean), where a Gaussian is not the posterior."""
    tail_rows: float
    """Released estimate of the rows whose gradient norm exceeds :data:`TAIL_MULTIPLE` times the
    rule's clip bound :attr:`grad_clip` (not times the raised one) near the mode (mean over the
    rounds near the mode; NaN if there were none)."""
    tail_rows_sd: float
    """Noise sd of :attr:`tail_rows` (``inf`` if there were no rounds near the mode)."""
    clip_adjust: float = 1.0
    """Factor ``adaptive_clip`` raised the gradient bound by near the mode (1: not raised)."""
    frame_turned: bool = False
    """``orient`` turned the initial frame along a ridge of the released curvature (False: the
    axes kept, or ``orient`` off)."""
    clipped_rows: float = math.nan
    """Released estimate of the rows beyond the final gradient bound (``grad_clip *
    clip_adjust``), the mean of the counts made at that bound (NaN: no round near the mode)."""
    dispersion: float = math.nan
    """How much the pooled rounds' one-step estimates disagree, relative to their privacy noise:
    ``Q / (d (K - 1))``, ``Q`` the precision-weighted sum of squares about the pooled mode
    (:func:`_pooled_estimate`); about 1 when the rounds differ by their noise alone (``Q`` is
    then chi-squared with ``d (K - 1)`` degrees of freedom), NaN when fewer than two were pooled."""
    heterogeneity: float = 0.0
    """``c`` of the random-effects pooling (:func:`_pooled_estimate`): 0 where the rounds agreed
    within their noise (``Q`` below its :data:`DISPERSION_QUANTILE` quantile), else the
    between-round variance in posterior variances (``c H^-1`` added to every round's noise
    covariance), which :attr:`noise_covariance` and :attr:`mode` then include."""

    @property
    def dispersed(self) -> bool:
        """The pooled rounds disagreed beyond their noise (:attr:`heterogeneity` > 0)."""
        return self.heterogeneity > 0.0

    @property
    def clipping_bias_bound(self) -> float:
        """About how far the rows beyond the final bound move the mode (posterior sds, a vector's
        length; 0 if not counted): :data:`BIAS_PER_CLIPPED_ROW_HIGH` times the bound times
        :attr:`clipped_rows` (the frame at the end is the posterior's, so whitened units are
        posterior sds).  ``adaptive_clip`` stops raising the bound while that bias is within about
        the pooled noise, so it is not small: on a ``wells``-like logistic regression (a skewed
        predictor, n = 1e4, epsilon = 4) 0.21-0.31 against a mean error of +0.33 in the skewed
        coordinate, with a released noise of 0.2 that left 5 of 13 runs beyond 0.5 sd without a
        warning.  It is a light-tailed estimate (the per-row bias of GLM rows): where a few rows'
        gradients lie far beyond the bound and all push one way, the bias is larger.  A Student-t
        regression (n = 5000, epsilon = 4, the rule's bound, not raised) reported 0.77-0.96 while
        the clipped score's root, without noise, was 2.0 posterior sds off in ``nu`` (its
        outliers' gradients reach 7.5 times the 90th percentile and all say "heavier tails")."""
        if not np.isfinite(self.clipped_rows):
            return 0.0
        return float(BIAS_PER_CLIPPED_ROW_HIGH * max(self.clipped_rows, 0.0) * self.grad_clip
                     * self.clip_adjust)

    @property
    def tail_bias_bound(self) -> float:
        """About how far the rows beyond *twice* the bound move the mode, beyond what
        :attr:`clipping_bias_bound` counts for them (posterior sds; 0 where the bound was raised,
        since the tail count is against the rule's bound): each such row's clipped excess is at
        least the bound, so ``max(tail_rows - tail_rows_sd, 0)`` times the bound, as if they all
        pushed one way (one noise sd below the released count: a handful of rows at the count's
        noise).  The light-tailed :attr:`clipping_bias_bound` understates rows far beyond the bound
        that push one way: the Student-t regression (n = 5000, epsilon = 4) reported 0.77-0.96 for a
        noiseless 2.0, and with this term 0.77-2.3 over six runs (errors 1.9-3.6)."""
        if self.clip_adjust != 1.0 or not np.isfinite(self.tail_rows):
            return 0.0
        return float(max(self.tail_rows - self.tail_rows_sd, 0.0) * self.grad_clip)

    @property
    def heavy_tail(self) -> bool:
        """More than :data:`TAIL_ROWS_ALLOWED` rows beyond twice the bound, at 3 noise sds.

        Only judged when the search :attr:`settled`: away from the mode the
        rows are large because the point is wrong, not because the tail is
        heavy (Poisson GLM, normal predictors, n = 1e3: flagged in 10 of 12
        unsettled runs), and that case has its own warning.
        """
        return bool(self.settled and self.tail_rows - 3.0 * self.tail_rows_sd > TAIL_ROWS_ALLOWED)


BIAS_PER_CLIPPED_ROW = 0.15
"""``rho`` of :func:`allowed_clipped_rows`: the root of a clipped score moves by about ``rho`` times
the bound per clipped row (whitened units).  Measured without noise at the exact mode and frame
(the rule's kappa, n = 1e4-1e5, epsilon 1 and 4): 0.10-0.19 for logistic regressions (their
surprising rows' excesses align: 0.64-0.85 of the summed lengths), 0.06-0.07 for a Poisson GLM."""
BIAS_PER_CLIPPED_ROW_HIGH = 0.2
""":attr:`AdaptationResult.clipping_bias_bound`'s bias per clipped row, the top of the measured
0.10-0.19 (logistic) and 0.06-0.07 (Poisson): the warning must not understate it.  The count
cannot tell whose rows align: a ``wells``-like logistic regression (a gamma-distributed
predictor) and ``test_auto``'s (normal predictors) released about as many clipped rows times the
bound (1.1-1.6), but the first was biased by about 0.25 per row and the second far less."""
BIAS_SHARE = 1.0
""":func:`allowed_clipped_rows` keeps the clipping bias below this share of the pooled noise.  0.5
cost a Poisson GLM 20-50 % (it also dropped the rounds at lower bounds from the final pool); 1.0
removed every silent miss of the strong-signal logistic regression just as well."""
KAPPA_STEP = 1.3
"""Factor by which ``adaptive_clip`` raises the gradient bound."""
KAPPA_ADJUST_MAX = 4.0
"""Largest factor ``adaptive_clip`` applies to the public gradient bound."""


def allowed_clipped_rows(z_gradient: float, rounds: int, relation: str) -> float:
    """Most clipped rows whose bias stays below ``BIAS_SHARE`` of the pooled gradient noise (public).

    With ``m`` rounds pooled, the pooled one-step estimate has noise sd
    ``k z_g C / sqrt(m)`` per whitened coordinate (``C`` the bound, ``k`` the
    sensitivity factor), and ``N`` clipped rows bias it by about
    ``rho N C`` (:data:`BIAS_PER_CLIPPED_ROW`), so the bias stays below
    ``beta`` times the noise while ``N <= beta k z_g / (rho sqrt(m))``; ``m``
    is taken as every planned round (the most that can be pooled: the
    strictest bound).  The bound ``C`` cancels.
    """
    k = sensitivity_factor(relation)
    return BIAS_SHARE * k * z_gradient / (BIAS_PER_CLIPPED_ROW * math.sqrt(max(int(rounds), 1)))


def round_count(settings: AdaptationSettings, n_public: int, dim: int, pld_mean: float) -> int:
    """Number of Newton rounds: as many as keep one round's curvature release resolvable.

    In the posterior's own frame the curvature is the identity and the
    curvature release of one round has noise ``tau = 2 s sqrt(2 d)`` in
    spectral norm (``s`` its diagonal sd), which grows like ``sqrt(rounds)``.
    More rounds localise from further away; fewer resolve the curvature of
    each round.  The count is the largest with ``tau <= resolution``, within
    ``[min_rounds, max_rounds]`` (``settings.rounds`` if given).  Public.
    """
    if settings.rounds is not None:
        return int(settings.rounds)
    tau_one = curvature_noise_forecast(settings._replace(rounds=1), n_public, dim, pld_mean)
    k = int((settings.resolution / tau_one) ** 2) if tau_one > 0 else settings.max_rounds
    return int(min(max(k, settings.min_rounds), settings.max_rounds))


ORIENT_DETECT_LIMIT = 0.5
""":func:`planned_settings` orients only where :func:`orientation_detection_forecast` is below this:
an entry of ``R`` at 0.75 (a pair of coordinates whose combined curvature is a quarter of their
own, :data:`RIDGE_EIGENVALUE`) is then kept with probability 93-95 % (d = 6-11) at the forecast
noise, less where the smallest diagonal is below the mean (measured noise 1.3-1.6 times the
forecast), and one at 0.95 (a predictor in metres around 5 km and the intercept: 0.98) is kept
surely.  Above it the release cannot show a ridge and its budget only costs."""


ORIENT_NOISE_TARGET = 0.35
""":func:`planned_settings` spends on the orientation only what brings its forecast noise down to
this (the ridge cells that it fixes forecast 0.37 and 0.43 at full shares and keep them; at
n = 1e4, epsilon = 4 the forecast is 0.11 and the shares shrink 10-fold).  24 seeds, median (rms)
worst error, full shares -> cut shares with the initial frame kept when not turned (the default):
Poisson GLM n = 1e4, epsilon = 1 1.34 (1.52) -> 1.24 (1.43); at epsilon = 4 0.45 (0.51) ->
0.46 (0.50); logistic D = 10, epsilon = 4 0.54 (0.57) -> 0.52 (0.54) (unoriented: 1.29 (1.25),
0.42 (0.45), 0.53 (0.58))."""


def _orientation_multiplier(settings: AdaptationSettings, pld_mean: float) -> float:
    """Noise multiplier of the orientation release: ``orientation_share`` of the PLD mean."""
    return 1.0 / math.sqrt(2.0 * settings.orientation_share * pld_mean)


def orientation_noise_forecast(settings: AdaptationSettings, n_public: int, dim: int,
                               pld_mean: float) -> float:
    """Forecast of ``tau_R``, the orientation release's spectral noise in ``R`` (public).

    :func:`_oriented_frame` releases ``M = sum_i S_i / ||S_i||_F`` with entry
    noise ``s = k z`` (``k = 2``, replace-one: the larger sensitivity); for
    rank-one positive rows (GLMs: ``S_i ~ x_i x_i'``) its diagonal sums to
    ``n`` over ``d`` coordinates (``trace S_i = ||S_i||_F``), so ``R``'s
    scaling divides by about ``n / d``: ``tau_R ~ 1.5 s sqrt(2 d) d / n``.
    Rows of higher rank have a larger trace (the forecast errs high),
    indefinite rows a smaller one.  ``dim`` counts every coordinate (those
    the rows do not touch too), which errs high.
    """
    z = _orientation_multiplier(settings, pld_mean)
    return NOISE_SPECTRAL_FACTOR * 2.0 * z * math.sqrt(2.0 * dim) * dim / n_public


HESSIAN_SHARE = 0.25
"""Default share of each round's gradient and curvature budget for the curvature release."""
HESSIAN_SHARE_MIN = 0.05
"""Smallest share :func:`planned_settings` cuts ``hessian_share`` to."""
CURVATURE_NOISE_TARGET = 0.4
""":func:`planned_settings` cuts ``hessian_share`` until one round's curvature noise
(:func:`curvature_noise_forecast`) is at this, where it is below: the gradient releases, whose
noise is the estimate's, get the rest.  Below it the pooled curvature (``tau / sqrt(rounds)``)
is resolved many times over.  NumPy, against the exact mode, 20 seeds, median worst error (rms
error over all coordinates), ``hessian_share`` 0.25 -> 0.05: logistic D = 10, n = 1e5,
epsilon = 1 (one round's noise 0.14 -> 0.32) 0.74 (0.37) -> 0.66 (0.34); Poisson D = 5 there
(0.06 -> 0.13) 0.63 (0.37) -> 0.62 (0.35); Poisson at n = 1e4, epsilon = 4 (24 seeds) 0.46 (0.29)
-> 0.45 (0.27): the 5-11 % the gradient noise predicts, within any one cell's seed spread.  At a
noise of 0.65 (logistic, n = 1e4, epsilon = 4, share 0.1; 12 seeds) nothing was gained: median
0.52 -> 0.51, rms 0.26 -> 0.27 (docs/adaptation.md §3, "The curvature's share of a round")."""


def orientation_detection_forecast(settings: AdaptationSettings, n_public: int, dim: int,
                                   pld_mean: float) -> float:
    """The smallest off-diagonal entry of ``R`` the orientation keeps reliably (public).

    :func:`~stan_dp.adaptation.ridge.entry_threshold` times the forecast noise
    sd of an off-diagonal entry of ``R``: ``M``'s off-diagonal noise is
    ``k z / sqrt(2)`` (:func:`orientation_noise_forecast`'s ``k``, ``z``) and
    ``R`` divides it by the diagonal, about ``n / d``.
    """
    z = _orientation_multiplier(settings, pld_mean)
    return entry_threshold(dim) * 2.0 * z / math.sqrt(2.0) * dim / n_public


def curvature_noise_forecast(settings: AdaptationSettings, n_public: int, dim: int,
                             pld_mean: float) -> float:
    """``tau`` of one round's curvature release in the posterior's frame (public).

    In the posterior's own frame the curvature is the identity and per-row
    curvatures are bounded by ``kappa_hessian chi2_{d,0.9} / n``; the release's
    spectral noise is ``1.5 (2 z_h C_h) sqrt(2 d)`` (:data:`NOISE_SPECTRAL_FACTOR`,
    sensitivity ``2 C_h``), ``z_h`` the curvature multiplier of ``settings``
    (``rounds`` and ``orient`` set).
    """
    z_h = noise_multipliers(pld_mean, settings)["curvature"]
    c_h = settings.kappa_hessian * whitened_hessian_scale(n_public, dim)
    return NOISE_SPECTRAL_FACTOR * z_h * 2.0 * c_h * math.sqrt(2.0 * dim)


def planned_settings(settings: AdaptationSettings, n_public: int, dim: int,
                     pld_mean: float) -> AdaptationSettings:
    """``settings`` with ``quantile_share``, ``far_share``, ``orient``, ``hessian_share`` and ``rounds``
    fixed from public facts (the plan).

    ``quantile_share=None`` becomes :func:`planned_quantile_share` (first: the
    rest of the plan shares what it leaves).

    ``far_share=None`` becomes :func:`~stan_dp.adaptation.far.planned_far_share`
    (0 without far rounds); where the share is 0 (planned or given) the far
    rounds are dropped from the plan.  ``far_first_boost=None`` becomes
    :func:`~stan_dp.adaptation.far.planned_first_median_boost` (1 without far
    rounds).

    ``orient=None`` becomes ``True`` where :func:`orientation_detection_forecast`
    is below :data:`ORIENT_DETECT_LIMIT` (d = 11: from n = 1e3 at epsilon = 4,
    from n = 3e3 at epsilon = 1; d = 6: from n = 1e3 at epsilon = 2): above it the
    release cannot show a ridge, and its budget only costs (the Poisson GLM at
    n = 1e3, epsilon = 1: median 5.4 -> 7.2-8.6 sds oriented).  Where
    :func:`orientation_noise_forecast` is below :data:`ORIENT_NOISE_TARGET`,
    ``orientation_share`` and ``direction_share`` are scaled down until it is
    at the target (the noise goes like ``1 / sqrt(share)``): a larger budget
    or more rows need less of it to resolve ``R`` as well, and leave the rest
    to the rounds.  Then
    ``rounds`` by :func:`round_count`.  ``hessian_share=None`` becomes
    :data:`HESSIAN_SHARE`, cut (to at least :data:`HESSIAN_SHARE_MIN`) where
    one round's curvature noise at the planned rounds is below
    :data:`CURVATURE_NOISE_TARGET`, until it is at the target (the noise goes
    like ``1 / sqrt(share)``).  With the defaults that happens only where the
    rounds are at ``max_rounds`` (below it :func:`round_count` plans the most
    rounds whose noise is ``resolution`` = 1); the count is fixed before the cut.
    """
    s = settings
    if not isinstance(s.far_rounds, numbers.Integral) or s.far_rounds < 0:
        raise ValueError("settings.far_rounds must be a non-negative integer")
    if not isinstance(s.quantile_rounds, numbers.Integral) or s.quantile_rounds < 2:
        raise ValueError("settings.quantile_rounds must be an integer of at least 2 (one count of the rows "
                         "each coordinate depends on, then the quantile search)")
    if s.quantile_share is None:
        s = s._replace(quantile_share=planned_quantile_share(n_public, dim, pld_mean, s.quantile_rounds))
    if s.far_share is None:
        share = planned_far_share(n_public, dim, pld_mean, s.far_rounds) if s.far_rounds else 0.0
        s = s._replace(far_share=share)
    if s.far_share == 0.0:   # no budget, no far rounds (explicit or planned)
        s = s._replace(far_rounds=0)
    if s.far_first_boost is None:
        boost = (planned_first_median_boost(n_public, dim, s.far_share * pld_mean, s.far_rounds)
                 if s.far_rounds else 1.0)
        s = s._replace(far_first_boost=boost)
    if s.orient is None:
        tau = orientation_noise_forecast(s, n_public, dim, pld_mean)
        f = min(1.0, (tau / ORIENT_NOISE_TARGET) ** 2)   # forecast noise at the target, no lower
        detect = orientation_detection_forecast(s, n_public, dim, pld_mean)
        s = s._replace(orient=detect < ORIENT_DETECT_LIMIT, orientation_share=s.orientation_share * f,
                       direction_share=s.direction_share * f)
    cut = s.hessian_share is None
    if cut:
        s = s._replace(hessian_share=HESSIAN_SHARE)
    s = s._replace(rounds=round_count(s, n_public, dim, pld_mean))
    if cut:
        tau = curvature_noise_forecast(s, n_public, dim, pld_mean)
        share = HESSIAN_SHARE * min(1.0, (tau / CURVATURE_NOISE_TARGET) ** 2)
        s = s._replace(hessian_share=max(HESSIAN_SHARE_MIN, share))
    return s


def noise_multipliers(pld_mean: float, settings: AdaptationSettings) -> dict[str, float]:
    """Noise multipliers of the adaptation's releases for a PLD-mean budget (data-independent).

    The budget ``pld_mean = sum 1 / (2 z^2)`` is split: ``quantile_share`` for
    the initial scale (``quantile_rounds`` count releases), the rest equally
    over the ``settings.rounds`` rounds (set it, e.g. with :func:`round_count`);
    in each round ``clip_share`` for the clip medians (``clip_rounds`` count
    releases) and the remainder between the gradient and (``hessian_share``)
    the curvature release.  With ``orient``, ``orientation_share`` (one matrix
    release) and ``direction_share`` (``quantile_rounds`` count releases) come
    off the rounds' part too, and with ``far_rounds`` ``far_share``
    (:func:`~stan_dp.adaptation.far.far_multipliers`).
    """
    s = settings
    if s.rounds is None or s.orient is None or s.hessian_share is None:   # the rest: rounds_share
        raise ValueError("settings.rounds, settings.orient and settings.hessian_share must be set "
                         "(see planned_settings)")
    m_round = rounds_share(s) * pld_mean / s.rounds   # checks quantile_share
    m_quantile = s.quantile_share * pld_mean
    m_data = m_round * (1.0 - s.clip_share)
    out = {} if not s.orient else {
        "orientation": _orientation_multiplier(s, pld_mean),
        "direction": math.sqrt(s.quantile_rounds / (2.0 * s.direction_share * pld_mean)),
    }
    if s.far_rounds:
        if s.far_first_boost is None:
            raise ValueError("settings.far_first_boost must be set with far_rounds (see planned_settings)")
        out |= far_multipliers(s.far_share * pld_mean, s.far_rounds, s.quantile_rounds, s.far_first_boost)
    return out | {
        "scale": math.sqrt(s.quantile_rounds / (2.0 * m_quantile)),
        "clip": math.sqrt(s.clip_rounds / (2.0 * m_round * s.clip_share)),
        "gradient": 1.0 / math.sqrt(2.0 * m_data * (1.0 - s.hessian_share)),
        "curvature": 1.0 / math.sqrt(2.0 * m_data * s.hessian_share),
    }


def rounds_share(settings: AdaptationSettings) -> float:
    """Share of the adaptation budget (PLD mean) left for the Newton rounds (public)."""
    s = settings
    if s.orient is None or s.quantile_share is None:
        raise ValueError("settings.orient and settings.quantile_share must be set (see planned_settings)")
    shares = (s.quantile_share, s.orientation_share, s.direction_share) if s.orient else (s.quantile_share,)
    if s.far_rounds:
        if s.far_share is None:
            raise ValueError("settings.far_share must be set (see planned_settings)")
        shares = (*shares, s.far_share)
    share = 1.0 - sum(shares)
    if not (0.0 < share <= 1.0 and min(shares) > 0.0):
        raise ValueError("quantile_share (and with orient, orientation_share and direction_share; with "
                         "far_rounds, far_share) must be positive and sum to less than 1")
    return share


def adaptation_releases(pld_mean: float, settings: AdaptationSettings, n_public: int,
                        dim: int) -> list[Release]:
    """Every release :func:`private_mode` makes, as accounting lines (data-independent)."""
    s = planned_settings(settings, n_public, dim, pld_mean)
    z = noise_multipliers(pld_mean, s)
    oriented = [Release(z["orientation"], 1), Release(z["direction"], s.quantile_rounds)] if s.orient else []
    far = (far_releases(s.far_share * pld_mean, s.far_rounds, s.quantile_rounds, s.far_first_boost)
           if s.far_rounds else [])
    return [*far, Release(z["scale"], s.quantile_rounds), *oriented,
            Release(z["clip"], s.rounds * s.clip_rounds),
            Release(z["gradient"], s.rounds), Release(z["curvature"], s.rounds)]


def prior_neg_hessian(density: Any, theta: np.ndarray, frame: np.ndarray, h: float) -> np.ndarray:
    """``-A' (d^2 log prior) A`` by central differences of the prior gradient along the frame."""
    d = theta.size
    out = np.empty((d, d))
    for j in range(d):
        _, up = prior_gradient(density, theta + h * frame[:, j])
        _, down = prior_gradient(density, theta - h * frame[:, j])
        out[:, j] = -(frame.T @ (up - down)) / (2.0 * h)
    out = 0.5 * (out + out.T)
    out[~np.isfinite(out)] = 0.0
    return out


def _row_neg_hessians(density: Any, theta: np.ndarray, frame: np.ndarray, h: float,
                      diagonal_only: bool = False) -> np.ndarray:
    """Per-row ``-A' H_i A`` (shape ``(n, k, k)`` for a ``(d, k)`` frame), symmetrised; non-finite
    entries zeroed.

    With ``diagonal_only`` only its diagonal, shape ``(n, k)``.
    """
    cols = []
    with np.errstate(all="ignore"):
        for j in range(frame.shape[1]):
            _, up = density.row_log_lik_grad(theta + h * frame[:, j])
            _, down = density.row_log_lik_grad(theta - h * frame[:, j])
            diff = (np.asarray(up, dtype=float) - np.asarray(down, dtype=float)) @ frame
            cols.append(-diff / (2.0 * h))
        mats = np.stack(cols, axis=2)
        if diagonal_only:
            out = np.diagonal(mats, axis1=1, axis2=2).copy()
            out[~np.isfinite(out)] = 0.0
            return out
        mats = 0.5 * (mats + np.transpose(mats, (0, 2, 1)))
    mats[~np.isfinite(mats)] = 0.0
    return mats


def _curvature_rows(density: Any, theta: np.ndarray, h: float,
                    directions: np.ndarray | None = None) -> np.ndarray:
    """Per-row ``|diag(-B' H_i B)|`` at ``theta`` (shape ``(n, k)``): the curvature along each column
    of ``B = directions`` (``(d, k)``; default the coordinate axes, the initial frame's statistic)."""
    b = np.eye(theta.size) if directions is None else np.asarray(directions, dtype=float)
    with np.errstate(all="ignore"):
        return np.abs(_row_neg_hessians(density, theta, b, h, diagonal_only=True))


def _orientation_rows(density: Any, theta: np.ndarray, frame: np.ndarray, h: float) -> np.ndarray:
    """Per-row ``-A' H_i A`` divided by its Frobenius norm, flattened (shape ``(n, d*d)``).

    Every row weighs the same (norm 1, or 0 where its curvature is 0), so the
    sum needs no clip bound: sensitivity ``k`` (2 replace-one, 1 add/remove)."""
    d = theta.size
    mats = _row_neg_hessians(density, theta, frame, h).reshape(-1, d * d)
    norms = np.linalg.norm(mats, axis=1)
    with np.errstate(all="ignore"):
        return np.where(norms[:, None] > 0.0, mats / np.where(norms > 0.0, norms, 1.0)[:, None], 0.0)


RIDGE_EIGENVALUE = 0.25
""":func:`_oriented_frame` turns the frame when the released orientation matrix, scaled to unit
diagonal, has an eigenvalue below this: some combination of coordinates has less than a quarter of
the curvature its coordinates have on their own (an intercept and a predictor in metres around
5 km: 0.02), a ridge that the diagonal frame hides from the rounds."""


def unit_diagonal(m: np.ndarray, sd: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``R = D^-1/2 M D^-1/2`` of a :func:`clipped_matrix_sum` release and its entries' noise sd.

    ``D`` is ``M``'s diagonal floored at 3 noise sds (a diagonal within its
    noise would blow the entries up).  ``M``'s off-diagonal noise sd is
    ``s / sqrt(2)``, so ``R``'s is ``s / (sqrt(2) sqrt(D_i D_j))``, taking
    ``D`` as fixed (its own noise is of second order).  Returns ``R``, the sd
    matrix and ``D``.
    """
    diag = np.maximum(np.diag(m), 3.0 * sd)
    scaling = np.sqrt(np.outer(diag, diag))
    return m / scaling, sd / (math.sqrt(2.0) * scaling), diag


def _oriented_frame(holder: Any, theta: np.ndarray, frame: np.ndarray, data_coordinates: np.ndarray,
                    n_public: int, s: AdaptationSettings, z_orientation: float, z_direction: float,
                    rng_noise: np.random.Generator, ledger: Ledger) -> tuple[np.ndarray, bool]:
    """Turn the initial diagonal frame along the curvature's principal directions (two releases).

    A diagonal frame sees each coordinate's curvature but not how they
    combine: an intercept and a slope on a predictor in metres around 5 km
    (sd 1 km) have a combined curvature 2 % of their diagonal ones, a ridge
    whose curvature the rounds' releases cannot resolve (their noise is set
    for the posterior's frame), so the search creeps along it (8-26 posterior
    sds off at n = 1e4, epsilon = 1; 1.4 rms with the posterior's own frame,
    as with standardised predictors).  The *direction* of the ridge is much
    easier to find than its curvature: it is an eigenvector whose eigenvalue
    is separated from the others by about their size, not by its own.

    1. Release ``M = sum_i S_i / ||S_i||_F`` with ``S_i = -A' H_i A`` in the
       diagonal frame ``A`` (every row's curvature normalised to Frobenius
       norm 1: no bound to choose, sensitivity ``k``), over the coordinates
       the rows depend on.  Scaled to unit diagonal (``R = D^-1/2 M D^-1/2``)
       its eigenvectors are the principal directions of the rows' curvature.
    2. Group the coordinates that some off-diagonal entry of ``R`` beyond
       its noise joins (:func:`~stan_dp.adaptation.ridge.thresholded_ridges`:
       a Bonferroni threshold, 5 % familywise; the noise's spectral norm
       swamps the whole of ``R`` at budgets where a ridge's single entry
       still stands out).  A group turns if its block's smallest eigenvalue
       is below :data:`RIDGE_EIGENVALUE` and below ``1 - tau_G`` (beyond its
       noise, ``tau_G`` the block's noise in spectral norm) but not below
       ``-tau`` (far from the mode a scale parameter makes rows indefinite:
       a varying intercept had -0.39 against 0.18, and turning there sent
       its mean 277 sds off), ``tau`` the whole release's noise where it is
       below 1 (as before the groups: a regression whose intercept starts
       100 away from an outcome around 100, -0.3 to -0.48 against ~0.5,
       needs the turn; held to its pair's noise, 0.2, its sigma ended 4-6
       sds off instead of within 1.6), the group's own otherwise.  A turned
       group's directions are its block's eigenvectors
       (``u_k = D^-1/2 w_k``, unit length in the frame); every other
       coordinate keeps its axis.
    3. A private upper quantile of the per-row curvature along every
       direction (:func:`~stan_dp.adaptation.quantile.private_quantiles`, the
       statistic of the initial scale along ``b_k = A u_k``) gives each
       turned direction its scale: the new frame's columns are
       ``b_k / sqrt(c_k)`` (``c_k`` the mean curvature the quantile implies,
       as in the initial scale); an axis (no turned group) keeps the initial
       scale.  When the frame is not turned the quantiles are released all
       the same (the plan does not depend on the data) and the initial frame
       is kept.

    The plan is the same whatever the data (one matrix release and
    ``quantile_rounds`` count releases); everything after the releases is
    post-processing.  Returns the new frame and whether it was turned.
    """
    d = theta.size
    stat = holder.row_statistic(_orientation_rows, theta, frame, s.fd_step)
    m_rel, sd_m = clipped_matrix_sum(rng_noise, RowColumns(holder, stat, 0, d * d), 1.0,
                                     z_orientation, ledger, "orientation sum")
    del stat
    idx = np.flatnonzero(data_coordinates)
    directions = np.eye(d)[:, idx]
    turned = False
    ridged = np.zeros(idx.size, dtype=bool)   # coordinates whose group of R turns
    if idx.size >= 2:
        r, entry_sd, diag = unit_diagonal(m_rel[np.ix_(idx, idx)], sd_m)
        ridges = thresholded_ridges(r, entry_sd)
        # the whole release's noise in R (an upper bound: the smallest diagonal scales it)
        tau_all = NOISE_SPECTRAL_FACTOR * sd_m * math.sqrt(2.0 * idx.size) / float(np.min(diag))
        for group in ridges.groups:
            lam = ridges.eigenvalues[group]
            tau_g = NOISE_SPECTRAL_FACTOR * float(ridges.noise_norm[group[0]])
            # rows indefinite beyond the noise mean a start far from the mode, not a ridge;
            # where the whole release resolves R that noise is its own (as before the groups)
            guard = tau_all if tau_all < 1.0 else tau_g
            ridged[group] = (np.all(np.isfinite(lam)) and tau_g < 1.0
                             and -guard < float(lam.min()) < min(RIDGE_EIGENVALUE, 1.0 - tau_g))
        if ridged.any():
            u = np.where(ridged[None, :], ridges.directions, np.eye(idx.size)) / np.sqrt(diag)[:, None]
            u /= np.linalg.norm(u, axis=0)
            directions = np.zeros((d, idx.size))
            directions[idx] = u
            turned = True
    b = frame @ directions
    stat = holder.row_statistic(_curvature_rows, theta, s.fd_step, b)
    tail = scale_tail(n_public, max(idx.size, 1), z_direction)
    t, at_floor = private_quantiles(rng_noise, RowColumns(holder, stat, 0, b.shape[1]), tail=tail,
                                    n_public=n_public, rounds=s.quantile_rounds,
                                    noise_multiplier=z_direction, ledger=ledger, what="direction count")
    del stat
    if not turned:
        # No ridge: keep the initial scale.  Averaging in this second estimate of the same axes
        # cost more than it gave (Poisson GLM, n = 1e3, eps = 4: rms 4.3 against 2.5 sds).
        return frame, turned
    c = n_public * t / float(stats.chi2.ppf(1.0 - tail, 1))
    with np.errstate(all="ignore"):
        stretch = np.where(at_floor | ~np.isfinite(c) | (c <= 0.0), 1.0, 1.0 / np.sqrt(c))
    stretch = np.clip(stretch, 1e-6, 1e6)
    # A coordinate in no ridge keeps its initial scale: that estimate counted the rows depending
    # on it first, this one takes its tail of all n rows and finds ~0 for a coordinate few rows
    # touch (an ordered logit's top cut point: stretched 1,350-fold, the search 240 units off).
    stretch = np.where(ridged, stretch, 1.0)
    out = frame.copy()
    out[:, idx] = b * stretch
    return out, turned


def _round_rows(density: Any, theta: np.ndarray, frame: np.ndarray, h: float,
                scales: np.ndarray) -> np.ndarray:
    """One Newton round's per-row statistic, shape ``(n, d + d*d + 2)``.

    Columns: the gradient in the frame (``Aᵀ g_i``), the symmetrised
    ``-Aᵀ H_i A`` flattened row-major, and the norms of both divided by the
    public forecast bounds ``scales`` (for the private median).
    """
    d = theta.size
    _, grads = density.row_log_lik_grad(theta)
    with np.errstate(all="ignore"):
        whitened = np.asarray(grads, dtype=float).reshape(-1, d) @ frame
    mats = _row_neg_hessians(density, theta, frame, h).reshape(whitened.shape[0], d * d)
    with np.errstate(all="ignore"):
        norms = np.column_stack([np.linalg.norm(np.where(np.isfinite(whitened), whitened, 0.0), axis=1),
                                 np.linalg.norm(mats, axis=1)]) / np.asarray(scales, dtype=float)
    return np.column_stack([whitened, mats, norms])


def _shrunk_eigen(data: np.ndarray, prior: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of ``prior + data`` after removing what the noise ``tau`` explains.

    ``data`` is the released (noisy) curvature in the current frame, ``prior``
    the exact prior curvature in that frame.  The data part's eigenvalues are
    shrunk towards 0 by their signal-to-noise ratio
    (``lambda (1 - tau^2 / lambda^2)_+``), the exact prior is added, absolute
    values are taken (saddle-free Newton), and eigenvalues are floored at
    ``min(1, tau)``: a direction whose curvature the release cannot resolve
    keeps the current frame's scale (it is neither widened by noise nor by a
    curvature that is merely unknown) — so an unresolved frame stays too
    narrow rather than too wide, and steps stay short.  Bounded to
    ``[1e-3, 1e8]``.
    """
    data = np.where(np.isfinite(data), data, 0.0)
    lam_d, q_d = np.linalg.eigh(0.5 * (data + data.T))
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.clip(1.0 - tau**2 / np.maximum(lam_d * lam_d, 1e-300), 0.0, 1.0)
    total = (q_d * (lam_d * keep)) @ q_d.T + np.where(np.isfinite(prior), prior, 0.0)
    lam, q = np.linalg.eigh(0.5 * (total + total.T))
    lam = np.maximum(np.abs(lam), min(1.0, tau))
    return np.clip(lam, 1e-3, 1e8), q


AXIS_FAMILYWISE = 0.05
"""Probability that noise alone narrows some axis in :func:`_axis_narrowing` (Bonferroni over the
``d`` diagonal entries, one-sided)."""


AXIS_NARROW_MIN = 2.0
"""An axis narrows only where its diagonal curvature is beyond this (its frame at least ``sqrt(2)``
times too wide): near it the eigenvalue floor of :func:`_shrunk_eigen` (``min(1, tau)``, below 1)
widens the narrowed axis again, and the two alternated."""


def _axis_narrowing(data: np.ndarray, prior: np.ndarray, entry_sd: float) -> np.ndarray:
    """Per axis of the current frame, the factor (at most 1) that narrows the axes whose own
    diagonal entry of the released curvature resolves a curvature above 1 (post-processing).

    In frame units a right frame has curvature 1; an axis ``f`` times too wide has ``f^2``.
    :func:`_shrunk_eigen` resolves a direction only beyond the noise's *spectral* norm ``tau``
    (``1.5 s sqrt(2 d)`` for entry sd ``s``), but a single diagonal entry is resolved beyond a few
    ``s``: at 1,000 rows, epsilon = 1 an ordered logistic regression's top cut point, left at the
    initial scale's floor (scale 1, 12 times its posterior sd), read 2.0-6.1 on its diagonal
    against ``s`` = 0.77 in every round while ``tau`` = 4.0 left its eigenvalue at the floor, so
    the frame stayed 6-12 times too wide, every round's noise landed there, and 5 of 24 runs ended
    beyond 20 posterior sds (up to 1.2e10).  :func:`_pooled_estimate` narrows the pool's next
    frame with it, once two rounds are pooled (then none of the 24 beyond 20, the worst 12.5).
    An axis ``j``
    narrows by ``1 / sqrt(c_j)`` (``c_j`` its diagonal, data plus exact prior: a diagonal Newton
    update of the frame, Jacobi's) where ``c_j`` is beyond both :data:`AXIS_NARROW_MIN` and
    ``1 + k s`` and the data part alone is beyond ``k s``, ``k`` one-sided Bonferroni over the
    ``d`` axes at :data:`AXIS_FAMILYWISE`.  Where no axis qualifies the factors are all 1.  Clipped
    per-row curvatures under-read an axis that is too wide (their sum is at most the depending
    rows times the bound), so this narrows less than the truth would: the safe side.

    Only the pool's next frame narrows, not each round's own step and frame: applied there too,
    the heteroscedastic regression of ``benchmarks/published_models.py`` (1,000 rows, epsilon =
    1) went from median 7.3 to 13.8 sds over 24 runs and the gamma GLM's worst from 1,250 to
    4,320, where the pool's frame alone left both about as they were (docs/adaptation.md §7).
    """
    d = data.shape[0]
    k = float(stats.norm.isf(AXIS_FAMILYWISE / max(d, 1)))
    own = np.where(np.isfinite(np.diag(data)), np.diag(data), 0.0)
    total = own + np.where(np.isfinite(np.diag(prior)), np.diag(prior), 0.0)
    if not (math.isfinite(entry_sd) and entry_sd > 0.0):
        return np.ones(d)
    narrowed = (total > max(AXIS_NARROW_MIN, 1.0 + k * entry_sd)) & (own > k * entry_sd)
    return np.where(narrowed, 1.0 / np.sqrt(np.where(narrowed, total, 1.0)), 1.0)


def _narrowed_eigen(data: np.ndarray, prior: np.ndarray, tau: float,
                    entry_sd: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_shrunk_eigen` in the frame narrowed by :func:`_axis_narrowing` (factors ``D``).

    Returns ``lam``, ``q`` (of ``D (data + prior) D``, shrunk and floored there) and ``D`` as a
    vector: the curvature in the current frame is ``D^-1 Q diag(lam) Q' D^-1``, its inverse
    ``D Q diag(1/lam) Q' D`` and the next frame's basis ``A D``.  The noise's spectral norm in
    the narrowed frame is at most ``max(D)^2 tau``.
    """
    narrow = _axis_narrowing(data, prior, entry_sd)
    outer = narrow[:, None] * narrow[None, :]
    lam, q = _shrunk_eigen(data * outer, prior * outer, tau * float(np.max(narrow)) ** 2)
    return lam, q, narrow


POOL_FRAME_GROWTH = 1.25
"""Most a pooled round's next frame widens any direction by (its pooled curvature's eigenvalues
floored at ``POOL_FRAME_GROWTH ** -2`` for the frame only: the curvature, the covariance and the
one-step estimates keep theirs).  The pool's own floor, ``min(1, tau / sqrt(K))``, is below 1, so
an unresolved direction was widened by up to ``(tau / sqrt(K)) ** -1/2`` a round, and once wide its
rows' curvatures (growing as the frame squared) were clipped at the public bound: in one of 24
``earnings``-like NumPy seeds (1,059 rows, epsilon = 4) the frame grew 1.5-1.7 times a round past
the posterior's scale, to 11.8 times it, and the run ended 6,090 sds off (warned).  Capped, that
seed ends 2.5; the 24 seeds' median stays 1.42 and other cells are nearly draw for draw the same
(docs/adaptation.md §7, "A pooled frame that kept widening").  Floor 1 (keep the scale) fixed that
seed too but cost the pool's useful widening: logistic regression at n = 1e4, epsilon = 1, median
2.16 -> 2.79."""


def _next_frame(frame: np.ndarray, lam: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The frame ``B`` with ``B B' = A (Q diag(lam) Q')^-1 A'`` (``A`` = ``frame``): the symmetric
    root, ``A Q diag(lam^-1/2) Q'``.

    Any ``A Q diag(lam^-1/2) R`` with ``R`` orthogonal has the same ``B B'``, but the next
    round's isotropic noise lands as ``B z``, so the choice must not depend on the basis LAPACK
    picks for a repeated eigenvalue (every eigenvalue floored at ``min(1, tau)`` is one).  With
    ``R = I`` it did: the sharded and in-process runs of ``tests/test_distributed.py``, whose
    released sums differ by 1e-16, took different bases for a floored pair and ended 0.4-2.7
    apart.  The symmetric root depends on ``Q diag(lam) Q'`` alone.
    """
    return frame @ ((q / np.sqrt(lam)) @ q.T)


def _gain_floor(lam: np.ndarray, q: np.ndarray, grad: np.ndarray,
                gain: float) -> tuple[np.ndarray, bool]:
    """Floor the step's curvature so that no eigen-direction gains more than ``gain`` (summed).

    Along eigen-direction ``q_k`` a step ``du_k = (q_kᵀ g) / lam_k`` changes the
    summed log-likelihood (gradient ``g``) by ``(q_kᵀ g)^2 / lam_k`` to first
    order; ``lam_k >= (q_kᵀ g)^2 / gain`` caps that at ``gain``.  ``g`` is the
    released gradient of the rows only: the exact prior's gradient and
    curvature are known, and far out in a proper prior's tail both are huge
    (``sigma ~ normal(0, 100)`` at ``sigma = 4e6``), where counting its
    gradient would freeze the step.  Returns the floored eigenvalues and
    whether the floor bound anywhere (post-processing of released values).
    """
    gq = q.T @ grad
    floor = np.where(np.isfinite(gq), gq * gq, 0.0) / gain
    return np.maximum(lam, floor), bool(np.any(floor > lam))


def _initial_scale(holder: Any, theta: np.ndarray, n_public: int, s: AdaptationSettings, z: float,
                   rng_noise: np.random.Generator, ledger: Ledger, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The local sd of every coordinate at ``theta`` from a private upper quantile of the per-row
    curvatures (step 1 of :func:`private_mode`), and the coordinates no significant number of rows
    depends on (their scale is 1).

    The first of ``s.quantile_rounds`` count releases counts, per coordinate,
    the rows ``m_j`` whose curvature is above the search range's floor (the
    rows that depend on it); the others search the quantile among those rows:
    a fraction ``SCALE_TAIL`` of them, at least 3.7 count-noise sds of rows
    (:func:`scale_tail`'s reason), at most half of them.  A tail taken of all
    ``n`` rows instead finds ~0 for a coordinate that fewer rows depend on
    than the tail (a binary predictor at 40 % against the tail of 0.5 the
    count noise forces at n = 1e3, epsilon = 1): a frame 1e4 times too wide.
    The frame still divides by all ``n`` rows (as if every row depended on
    the coordinate), so for a sparse one it errs narrow, the safe side.  A
    coordinate whose count of depending rows is within
    :data:`DEPENDING_SDS` noise sds of 0 is at the floor (scale 1), but one
    beyond :data:`SPARSE_SDS` sds (rows surely depend on it, too few
    to measure: a binary predictor at 25 %, an ordered logit's top cut point,
    at 1,000 rows and epsilon = 1) at most the widest scale measured: scale 1
    in the model's units was 13 times the posterior sd of the gamma GLM's
    binary predictor (one round then moved it 4,500 posterior sds) and 12
    times the cut point's in ``benchmarks/published_models.py``.  24 runs
    each, median (max) worst error: gamma GLM 31 (1,250) -> 12 (153), ordered
    logit 7.2 (12.5) -> 5.2 (9.8), ``roaches`` 15 (129) -> 14 (68); models
    without such a coordinate are draw for draw the same.  The cap
    at half is half of ``m_j - DEPENDING_LOWER_SDS`` noise sds, not of the
    released ``m_j``: a count high by noise put the target beyond the rows
    really there, and the search then found a threshold among the rows that
    do not depend on the coordinate (curvature ~0; a frame up to the scale's
    clip, 1e3, and in an ordered logistic regression a first step of 1e6
    along its top cut point's log increment).
    """
    d = theta.size
    # Per-row values are computed and kept where the rows live (in this
    # process, or on the workers of a sharded model); only counts and clipped
    # sums of them come back, through the mechanisms of releases.py.
    curv_stat = holder.row_statistic(_curvature_rows, theta, s.initial_fd_step)
    cols = RowColumns(holder, curv_stat, 0, d)
    depending = noisy_counts(rng_noise, cols, np.full(d, 2.0 ** LOG2_RANGE[0]), z, ledger,
                             f"{what}, rows depending")
    # ---- post-processing of the released counts ----
    count_sd = z * math.sqrt(d)
    m = np.clip(depending, 1.0, float(n_public))
    # rows the tail should hold, at most half of the rows that surely depend on the coordinate: a
    # count high by noise must not put the target beyond the rows really there.  The tail is then
    # taken as the median of those rows (as if fewer rows depended on it: the narrow side)
    need = tail_rows(m, d, z)
    half = 0.5 * np.clip(depending - DEPENDING_LOWER_SDS * count_sd, 1.0, float(n_public))
    capped = need > half
    target = np.where(capped, half, need)
    tail = np.where(capped, 0.5, need / m)   # fraction of the m_j depending rows above t
    t, at_floor = private_quantiles(rng_noise, cols, tail=target / n_public, n_public=n_public,
                                    rounds=s.quantile_rounds - 1, noise_multiplier=z, ledger=ledger,
                                    what=what)
    del curv_stat, cols  # the rows' statistic is dropped where it lives
    at_floor = at_floor | (depending < DEPENDING_SDS * count_sd)
    # t is an upper quantile of the depending rows' curvatures; their mean is about
    # t / chi2_1.ppf(1 - tail) for GLM rows (w x^2 with x^2 ~ chi2_1).  The frame takes it over all
    # n rows, as if every row depended on the coordinate: for one that only m_j rows depend on it
    # errs narrow by sqrt(m_j / n) (safe: steps short), where m_j would make a point mass (a binary
    # predictor, curvature 1 on its rows) 1.65 times too wide (tried: 3 of 24 seeds of a regression
    # with a 40 % binary predictor ended 60-375 posterior sds off at n = 1059, epsilon = 4, against
    # at most 7.9 before; with n, 2 of 64 beyond 20, as before)
    scale = 1.0 / np.sqrt(n_public * t / stats.chi2.ppf(1.0 - tail, 1))
    out = np.where(at_floor | ~np.isfinite(scale), 1.0, np.clip(scale, 1e-12, 1e3))
    # A coordinate that surely has depending rows (count beyond SPARSE_SDS noise sds) but too few
    # to measure its scale is no wider than the widest coordinate measured (the narrow side:
    # steps short, and an unresolved direction leaves the search unsettled, which warns)
    sparse = at_floor & (depending > SPARSE_SDS * count_sd)
    measured = ~at_floor & np.isfinite(scale)
    if sparse.any() and measured.any():
        out = np.where(sparse, np.minimum(out, float(np.max(out[measured]))), out)
    return out, at_floor


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
        Tuning constants.
    trace : list, optional
        If given, one dict per round is appended (released quantities only).

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

    theta = np.array(init, dtype=float)
    holder = queries(density)
    far_points: list[np.ndarray] = []
    if s.far_rounds:
        far_scale, far_floor = _initial_scale(holder, theta, n_public, s, zs["far scale"], rng_noise, ledger,
                                              "far scale count")
        far_points = far_phase(holder, density, theta, local_sd=far_scale, moving=~far_floor,
                               n_public=n_public, rounds=s.far_rounds, multipliers=zs,
                               max_step=s.max_step, rng_noise=rng_noise, ledger=ledger,
                               on_round=None if trace is None else trace.append)
        theta = far_points[-1].copy()
    scale, at_floor = _initial_scale(holder, theta, n_public, s, z_q, rng_noise, ledger, "scale count")
    data_coordinates = ~at_floor
    frame = np.diag(scale)
    turned = False
    if s.orient:
        frame, turned = _oriented_frame(holder, theta, frame, data_coordinates, n_public, s,
                                        zs["orientation"], zs["direction"], rng_noise, ledger)

    rounds: list[dict[str, Any]] = []
    pool: list[dict[str, Any]] = []
    tail_counts: list[float] = []   # released: rows beyond TAIL_MULTIPLE x the bound, per near round
    tail_sd = math.inf
    # adaptive_clip: factor on the public gradient bound near the mode, and the released counts
    # of rows beyond the bound at the current factor
    adjust, clipped_counts = 1.0, []
    allowed = allowed_clipped_rows(z_g, s.rounds, relation)
    adaptive = bool(s.adaptive_clip)
    if not 0 < s.clipped_repeats < s.clip_rounds:
        raise ValueError("clipped_repeats must be between 1 and clip_rounds - 1")
    tail_repeats = s.clip_rounds - s.clipped_repeats
    radius = math.inf   # trust region of a full step, frame units (set by an overshoot)
    gain = s.step_gain * n_public   # largest summed first-order gain per eigen-direction
    path = [np.array(init, dtype=float), *far_points]   # ends at theta, where the rounds start
    previous: dict[str, Any] | None = None
    for k in range(s.rounds):
        stat = holder.row_statistic(_round_rows, theta, frame, s.fd_step, np.array([c_g, c_h]))
        whitened = RowColumns(holder, stat, 0, d)
        mats = RowColumns(holder, stat, d, d + d * d)
        norms = RowColumns(holder, stat, d + d * d, d + d * d + 2)
        if pool:
            # Near the mode the bounds are the public forecast and the medians
            # are not needed: the same count releases (same multiplier) check
            # the tail instead — rows beyond TAIL_MULTIPLE times the gradient bound.
            tail = RowColumns(holder, stat, d + d * d, d + d * d + 1)
            counts = noisy_counts(rng_noise, tail, np.array([TAIL_MULTIPLE]), z_c, ledger,
                                  f"tail count, round {k}", repeats=tail_repeats)
            tail_counts.append(float(np.mean(counts)))
            tail_sd = z_c / math.sqrt(tail_repeats)
            bound_g, bound_h = c_g * adjust, c_h
            # rows beyond this round's bound (released), pooled over the rounds at this bound: the
            # clipping bias the result reports (every run); with adaptive_clip, too many of them
            # raise the bound for the next rounds (post-processing)
            counts = noisy_counts(rng_noise, tail, np.array([adjust]), z_c, ledger,
                                  f"clipped count, round {k}", repeats=s.clipped_repeats)
            clipped_counts.append(float(np.mean(counts)))
            sd_n = z_c / math.sqrt(s.clipped_repeats * len(clipped_counts))
            if (adaptive and float(np.mean(clipped_counts)) - 2.0 * sd_n > allowed
                    and adjust * KAPPA_STEP <= KAPPA_ADJUST_MAX):
                adjust *= KAPPA_STEP
                clipped_counts = []
        else:
            # Far from the mode (or in a frame that is still wrong) the rows are
            # larger than the public forecast: a private median of both norms
            # raises the clip bounds so that the step is not throttled by clipping.
            medians, _ = private_quantiles(rng_noise, norms, tail=0.5,
                                           n_public=n_public, rounds=s.clip_rounds, noise_multiplier=z_c,
                                           ledger=ledger, what=f"clip count, round {k}",
                                           log2_range=(-20.0, 60.0))
            bound_g = c_g * max(1.0, s.kappa_far * float(medians[0]))
            bound_h = c_h * max(1.0, s.kappa_far * float(medians[1]))
        g_rel, _ = clipped_vector_sum(rng_noise, whitened, bound_g, z_g, ledger, f"gradient sum, round {k}")
        sd_g = ledger.entries[-1].noise_sd
        h_rel, sd_h = clipped_matrix_sum(rng_noise, mats, bound_h, z_h, ledger, f"curvature sum, round {k}")
        _, pg = prior_gradient(density, theta)
        grad = g_rel + frame.T @ np.where(np.isfinite(pg), pg, 0.0)
        prior_hess = prior_neg_hessian(density, theta, frame, s.fd_step)
        tau = NOISE_SPECTRAL_FACTOR * sd_h * math.sqrt(2.0 * d)
        lam, q = _shrunk_eigen(h_rel, prior_hess, tau)
        lam, gain_capped = _gain_floor(lam, q, g_rel, gain)
        du = q @ ((q.T @ grad) / lam)
        h_inv = (q / lam) @ q.T
        inv_frame = np.linalg.inv(frame)

        # Did the previous full step go too far?  The released directional
        # derivative here points back (overshoot), or the released curvature
        # collapsed (rows left their domain or saturated): step back instead.
        overshoot = collapse = False
        if previous is not None and previous["full"] and not previous["near"]:
            back = inv_frame @ previous["move"]
            slope = float(grad @ back)
            overshoot = (slope < -2.0 * sd_g * float(np.linalg.norm(back))
                         and slope < -0.5 * previous["slope"])
            collapse = float(np.trace(h_rel)) < s.collapse * d and float(np.trace(h_rel)) < tau
        if overshoot or collapse:
            t = 0.25
            if overshoot and not collapse and previous["slope"] > 0:
                t = previous["slope"] / (previous["slope"] - slope)
            t = float(np.clip(t, 0.1, 0.5))
            radius = max(2.0 * t * previous["length"], math.sqrt(d))
            move = t * previous["move"]
            theta = previous["theta"] + move
            frame = previous["frame"]
            previous = {"theta": previous["theta"], "frame": frame, "move": move, "full": False,
                        "slope": previous["slope"] * t, "near": False, "length": t * previous["length"]}
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
                pool.append({"theta": theta.copy(), "grad": inv_frame.T @ grad,
                             "grad_precision": frame @ frame.T / sd_g**2,
                             "hess": inv_frame.T @ h_rel @ inv_frame,
                             "prior_hess": inv_frame.T @ prior_hess @ inv_frame, "sd_h": sd_h,
                             "hess_diag_sd": curvature_diagonal_sd(sd_h, inv_frame)})
                pooled = _pooled_estimate(pool, frame)
                # In a frame the release could not resolve, a short step in frame units
                # says little about the distance: once the pooled curvature resolves it,
                # rounds far from the pooled mode (in its metric) leave the pool.
                reach = 3.0 * math.sqrt(d) + 3.0
                kept = [r for r in pool if _distance(r["theta"], pooled) <= reach]
                if kept and len(kept) < len(pool):
                    narrower = _pooled_estimate(kept, frame)
                    # A round leaves only if it is far from what is left as well: the round just
                    # made sits at the previous pooled mode, so dropping it for being far from the
                    # pool it joined, and returning to that mode, repeats itself round after round
                    # (seen: 20 rounds at one point 11 sds off; _drop_consistent).
                    if _drop_consistent(pool, kept, narrower, reach):
                        pool[:] = kept
                        pooled = narrower
                move = pooled.mode - theta
                new_frame = pooled.frame
            else:
                pool.clear()
                new_frame = _next_frame(frame, lam, q)
            previous = {"theta": theta.copy(), "frame": frame.copy(), "move": move, "full": True,
                        "slope": float(grad @ (inv_frame @ move)), "near": near,
                        "length": float(np.linalg.norm(du))}
            theta = theta + move
            frame = new_frame
        if trace is not None:
            trace.append({"theta": path[-1], "step": move.copy(), "overshoot": overshoot,
                          "collapse": collapse, "eig": lam.copy(), "ok": rounds[-1]["ok"],
                          "gain_capped": gain_capped,
                          "tau": tau, "bound_g": bound_g, "bound_h": bound_h,
                          "frame_sd": np.sqrt(np.diag(frame @ frame.T))})
        path.append(theta.copy())

    dispersion, heterogeneity = math.nan, 0.0
    if len(pool) >= 2:
        pooled = _pooled_estimate(pool, frame, random_effects=True)
        dispersion, heterogeneity = pooled.dispersion, pooled.heterogeneity
        if pooled.resolved:
            mode, noise_cov, curvature = _exact_prior_mode(density, pooled, frame, s.fd_step,
                                                           rowless=~data_coordinates)
        else:   # an unresolved pool's quadratic model is not trusted beyond its one-step estimates
            mode, noise_cov, curvature = pooled.mode, pooled.noise_cov, pooled.curvature
        used, settled = len(pool), pooled.resolved
    else:
        last = [r for r in rounds if "one_step" in r][-1:]
        if not last:  # every round stepped back: report where the search stands
            last = [{"one_step": theta, "noise_cov": np.diag(np.full(d, np.inf)),
                     "curvature": np.linalg.inv(frame @ frame.T)}]
        mode, noise_cov, curvature = last[0]["one_step"], last[0]["noise_cov"], last[0]["curvature"]
        used, settled = len(last), False
    lam, q = np.linalg.eigh(0.5 * (curvature + curvature.T))
    lam = np.maximum(lam, 1e-12 * max(float(lam.max()), 1e-300))
    covariance = (q / lam) @ q.T
    frame = (q / np.sqrt(lam)) @ q.T
    # the prior's share of the curvature at the mode, per coordinate the rows depend on
    prior_theta = np.linalg.inv(frame).T @ prior_neg_hessian(density, mode, frame, s.fd_step) @ np.linalg.inv(frame)
    total = np.diag(0.5 * (curvature + curvature.T))
    with np.errstate(all="ignore"):
        shares = np.diag(prior_theta) / total
    shares = shares[data_coordinates & np.isfinite(shares)]
    prior_share = float(np.max(shares)) if shares.size else 0.0
    tail_rows = float(np.mean(tail_counts)) if tail_counts else math.nan
    tail_rows_sd = tail_sd / math.sqrt(len(tail_counts)) if tail_counts else math.inf
    clipped_rows = float(np.mean(clipped_counts)) if clipped_counts else math.nan
    return AdaptationResult(mode, covariance, 0.5 * (noise_cov + noise_cov.T), frame, c_g, ledger,
                            used, settled, np.array(path), prior_share, tail_rows, tail_rows_sd, adjust,
                            turned, clipped_rows, dispersion, heterogeneity)


POLISH_ITERATIONS = 50
"""Most Newton iterations of :func:`_exact_prior_mode` (a public computation)."""
HELD_NOISE_SDS = 3.0
"""A coordinate is *held by the prior* (:func:`_exact_prior_mode`) when the pooled released data
curvature on its diagonal is within this many noise sds of 0 and the exact prior's is beyond it."""


def _exact_prior_mode(density: Any, pooled: "_Pooled", frame: np.ndarray, h: float,
                      rowless: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Put the coordinates the prior holds at their exact conditional mode (settled searches).

    The pooled one-step estimates use the prior's curvature averaged over the
    rounds' points, which is right where the rows dominate and wrong for a
    coordinate only the prior touches — a hierarchical mean or scale, whose
    conditional mode moves with the group effects (the released data
    gradient there is pure noise).  The coordinates ``S`` whose released data
    curvature is within :data:`HELD_NOISE_SDS` noise sds of 0 while the exact
    prior's is beyond that (or, for a coordinate ``rowless`` — the initial
    scale's released counts put fewer than its tail share of the rows, at
    least 10 %, above the curvature floor — positive) are moved to the
    maximum of the exact log prior over ``theta_S`` with the other
    coordinates fixed at the pooled estimate
    (damped Newton with backtracking, public).  The privacy noise reaches them only through the
    others: with ``J = -P_SS^-1 P_SR`` (``P`` the prior's negative Hessian at
    the new point) the noise covariance is ``L Sigma L'``, ``L`` the
    identity on ``R`` and ``J`` on ``S``.  The curvature is recomputed with
    the prior's at the new point.  Post-processing of released values only.

    Returns the mode, its noise covariance and the curvature (theta space);
    the pooled estimate unchanged when no coordinate is held by the prior, the
    prior is not finite there, or Newton has not reached a stationary point
    after :data:`POLISH_ITERATIONS`.
    """
    d = frame.shape[0]
    inv_frame = np.linalg.inv(frame)
    unchanged = (pooled.mode, pooled.noise_cov, pooled.curvature)

    def prior_theta(theta: np.ndarray) -> np.ndarray:
        return inv_frame.T @ prior_neg_hessian(density, theta, frame, h) @ inv_frame

    mean_hess = pooled.data_curvature
    noise = pooled.data_curvature_diag_sd   # of the mean data curvature's diagonal (theta space)
    prior_diag = np.diag(prior_theta(pooled.mode))
    # The prior must be seen to dominate: its curvature beyond the data's noise, or the rows not
    # touching the coordinate at all (a hierarchical scale whose early rounds ran in a narrow
    # frame has a pooled data-curvature noise above its prior curvature: measured 1.85 and 101
    # against ~2, where the rows' curvature is exactly 0).
    # "Rowless" is the released verdict that few rows touch the coordinate (under the initial
    # scale's tail share, at least 10 %): also a group effect of one of many small groups whose
    # data curvature is within noise, which this rule pulls to its prior conditional mode (not
    # seen in tests: such models did not settle).  A floor on the prior's curvature (3 noise sds
    # of a release in the final frame) left mu 16 sds off in a settled NumPy run: none is set.
    rowless = np.zeros(prior_diag.size, dtype=bool) if rowless is None else np.asarray(rowless)
    prior_holds = (prior_diag > HELD_NOISE_SDS * noise) | (rowless & (prior_diag > 0.0))
    held = (np.abs(np.diag(mean_hess)) < HELD_NOISE_SDS * noise) & prior_holds & np.isfinite(prior_diag)
    if not held.any() or held.all():
        return unchanged
    theta = pooled.mode.copy()
    value, grad = prior_gradient(density, theta)
    if not np.isfinite(value):
        return unchanged
    scale = np.sqrt(np.diag(pooled.curvature)[held]) ** -1.0   # the held coordinates' sds
    converged = False
    for _ in range(POLISH_ITERATIONS):
        p_ss = prior_theta(theta)[np.ix_(held, held)]
        lam, q = np.linalg.eigh(0.5 * (p_ss + p_ss.T))
        lam = np.maximum(np.abs(lam), 1e-12 * max(float(np.max(np.abs(lam))), 1e-300))
        step = q @ ((q.T @ np.where(np.isfinite(grad[held]), grad[held], 0.0)) / lam)
        longest = float(np.max(np.abs(step) / scale))
        if longest > 3.0 * math.sqrt(d):   # trust region: 3 sqrt(d) sds of any held coordinate
            step *= 3.0 * math.sqrt(d) / longest
        if longest < 1e-6:
            converged = True
            break
        t = 1.0
        while t > 1e-6:
            trial = theta.copy()
            trial[held] += t * step
            trial_value, trial_grad = prior_gradient(density, trial)
            if np.isfinite(trial_value) and trial_value >= value:
                break
            t *= 0.5
        else:
            converged = longest < 1e-3
            break
        theta, value, grad = trial, trial_value, trial_grad
    if not converged:
        return unchanged
    p_full = prior_theta(theta)
    link = np.eye(d)
    link[np.ix_(held, held)] = 0.0
    link[np.ix_(held, ~held)] = -np.linalg.solve(p_full[np.ix_(held, held)], p_full[np.ix_(held, ~held)])
    noise_cov = link @ pooled.noise_cov @ link.T
    lam, q = _shrunk_eigen(frame.T @ mean_hess @ frame, frame.T @ p_full @ frame, pooled.tau)
    curvature = inv_frame.T @ ((q * lam) @ q.T) @ inv_frame
    return theta, 0.5 * (noise_cov + noise_cov.T), 0.5 * (curvature + curvature.T)


def curvature_diagonal_sd(noise_sd: float, inv_frame: np.ndarray) -> np.ndarray:
    """Noise sd of the diagonal of a curvature release mapped to theta space, ``A^-T E A^-1``.

    :func:`~stan_dp.adaptation.releases.clipped_matrix_sum` adds ``E`` with
    diagonal sd ``s`` and off-diagonal sd ``s / sqrt(2)`` (mirrored); for
    ``v = A^-1 e_j``, ``v' E v = sum_i v_i^2 E_ii + 2 sum_{i<j} v_i v_j E_ij``
    has variance ``s^2 (sum_i v_i^4 + 2 sum_{i<j} v_i^2 v_j^2) = s^2 |v|^4``.
    """
    return noise_sd * np.sum(inv_frame * inv_frame, axis=0)


class _Pooled(NamedTuple):
    mode: np.ndarray
    noise_cov: np.ndarray
    curvature: np.ndarray
    frame: np.ndarray
    """The search's next frame: the pooled curvature's root, widening no direction by more than
    :data:`POOL_FRAME_GROWTH`."""
    resolved: bool
    """No eigenvalue of the pooled curvature sits at the noise floor."""
    data_curvature: np.ndarray
    """Mean of the pooled rounds' released data curvatures (theta space, unprojected)."""
    tau: float
    """Spectral noise of :attr:`data_curvature` in the pooling frame, as if every pooled round had
    been released in it (the :func:`_shrunk_eigen` threshold)."""
    data_curvature_diag_sd: np.ndarray
    """Noise sd of the diagonal of :attr:`data_curvature` (theta space), each round's release
    mapped from its own frame: where the frames differed (a coordinate only the prior holds, whose
    scale moves with the noisy pooled curvature), the pooling frame's entry noise understates it
    by the ratio of the frames' scales squared."""
    dispersion: float = math.nan
    """``Q / (d (K - 1))`` of the one-step estimates about the fixed-effect pooled mode."""
    heterogeneity: float = 0.0
    """``c`` of the random-effects pooling (0: fixed-effect pooling)."""


def _distance(theta: np.ndarray, pooled: _Pooled) -> float:
    """Distance of ``theta`` from the pooled mode in the pooled curvature's metric (posterior sds)."""
    diff = theta - pooled.mode
    return math.sqrt(max(float(diff @ pooled.curvature @ diff), 0.0))


def _drop_consistent(pool: list[dict[str, Any]], kept: list[dict[str, Any]], narrower: _Pooled,
                     reach: float) -> bool:
    """Whether the rounds of ``pool`` not in ``kept`` are beyond ``reach`` of ``narrower`` (the pool
    of ``kept``) too, so that dropping them is not undone by the move it causes.

    The rounds of ``pool`` were each far from the pool they were part of; a dropped round within
    ``reach`` of the pool without it was far only because it pulled the pooled mode its own way.
    Without this check a round whose one-step estimate was off by several sds sent the search to
    that estimate, the round made there pointed back, the two pooled landed between them, the new
    round (at the first one's estimate) was the far one and was dropped, and the search returned
    to the first one's estimate: a Poisson GLM at n = 1e4, epsilon = 1 sat 11 posterior sds off
    for its last 20 rounds.
    """
    kept_ids = {id(r) for r in kept}
    return all(_distance(r["theta"], narrower) > reach for r in pool if id(r) not in kept_ids)


DISPERSION_QUANTILE = 0.99
"""The final pooling (:func:`_pooled_estimate` with ``random_effects``) turns to random effects
where the rounds' disagreement ``Q`` exceeds this quantile of its chi-squared law under the noise
alone (so that 1 % of runs whose rounds differ by their noise alone are pooled that way too)."""


def _pooled_estimate(pool: list[dict[str, Any]], frame: np.ndarray,
                     random_effects: bool = False) -> _Pooled:
    """Pool near rounds: mean released curvature, then precision-weighted one-step estimates.

    The curvature is the mean of the rounds' released (symmetric, unprojected)
    curvatures mapped to ``theta`` space, made positive definite once, in the
    current frame, against the noise of that mean (so the projection's upward
    bias is that of the pooled noise, not of one round's).  Each round gives
    ``e_k = theta_k + H^-1 g_k`` with noise covariance ``H^-1 S_k H^-1``,
    ``S_k^-1 = A_k A_k' / s_k^2`` (the gradient release is isotropic in its
    frame ``A_k``); they are averaged with weights ``H S_k^-1 H``.

    The rounds' noises are independent, so if the ``e_k`` differ by their
    noise alone ``Q = sum_k (e_k - m)' V_k^-1 (e_k - m)`` (``V_k`` their noise
    covariances, ``m`` the pooled mode) is chi-squared with ``d (K - 1)``
    degrees of freedom; :attr:`_Pooled.dispersion` is ``Q`` over that.  They
    differ by more where the quadratic model fails between the rounds' points
    (a round several sds out, its one-step estimate off by the change in
    curvature on the way) or where rounds clipped differently; a weighted
    mean then lets one round with a narrow noise (a round before the
    adaptive bound rose, or in a narrower frame) carry its error into the
    pooled mode: a Weibull regression at n = 1e4, epsilon = 4 pooled a
    round 6.5 sds out that held half the precision along one direction and
    ended 2.1 sds off with a claimed noise of 0.3 (``Q / d (K - 1)`` = 8.2;
    0.94-1.03 in five runs with other noise seeds).  With ``random_effects``
    and ``Q`` beyond its :data:`DISPERSION_QUANTILE` quantile, every round's
    covariance gets ``c H^-1`` added (a between-round error of ``sqrt(c)``
    posterior sds in every direction: the quadratic model's error grows with
    the distance in posterior sds), with ``c`` the root of ``Q(c) = d (K - 1)``
    (the Paule-Mandel estimator, for this one-parameter family of
    between-round covariances; ``Q(c)`` falls monotonically to 0): no round
    outweighs the others by its narrow noise alone, and the noise covariance
    ``(sum_k (V_k + c H^-1)^-1)^-1`` covers the disagreement (that run: 0.99
    sds off, claimed 0.45).
    """
    d = frame.shape[0]
    mean_hess = np.mean([r["hess"] for r in pool], axis=0)
    mean_prior = np.mean([r["prior_hess"] for r in pool], axis=0)
    sd_h = math.sqrt(float(np.mean([r["sd_h"] ** 2 for r in pool])) / len(pool))
    tau = NOISE_SPECTRAL_FACTOR * sd_h * math.sqrt(2.0 * d)
    data_f, prior_f = frame.T @ mean_hess @ frame, frame.T @ mean_prior @ frame   # frame units
    lam, q = _shrunk_eigen(data_f, prior_f, tau)
    resolved = bool(np.all(lam > 1.0001 * min(1.0, tau)))
    inv_frame = np.linalg.inv(frame)
    curvature = inv_frame.T @ ((q * lam) @ q.T) @ inv_frame
    curvature = 0.5 * (curvature + curvature.T)
    # H^-1 = A Q diag(1/lam) Q' A'
    h_inv = (frame @ q / lam) @ (frame @ q).T
    precision = np.zeros((d, d))
    weighted = np.zeros(d)
    for r in pool:
        p = curvature @ r["grad_precision"] @ curvature
        precision += p
        weighted += p @ (r["theta"] + h_inv @ r["grad"])
    noise_cov = np.linalg.pinv(precision)
    mode = noise_cov @ weighted
    diag_sd = np.sqrt(np.sum([r["hess_diag_sd"] ** 2 for r in pool], axis=0)) / len(pool)
    # the next frame also narrows the axes whose pooled diagonal resolves a curvature above
    # AXIS_NARROW_MIN (_axis_narrowing; the curvature, covariance and one-step estimates keep the
    # un-narrowed eigen-decomposition), once two rounds agree: a round counts as near when its own
    # noise is large, so one round may be far out, where the curvature is not the mode's (an
    # earnings-like regression at n = 1e3, epsilon = 1, narrowed a binary predictor's axis 20-fold
    # from its first round, 11 sds out, and crept along it: tests/test_step_gain.py)
    lam_n, q_n, narrow = (_narrowed_eigen(data_f, prior_f, tau, sd_h) if len(pool) >= 2
                          else (lam, q, np.ones(d)))
    next_frame = _next_frame(frame * narrow, np.maximum(lam_n, POOL_FRAME_GROWTH ** -2), q_n)
    dispersion, heterogeneity = math.nan, 0.0
    if random_effects and len(pool) >= 2:
        # in the pooled posterior frame F (F F' = H^-1), about the fixed-effect mode
        root = _next_frame(frame, lam, q)
        inv_root = np.linalg.inv(root)
        steps = np.array([inv_root @ (r["theta"] + h_inv @ r["grad"] - mode) for r in pool])
        covs = [np.linalg.pinv(inv_root @ r["grad_precision"] @ inv_root.T) for r in pool]
        dof = d * (len(pool) - 1)
        q_fixed = _dispersion_q(steps, covs, 0.0)[0]
        dispersion = q_fixed / dof
        if q_fixed > stats.chi2.ppf(DISPERSION_QUANTILE, dof):
            heterogeneity, shift, cov_z = _random_effects(steps, covs, dof)
            mode = mode + root @ shift
            noise_cov = root @ cov_z @ root.T
    return _Pooled(mode, 0.5 * (noise_cov + noise_cov.T), curvature, next_frame, resolved, mean_hess, tau,
                   diag_sd, dispersion, heterogeneity)


def _dispersion_q(steps: np.ndarray, covs: list[np.ndarray],
                  c: float) -> tuple[float, np.ndarray, np.ndarray]:
    """``Q(c)``, the pooled mode and its covariance when estimate ``k`` (posterior-frame
    coordinates) has covariance ``V_k + c I``."""
    eye = np.eye(steps.shape[1])
    weights = [np.linalg.inv(v + c * eye) for v in covs]
    cov = np.linalg.inv(np.sum(weights, axis=0))
    mode = cov @ np.sum([w @ e for w, e in zip(weights, steps)], axis=0)
    q = float(sum((e - mode) @ w @ (e - mode) for w, e in zip(weights, steps)))
    return q, mode, cov


MAX_HETEROGENEITY = 2.0 ** 900
"""Largest between-round variance ``c`` (posterior sds squared) :func:`_random_effects` searches to."""


def _random_effects(steps: np.ndarray, covs: list[np.ndarray],
                    dof: int) -> tuple[float, np.ndarray, np.ndarray]:
    """Paule-Mandel: the ``c >= 0`` with ``Q(c) = dof`` (:func:`_pooled_estimate`), the mode and
    its covariance there.  ``Q`` falls monotonically in ``c`` (every weight falls in the Loewner
    order and ``Q`` is a minimum over the mode) and like ``1 / c``, so doubling brackets it;
    ``c = 0`` where ``Q(0)`` is already within ``dof``.  The doubling is not capped short of
    :data:`MAX_HETEROGENEITY`: a search whose rounds were 1e28 posterior sds apart (``radon`` at
    1,000 rows, epsilon = 4) needs ``c`` ~ 1e53, and a cap at 1e12 left no sign change for the
    root finder, which raised; at the cap (rounds that far apart, or not finite) ``c`` is the cap
    and the covariance says the mode is nowhere."""
    q0, mode, cov = _dispersion_q(steps, covs, 0.0)
    if q0 <= dof:
        return 0.0, mode, cov
    high = 1.0
    while not _dispersion_q(steps, covs, high)[0] <= dof:
        if high >= MAX_HETEROGENEITY:
            _, mode, cov = _dispersion_q(steps, covs, high)
            return float(high), mode, cov
        high *= 2.0
    c = optimize.brentq(lambda x: _dispersion_q(steps, covs, x)[0] - dof, 0.0, high,
                        xtol=1e-9 * high, rtol=1e-9)
    _, mode, cov = _dispersion_q(steps, covs, c)
    return float(c), mode, cov
