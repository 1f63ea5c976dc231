"""The adaptation's plan: its settings and every release it will make, from public facts.

Nothing here reads the rows: how many Newton rounds, how the budget (a PLD mean
``sum 1 / (2 z^2)``) is split between the initial scale, the far phase, the
orientation, the clip medians, the gradient and the curvature releases, and
the clip bounds in the learned frame are functions of ``n``, ``d``, the budget
and the relation only (:func:`planned_settings`, :func:`noise_multipliers`,
:func:`adaptation_releases`: what the budget step composes before any data
are touched).
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np
from scipy import optimize

from stan_dp.accounting import Release, sensitivity_factor
from stan_dp.adaptation.far import (FAR_ROUNDS, far_multipliers, far_releases, planned_far_share,
                                    planned_first_median_boost)
from stan_dp.adaptation.forecast import whitened_grad_scale, whitened_hessian_scale
from stan_dp.adaptation.ridge import entry_threshold
from stan_dp.adaptation.skew import SKEW_SHARE

__all__ = [
    "AdaptationSettings", "planned_settings", "noise_multipliers", "adaptation_releases",
    "rounds_share", "round_count", "clip_inflation", "clip_median_tail", "allowed_clipped_rows",
    "scale_clip_inflation", "scale_tail_excess", "far_start_blind",
    "planned_quantile_share", "planned_direction_share", "scale_tail", "tail_rows",
    "orientation_noise_forecast", "orientation_detection_forecast", "curvature_noise_forecast",
    "check_planned", "CHECK_SHARE",
]


SCALE_TAIL = 0.1
"""The initial scale is the ``1 - SCALE_TAIL`` quantile of the per-row curvatures (or higher
up the tail when the count noise demands it: :func:`scale_tail`)."""


SCALE_TAIL_SDS = 3.7
"""The initial scale's quantile search targets at least this many count-noise sds of rows
(:func:`scale_tail`)."""


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


DIRECTION_GAP_SDS = 3.5
"""The orientation's direction counts (:func:`planned_direction_share`) get the share that puts
their target (half of the rows, where the count noise forces the tail there) at least this many
count-noise sds from both 0 and ``n``."""
DIRECTION_SHARE_MAX = 0.15
"""Largest share :func:`planned_direction_share` gives the direction counts."""


def planned_direction_share(n_public: int, dim: int, pld_mean: float, quantile_rounds: int,
                            share: float) -> float:
    """Share of the adaptation budget for the orientation's direction counts, from public facts.

    ``share``, raised (to at most :data:`DIRECTION_SHARE_MAX`) until the count noise sd
    ``z sqrt(dim)`` (``z = sqrt(quantile_rounds / (2 share pld_mean))``, :func:`noise_multipliers`;
    ``dim`` bounds the number of directions, the release's sensitivity) is at most ``n / 2`` over
    :data:`DIRECTION_GAP_SDS`.

    Why: the direction counts search a quantile of the per-row curvature along every turned
    direction (:func:`~stan_dp.adaptation.initial_frame._oriented_frame`) by bisection over
    ``2^-60 .. 2^60``, and where the rows are few their tail is forced to one half
    (:func:`scale_tail`).  The first comparisons are at thresholds below or above every row,
    where the count is ``n`` or 0, ``n / 2`` from the target; the bisection is monotone, so one
    false comparison there sends the quantile decades off.  At 500 rows, epsilon = 1, d = 3 the
    count noise sd was 129 rows against a target of 250 (1.9 sds: 2.6 % a comparison): in a
    ``wells``-like logistic regression the count at ``2^-30`` (all 500 rows above) read below 250
    in 3 of 64 runs, the direction was widened 993-fold (1,300 times the posterior sd along it)
    and the runs ended 664 and 98 sds off.  With the target 3.5 noise sds from both ends (2e-4 a
    comparison) the share is 0.098 there (0.131 at d = 4), 0.033-0.049 at 1,000 rows, epsilon = 1,
    d = 4-6, and unchanged at 1,000 rows for d = 3, at epsilon = 4 from 434 rows and at 2,000 rows
    (docs/adaptation.md §3, "Orientation": the paired runs).
    """
    gap_per_z = 2.0 * DIRECTION_GAP_SDS * math.sqrt(dim) / n_public   # 1 / z_max
    need = quantile_rounds * gap_per_z**2 / (2.0 * pld_mean)
    return float(min(DIRECTION_SHARE_MAX, max(share, need)))


CLIP_MEDIAN_GAP_SDS = 3.5
"""The Newton rounds' clip medians (:func:`clip_median_tail`) look for a threshold with at least
this many count-noise sds of rows above it."""


def clip_median_tail(n_public: int, noise_multiplier: float, columns: int = 2) -> float:
    """Tail fraction of the Newton rounds' clip medians: one half, or more where the count noise is large.

    The medians search ``2^-20 .. 2^60`` times the forecast; their first comparisons are at
    thresholds above every row, where the true count is 0 and ``tail * n`` rows from the target.
    One noise draw that far says "above", and the bound rises by that factor — ``2^20`` and
    more — so that round's gradient and curvature releases are noise at a million times their
    planned sd.  With the count noise sd ``z sqrt(columns)`` the tail is
    ``max(1/2, CLIP_MEDIAN_GAP_SDS z sqrt(columns) / n)``: the target is at least
    :data:`CLIP_MEDIAN_GAP_SDS` noise sds from 0 (a false "above" about 2e-4 a comparison).
    Beyond 1 no count can pass it, the search ends at its floor and the bound stays at the
    forecast: where the rows are too few for the count noise, the bound is not raised at all.
    Public (``n``, the plan's noise multiplier).

    Why: a Student-t regression at 500 rows, epsilon = 1 (count-noise sd 144 rows against a
    target of 250: 4 % a comparison) had some round's bound raised 10^6 to 10^12 times in 7 of 12
    runs; the same chance is 1-2 % a run at 1,000 rows, epsilon = 1, D = 4-6 (the gap 3.0-3.2
    sds), and nil from about 1,100 rows at epsilon = 1 (the tail is then one half, as before).
    """
    sd = float(noise_multiplier) * math.sqrt(int(columns))
    return float(max(0.5, CLIP_MEDIAN_GAP_SDS * sd / max(int(n_public), 1)))


def far_start_blind(settings: "AdaptationSettings", n_public: int, pld_mean: float) -> bool:
    """Whether the plan leaves the search no way to travel far (public: ``settings`` as
    :func:`planned_settings` returns them): no far phase (its vote's noise beyond
    :data:`~stan_dp.adaptation.far.VOTE_NOISE_LIMIT` of the rows even at its largest share) and no
    raise of the Newton rounds' clip bounds away from the pool (:func:`clip_median_tail` at least
    1: the count noise hides the target).  The rounds then only refine a start near the posterior:
    the 18 battery models at 40 rows (epsilon = 16), 100 (epsilon = 4) and 434 (epsilon = 1), all
    in this regime, settled in none of 648 runs, median worst error 5.0, 7.9 and 14.8 posterior sds
    from the default start, 0.90 and 1.8 at 40 and 100 rows started at the NUTS mean
    (docs/adaptation.md §7, "Small n across the battery").
    """
    z_clip = noise_multipliers(pld_mean, settings)["clip"]
    return settings.far_rounds == 0 and clip_median_tail(n_public, z_clip) >= 1.0


NOISE_SPECTRAL_FACTOR = 1.5
"""``tau = NOISE_SPECTRAL_FACTOR * s * sqrt(2 d)``: a symmetric Gaussian noise matrix with
diagonal sd ``s`` and off-diagonal ``s / sqrt(2)`` has spectral norm ``~ s sqrt(2 d)``."""


FIRST_RADIUS = 30.0
""":attr:`AdaptationSettings.first_radius`: the first Newton step moves at most ``30 sqrt(d)`` frame
units, thirty times the length of a typical posterior draw in a frame at the posterior's scale.

Before it, the first round's step had no trust region: the quadratic model of one round's release,
measured where the search stood, was followed as far as it said.  ``wells`` with
``real<lower=0, upper=10> b_arsenic`` at 3,000 rows, epsilon = 16 (the far phase ending 34 sds
off) stepped to 670-1,400 sds in 3 of 24 runs; there the rows saturate, the curvature along some
direction falls below the release's noise, the frame widens by up to ``1/sqrt(tau)`` a round, the
clipped slopes (every row at the bound) no longer show an overshoot against the widened frame, and
the step-backs drifted outwards: 74, 1,152 and 1.3e6 sds at the end, unsettled.  With the first
step held to ``30 sqrt(d)`` all 24 settled, the largest 0.62 sds.  Over the 18-model battery
(432 runs per cell; runs changed, geometric mean of the worst error's ratio, runs within 0.5 sds,
silent misses): 1,000 rows, epsilon = 16: 41, 1.097, 223 -> 226, 9 -> 11; 3,000 rows, epsilon = 16:
156, 0.771, 342 -> 347, 1 -> 4; 1,000 rows, epsilon = 4: 13, 1.018, 27 -> 27, 0 -> 0.  With 10
the battery did a little better (247, 0.968, 223 -> 228, 9 -> 11; 369, 0.915, 342 -> 350, 1 -> 0;
131, 0.981, 27 -> 27, 0 -> 0), but a start hundreds of sds away takes more rounds to reach (the
region grows 4-fold a step), which rounds that are few cannot spare: ``tests/test_auto_stan.py``'s
hierarchical intercept (10,000 rows, epsilon = 4, the search starting 470 sds off), 12 noise seeds:
median 0.66 sds and 3 unsettled without the region (one at 3,688), 1.18 and 5 unsettled with 10,
0.79 and 5 with 20, 0.68 and 1 (6.2 sds) with 30 (docs/adaptation.md §3, "The first step's trust
region")."""


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
    directions (``quantile_rounds`` count releases); with ``orient=None`` cut with
    ``orientation_share``, and raised where the rows are few for the count noise
    (:func:`planned_direction_share`)."""
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
    ``None``: :func:`stan_dp.sample` turns it on where its public forecast does not warn (where
    the run claims 0.5 sd, clipping bias must not break the claim) and where the model's program
    declares a parameter with a lower bound only (a scale or shape: its rows' gradients are
    skewed, ``stan_dp.auto._log_transformed``); elsewhere :func:`clip_inflation`'s rms-optimal
    balance is kept.  :func:`private_mode` reads ``None`` as off."""
    clipped_repeats: int = 3
    """Count releases per near round spent on the rows beyond the bound (the rest of the
    ``clip_rounds`` on the tail, one fewer for each of :attr:`raise_curvature` and
    :attr:`raise_curvature_tail`)."""
    raise_curvature: bool | None = None
    """Near the mode, one of each near round's tail counts counts the rows beyond the curvature
    bound instead, and where that count says more than a quarter of the rows are beyond it the
    bound doubles from that round on (at most 8-fold) and the pool restarts
    (:data:`stan_dp.adaptation.curvature_bound.CURVATURE_CLIPPED_SHARE`).  Same count multiplier, so the
    plan and its accounting are unchanged.  ``None``: :func:`stan_dp.sample` turns it on where the
    model's program declares a ``simplex`` (public; ``stan_dp.auto._simplex``): in a multinomial
    logit each row's curvature was large and of either sign (likely its residual times the
    transform's curvature), and clipped inside their bulk the rows read a saddle where the log
    density is concave.  Elsewhere off: over the 20-model battery the count
    also fired where no saddle was at stake (docs/adaptation.md §3, "The curvature bound raised
    for a simplex").  :func:`private_mode` reads ``None`` as off."""
    raise_curvature_tail: bool = True
    """Near the mode, one of each near round's tail counts counts the rows beyond 1.5 times the
    curvature bound instead, pooled over the near rounds at that bound; where their clipped excess
    is more than a tenth of the released curvature's mean eigenvalue, and a released curvature at
    that bound curved upward beyond its noise or the doubled noise still resolves the curvature
    (:func:`stan_dp.adaptation.curvature_bound.raise_affordable`), the bound doubles from that
    round on (at most 8-fold) and the pool restarts
    (:func:`stan_dp.adaptation.curvature_bound.curvature_clipped`).  Same count multiplier, so the
    plan and its accounting are unchanged.  The audit's negative binomial (2,000 rows, 70 % zeros,
    epsilon = 16) read saddles where its log density is concave, its dispersion's rows clipped one
    way; with the raise none did.  Gated: without a gate the raise also fired where the clipping
    only widened the frame and the doubled noise left the curvature unresolved, and there it cost
    more (``roaches``: 1.42 times the error; docs/adaptation.md §3, "The curvature bound raised
    where its rows are clipped by much")."""
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
    first_radius: float = FIRST_RADIUS
    """Trust region of the first Newton round's full step, in units of ``sqrt(d)`` frame units
    (``inf``: none); it grows by 4 after every full step that was not taken back, as the region
    an overshoot sets does (:data:`FIRST_RADIUS`)."""
    collapse: float = 0.01
    """A round whose released curvature trace falls below ``collapse * d`` (and below its
    noise) after a full step counts as a collapse: the step is taken back."""
    fd_step: float = 1e-3
    """Central-difference step for per-row Hessians, in frame units."""
    initial_fd_step: float = 1e-5
    """Central-difference step (unconstrained units) of the initial per-row curvature."""
    skew_share: float = SKEW_SHARE
    """Share of the adaptation budget (PLD mean) for the skew check (:mod:`stan_dp.adaptation.skew`:
    one release at the reported mode, in the reported frame, of how far the posterior's mean is
    from that mode by its shape — a Gaussian there cannot be a posterior that is far from
    Gaussian).  0: no check (the result then reports no shift)."""
    check_share: float | None = None
    """Share of the adaptation budget (PLD mean) for the final check
    (:mod:`stan_dp.adaptation.final_check`: one release that lets a search that did not settle report
    the best point it evaluated instead of its last step).  ``None``: :data:`CHECK_SHARE` where
    :func:`check_planned` (the rounds are forecast blind), 0 (no check) elsewhere."""
    start_share: float | None = None
    """Share of the adaptation budget (PLD mean) for the start's choice
    (:func:`~stan_dp.adaptation.prior_start.choose_start`: one or two releases that let the rows
    choose the start between the default and the prior's mode, locations first, then scales).  ``None``:
    :data:`~stan_dp.adaptation.prior_start.START_SHARE` where ``stan_dp.sample`` has a prior's mode
    to offer (the program's priors have a mode away from zeros and no ``init=`` is given), no
    choice elsewhere; 0: no choice (the search starts at the default start)."""
    start_releases: int = 2
    """The start's choice's releases, over which ``start_share`` is split evenly: 2 where the
    prior's mode moves a scale too (locations, then scales), 1 where it moves locations only (set
    by ``stan_dp.sample`` from the prior's mode, public)."""


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


def scale_tail_excess(b: float) -> float:
    """``E[(w - b)+]`` for ``w = (z^2 - 1) / sqrt(2)``, ``z ~ N(0, 1)``: the mean excess beyond a
    whitened bound ``b`` (in units of ``1 / sqrt(n)``) of a normal likelihood's per-row score along
    ``log sigma`` in the posterior's frame (sd ``1 / sqrt(2 n)``).

    With ``c = 1 + sqrt(2) b`` and ``X = z^2 ~ chi2_1``, ``E[(X - c)+] = 2 sqrt(c) phi(sqrt(c)) +
    (1 - c) P(X > c)`` (``E[X; X > c] = 2 sqrt(c) phi(sqrt(c)) + P(X > c)``), divided by
    ``sqrt(2)``.  The tail is exponential: ``~ 2 e^(-c/2) / sqrt(2 pi c)``.
    """
    c = 1.0 + math.sqrt(2.0) * max(float(b), 0.0)
    tail = math.erfc(math.sqrt(c / 2.0))   # P(chi2_1 > c)
    return (2.0 * math.sqrt(c) * math.exp(-c / 2.0) / math.sqrt(2.0 * math.pi) + (1.0 - c) * tail) / math.sqrt(2.0)


def scale_clip_inflation(rule_kappa: float, n_public: int, dim: int, noise_per_kappa: float) -> float:
    """``kappa`` for a program whose likelihood has a scale or shape parameter sampled on the log
    scale (``stan_dp.auto`` decides from the program, public): the larger of ``rule_kappa``
    (:func:`clip_inflation`) and the bound that balances the scale's clipping bias against the
    noise (public: ``n``, ``dim`` and the forecast's noise per unit of ``kappa``).

    :func:`clip_inflation` balances noise against the bias of rows with sub-Gaussian tails (GLM
    scores).  A scale's per-row scores are skewed like ``w = (z^2 - 1) / sqrt(2)`` in the
    posterior's frame, with an exponential tail, and every clipped row pushes the same way, so the
    root of the clipped score moves by ``sqrt(n) E[(w - b)+]`` posterior sds
    (:func:`scale_tail_excess`; ``b`` the whitened bound times ``sqrt(n)``, the scale's one
    coordinate at full length), while the noise is ``noise_per_kappa * kappa``
    (:func:`~stan_dp.adaptation.forecast.forecast`'s expected error, linear in ``kappa``) with
    ``kappa = b / sqrt(chi2_{dim, 0.9})``.  The ``b`` minimising the sum of their squares
    (bounded search over ``[1, 20]`` times the rule's) lies near ``ln(n mu)`` rather than its square
    root, and does not grow with ``dim``, so the raise over the rule falls with ``dim``: at 1,000
    rows, epsilon = 4, 1.49 times at ``dim`` 2 and 1.04 at 5 (epsilon = 16: 1.38 and none).  It
    leaves out that the L2 clip also cuts a row's scale component when its other components are
    large.

    Measured: ``y ~ normal(mu, sigma)`` on 1,000 heights (epsilon = 4, rule's ``kappa`` 1.49): the
    root of the clipped score without noise, in the exact frame, is 1.6-2.1 posterior sds low in
    ``log sigma`` (4 data sets) at the rule, 0.4-0.7 at this bound (1.49 times it); private fits
    (noise seeds 1-3) 0.99, 0.85, 0.88 sds low before, 0.60, 0.47, 0.42 now.  The battery
    (``benchmarks/adaptation_trace.py``, 1,000 rows, 12 noise seeds; 9 of its 18 models have such a
    parameter, 108 runs changed): epsilon = 4
    geometric mean of the worst error 0.973 (the changed runs 0.948, Wilcoxon p = 0.009; beta 0.85,
    log-normal 0.87, Student-t 0.88, ``earnings`` 0.91, Weibull 1.14; ``mvn`` and ``radon``, at
    ``dim`` 9 and 24, unchanged), epsilon = 16 0.986 (0.973, p = 0.02; beta 0.82); 24 user programs
    from earlier sessions (96 runs) 1.003; no new silent run.  A factor of 1.3 on every such
    program instead: 0.957 and 0.987, but the user programs 1.037 and ``roaches``, ``mvn`` and
    ``radon`` 1.12-1.18 at epsilon = 16; 1.5: 1.027 at epsilon = 16 (docs/adaptation.md §3, "A
    scale's rows raise the bound from the start").
    """
    rule = float(rule_kappa)
    root = whitened_grad_scale(n_public, int(dim)) * math.sqrt(n_public)   # sqrt(chi2_{dim, 0.9})

    def error2(b: float) -> float:
        return n_public * scale_tail_excess(b) ** 2 + (noise_per_kappa * b / root) ** 2

    best = optimize.minimize_scalar(error2, bounds=(rule * root, 20.0 * rule * root), method="bounded")
    return max(rule, float(best.x) / root)


BIAS_PER_CLIPPED_ROW = 0.15
"""``rho`` of :func:`allowed_clipped_rows`: the root of a clipped score moves by about ``rho`` times
the bound per clipped row (whitened units).  Measured without noise at the exact mode and frame
(the rule's kappa, n = 1e4-1e5, epsilon 1 and 4): 0.10-0.19 for logistic regressions (their
surprising rows' excesses align: 0.64-0.85 of the summed lengths), 0.06-0.07 for a Poisson GLM."""


BIAS_SHARE = 1.0
""":func:`allowed_clipped_rows` keeps the clipping bias below this share of the pooled noise.  0.5
cost a Poisson GLM 20-50 % (it also dropped the rounds at lower bounds from the final pool); 1.0
removed every silent miss of the strong-signal logistic regression just as well."""


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


ORIENT_DETECT_LIMIT = 0.75
""":func:`planned_settings` orients only where :func:`orientation_detection_forecast` is below this:
an entry of ``R`` at 0.95 or more (an intercept and a predictor in metres around 5 km: 0.98) is
then kept with high probability, while the release still costs standardised data little.
Measured (24 NumPy seeds each, exact posteriors, median (rms) worst error, unoriented -> oriented),
by forecast: 0.59 (Poisson GLM D = 5, 1,000 rows, epsilon = 1) metres 17.1 (18.3) -> 6.2 (9.6),
standardised 5.5 (6.2) -> 4.0 (6.0); 0.65 (logistic D = 10, 1,000 rows, epsilon = 2) metres
8.9 (8.7) -> 3.9 (5.1), standardised 2.5 (2.7) -> 2.9 (3.3); 0.74 (the Poisson GLM, 800 rows,
epsilon = 1) metres 15.1 (24.8) -> 7.2 (10.5), standardised 4.6 (6.9) -> 4.3 (5.1).  Above it the
turn is no longer worth its budget: 0.82 (the logistic regression, epsilon = 1.5) metres 9.0 (8.8)
-> 6.9 (7.1) but standardised 3.8 (4.5) -> 5.5 (6.4); 0.98 (the Poisson GLM, 600 rows) metres
14.5 (14.5) -> 14.2 (51.6), one run at 244; 1.22 (the logistic regression, epsilon = 1) metres
8.5 (8.7) -> 9.2 (9.5).  (The limit was 0.5 until a strong ridge's released eigenvalue was read
within its noise, :data:`~stan_dp.adaptation.initial_frame.RIDGE_EIGENVALUE`.)"""


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
    is below :data:`ORIENT_DETECT_LIMIT` (d = 11: from n = 1e3 at epsilon = 2,
    from about 1,650 rows at epsilon = 1; d = 6: from 800 rows at epsilon = 1):
    above it the release no longer finds a ridge, or costs standardised data
    more than it gives (the limit's measurements).  Where
    :func:`orientation_noise_forecast` is below :data:`ORIENT_NOISE_TARGET`,
    ``orientation_share`` and ``direction_share`` are scaled down until it is
    at the target (the noise goes like ``1 / sqrt(share)``): a larger budget
    or more rows need less of it to resolve ``R`` as well, and leave the rest
    to the rounds; ``direction_share`` is then raised where the rows are few
    for its count noise (:func:`planned_direction_share`).  Then
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
        direction = planned_direction_share(n_public, dim, pld_mean, s.quantile_rounds, s.direction_share * f)
        s = s._replace(orient=detect < ORIENT_DETECT_LIMIT, orientation_share=s.orientation_share * f,
                       direction_share=direction)
    cut = s.hessian_share is None
    if cut:
        s = s._replace(hessian_share=HESSIAN_SHARE)
    s = s._replace(rounds=round_count(s, n_public, dim, pld_mean))
    if cut:
        tau = curvature_noise_forecast(s, n_public, dim, pld_mean)
        share = HESSIAN_SHARE * min(1.0, (tau / CURVATURE_NOISE_TARGET) ** 2)
        s = s._replace(hessian_share=max(HESSIAN_SHARE_MIN, share))
    if s.check_share is None:   # last: the gate reads the plan without it
        s = s._replace(check_share=CHECK_SHARE if check_planned(s, n_public, dim, pld_mean) else 0.0)
    return s


CHECK_SHARE = 0.03
"""Share of the adaptation budget (PLD mean) :func:`planned_settings` gives the final check where
:func:`check_planned`.  Its signal-to-noise ratio on a gross failure (most rows preferring an earlier
point by a nat or more) is ``n / (2 sqrt(K) z)``: 5.8 at 1,000 rows, epsilon = 1, ``K`` = 8 points,
4.1 at 500 rows.  The budget it takes is the rounds', and the blind cells' errors grow with their
noise: paired runs at 0.06 cost the logistic regression at 1,000 rows, epsilon = 1 7 % in geometric
mean (0.03: 3.8 %) for the same catches (docs/adaptation.md §3, "A final check of an unsettled
search")."""


def check_planned(settings: AdaptationSettings, n_public: int, dim: int, pld_mean: float) -> bool:
    """Whether the plan includes the final check (public): where one Newton round's curvature noise
    forecast (:func:`curvature_noise_forecast`, at the plan's rounds and shares without the check)
    exceeds ``settings.resolution``, i.e. one round cannot resolve the posterior's unit curvature.

    There the rounds are blind: a round's step along an unresolved direction is its released
    gradient, unchecked, and an unsettled search reports its last one; the searches that ended
    hundreds of sds off after such a step were all there (`radon`, the Student-t and
    heteroscedastic regressions at 500-1,000 rows, epsilon = 1).  Where the rounds resolve the
    curvature (from 10^4 rows at these dimensions) the searches settle and the check would only
    cost budget.
    """
    s = settings._replace(check_share=0.0)
    return bool(curvature_noise_forecast(s, n_public, dim, pld_mean) > s.resolution)


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
    (:func:`~stan_dp.adaptation.far.far_multipliers`); ``check_share`` (the final
    check) and ``skew_share`` (the skew check) are one release each, ``start_share`` (the start's
    choice) ``start_releases``.
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
    if s.check_share:
        out["check"] = 1.0 / math.sqrt(2.0 * s.check_share * pld_mean)
    if s.skew_share:
        out["skew"] = 1.0 / math.sqrt(2.0 * s.skew_share * pld_mean)
    if s.start_share:   # the start's choice: locations, then (where they move) scales
        out["start"] = math.sqrt(s.start_releases / (2.0 * s.start_share * pld_mean))
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
    if s.check_share:
        shares = (*shares, s.check_share)
    if s.skew_share:
        shares = (*shares, s.skew_share)
    if s.start_share:
        shares = (*shares, s.start_share)
    share = 1.0 - sum(shares)
    if not (0.0 < share <= 1.0 and min(shares) > 0.0):
        raise ValueError("quantile_share (and with orient, orientation_share and direction_share; with "
                         "far_rounds, far_share; and check_share, skew_share and start_share if any) "
                         "must be positive and sum to less than 1")
    return share


def adaptation_releases(pld_mean: float, settings: AdaptationSettings, n_public: int,
                        dim: int) -> list[Release]:
    """Every release :func:`private_mode` makes, as accounting lines (data-independent)."""
    s = planned_settings(settings, n_public, dim, pld_mean)
    z = noise_multipliers(pld_mean, s)
    oriented = [Release(z["orientation"], 1), Release(z["direction"], s.quantile_rounds)] if s.orient else []
    far = (far_releases(s.far_share * pld_mean, s.far_rounds, s.quantile_rounds, s.far_first_boost)
           if s.far_rounds else [])
    check = [Release(z["check"], 1)] if s.check_share else []
    skew = [Release(z["skew"], 1)] if s.skew_share else []
    start = [Release(z["start"], s.start_releases)] if s.start_share else []
    return [*start, *far, Release(z["scale"], s.quantile_rounds), *oriented,
            Release(z["clip"], s.rounds * s.clip_rounds),
            Release(z["gradient"], s.rounds), Release(z["curvature"], s.rounds), *check, *skew]
