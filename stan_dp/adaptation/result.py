"""What the private mode search returns, and the diagnostics derived from its releases."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from stan_dp.adaptation.releases import Ledger

__all__ = ["AdaptationResult", "SADDLE_LIMIT", "scale_bias_per_row"]


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


SADDLE_LIMIT = 1.0
""":attr:`AdaptationResult.saddle` where the final pool's least curvature eigenvalue is below minus
this many times the noise's spectral norm ``tau``.  A two-component normal mixture (means 40 and
70, ordered; 1,000-3,000 rows, epsilon 4-16, 12 runs) stopped with its components on one blob,
46-43,000 posterior sds from NUTS, and read -0.1 to -11.8 (9 runs below -1); from an init spread
over the outcome's range it read +2.1 to +12.8 and ended 0.17-2.1 sds off.  Over the 18-model
battery (1,296 runs at 1,000 and 3,000 rows, epsilon 4 and 16) it flagged 47 runs, every one
already warned and 0.8-32 sds off: the non-centred hierarchical logistic regression (43; the
exact curvature at its private mode is about 0 along the flagged direction and negative at the
pool's farther points), ``radon`` (2) and the ordered logit at epsilon = 4 (2); the models at
their modes read +2.1 to +41 at epsilon = 16 (docs/adaptation.md §5, "A saddle, not a mode")."""


BIAS_PER_CLIPPED_ROW_HIGH = 0.2
""":attr:`AdaptationResult.clipping_bias_bound`'s bias per clipped row, the top of the measured
0.10-0.19 (logistic) and 0.06-0.07 (Poisson): the warning must not understate it.  The count
cannot tell whose rows align: a ``wells``-like logistic regression (a gamma-distributed
predictor) and ``test_auto``'s (normal predictors) released about as many clipped rows times the
bound (1.1-1.6), but the first was biased by about 0.25 per row and the second far less."""


SCALE_TAIL_RATIO = 1.2
""":func:`scale_bias_per_row`'s factor on the tail scale ``sqrt(2 / n)``: the measured bias per
clipped row over it was 0.76-0.93 in the median (0.37-1.57 in all, the most where 5-9 rows are
clipped); 1.6 warned on most runs within 0.5 sd of a normal model at 10^4 rows, epsilon = 4, and
caught one silent miss of three more (docs/adaptation.md §5, "A scale parameter's clipped rows")."""


def scale_bias_per_row(bound: float, n_public: int) -> float:
    """:attr:`AdaptationResult.bias_per_row` where the model's program declares a parameter with a
    lower bound only (a scale or shape, sampled on the log scale), at the final whitened gradient
    bound ``bound`` (public).

    Such a coordinate's per-row gradients are skewed like ``z^2 - 1`` (a normal likelihood's
    ``log sigma``), ``z^2`` has an exponential tail of scale 2, and in the posterior's frame (sd of
    ``log sigma`` about ``1 / sqrt(2 n)``) a row's excess beyond any high bound is about
    ``2 / sqrt(2 n) = sqrt(2 / n)``, in the same direction for every clipped row: each adds about
    ``sqrt(2 / n)`` to the bias, ``rho = sqrt(2) / (bound sqrt(n))`` in units of the bound, not the
    fixed fraction of the bound that GLM rows' scattered excesses add
    (:data:`BIAS_PER_CLIPPED_ROW_HIGH`, the floor here: the program's other coordinates).  Returns
    ``max(BIAS_PER_CLIPPED_ROW_HIGH, SCALE_TAIL_RATIO sqrt(2) / (bound sqrt(n)))``.  With
    :data:`BIAS_PER_CLIPPED_ROW_HIGH` alone a normal model with unknown ``sigma`` (heights in cm,
    1,000 rows, epsilon = 16) ended 0.51-0.84 posterior sds low in ``sigma`` without a warning in 6
    of 24 runs; with this, 3 (docs/adaptation.md §5, "A scale parameter's clipped rows").
    """
    tail = SCALE_TAIL_RATIO * math.sqrt(2.0) / (bound * math.sqrt(n_public))
    return float(max(BIAS_PER_CLIPPED_ROW_HIGH, tail))


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
    clip_adjust``) as the estimate's rounds saw them: the mean of the counts made at that bound,
    or, where two or more rounds are pooled, their precision-weighted counts at the bounds they
    were released at, in units of the final bound (:mod:`stan_dp.adaptation.clipped_count`: rounds
    from before a raise keep their weight and their clipping).  NaN: no round near the mode."""
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
    clipped_rows_sd: float = math.nan
    """Noise sd of :attr:`clipped_rows` (NaN where it was not counted)."""
    pull: np.ndarray | None = None
    """Per Newton round, the released log-density gradient at the round's point (data part plus
    the exact prior's, ``theta`` space) per coordinate, in noise sds of its release (shape
    ``(rounds, dim)``): :func:`stan_dp.honesty.pulled_coordinates` reads it."""
    checked: int = -1
    """The Newton round whose point the final check (:mod:`stan_dp.adaptation.final_check`) reported
    instead of the search's estimate (the rows preferred it beyond the check's noise; only where the
    search did not settle); -1: the estimate stands, or no check was planned."""
    skew_shift: np.ndarray | None = None
    """The skew check's shift of the posterior mean from :attr:`mode` by the posterior's shape,
    per unconstrained coordinate in posterior sds (:mod:`stan_dp.adaptation.skew`; released plus
    the exact prior's part).  ``None`` or zeros: no check made."""
    skew_shift_sd: np.ndarray | None = None
    """Noise sd of :attr:`skew_shift`, per coordinate (posterior sds)."""
    least_curvature: float = math.nan
    """Smallest eigenvalue of the final pool's curvature (released data part plus the exact
    prior's, signed, in the final frame) over its noise's spectral norm
    (:func:`stan_dp.adaptation.pooling._least_curvature`); NaN where fewer than two rounds were
    pooled.  About ``+1 / tau`` at a mode; below ``-SADDLE_LIMIT``: :attr:`saddle`."""
    upward: np.ndarray | None = None
    """The direction of :attr:`least_curvature` in ``theta`` space (``None``: no pool)."""
    curvature_adjust: float = 1.0
    """Factor the near rounds' released counts raised the curvature bound by (1: not raised;
    :mod:`stan_dp.adaptation.curvature_bound`)."""
    bias_per_row: float = BIAS_PER_CLIPPED_ROW_HIGH
    """``rho``: the bias one clipped row adds to :attr:`clipping_bias_bound`, in units of the final
    gradient bound.  :data:`BIAS_PER_CLIPPED_ROW_HIGH` (the default), or
    :func:`scale_bias_per_row` where the model's program declares a log-transformed parameter
    (set by ``stan_dp.auto``, which reads the program)."""
    start_choice: Any = None
    """The start's choice (:class:`~stan_dp.adaptation.prior_start.StartChoice`: between the default
    start and the prior's mode, by one release), or ``None`` where there was none."""

    @property
    def posterior_sd(self) -> np.ndarray:
        """The reported posterior sd per unconstrained coordinate: the root of
        :attr:`covariance`'s diagonal, floored at 1e-300 so that it divides safely."""
        return np.sqrt(np.maximum(np.diag(self.covariance), 1e-300))

    @property
    def dispersed(self) -> bool:
        """The pooled rounds disagreed beyond their noise (:attr:`heterogeneity` > 0)."""
        return self.heterogeneity > 0.0

    @property
    def clipping_bias_bound(self) -> float:
        """About how far the rows beyond the final bound move the mode (posterior sds, a vector's
        length; 0 if not counted): :attr:`clipping_bias_per_row` times :attr:`clipped_rows` (the
        frame at the end is the posterior's, so whitened units are posterior sds).
        ``adaptive_clip`` stops raising the bound while that bias is within about the pooled
        noise, so it is not small: on a ``wells``-like logistic regression (a skewed predictor,
        n = 1e4, epsilon = 4) 0.21-0.31 against a mean error of +0.33 in the skewed coordinate,
        with a released noise of 0.2 that left 5 of 13 runs beyond 0.5 sd without a warning.
        The count is noisy (:attr:`clipped_rows_sd`); the run's chance of a miss averages over
        it (``stan_dp.auto``).  It is a light-tailed estimate (the per-row bias of GLM rows):
        where a few rows' gradients lie far beyond the bound and all push one way, the bias is
        larger.  A Student-t regression (n = 5000, epsilon = 4, the rule's bound, not raised)
        reported 0.77-0.96 while the clipped score's root, without noise, was 2.0 posterior sds
        off in ``nu`` (its outliers' gradients reach 7.5 times the 90th percentile and all say
        "heavier tails")."""
        if not np.isfinite(self.clipped_rows):
            return 0.0
        return float(self.clipping_bias_per_row * max(self.clipped_rows, 0.0))

    @property
    def clipping_bias_per_row(self) -> float:
        """:attr:`bias_per_row` times the final gradient bound (``grad_clip * clip_adjust``): the
        bias one clipped row adds to :attr:`clipping_bias_bound`."""
        return float(self.bias_per_row * self.grad_clip * self.clip_adjust)

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
    def saddle(self) -> bool:
        """The search pooled its rounds about a point where the log density curves upward along
        some direction beyond the curvature release's noise (:attr:`least_curvature` below
        ``-SADDLE_LIMIT``): a saddle point or a hierarchical funnel's neck, not a mode, so the
        Gaussian built there (from absolute curvatures) is not the posterior's, and neither is
        its centre."""
        return bool(self.least_curvature < -SADDLE_LIMIT)

    @property
    def heavy_tail(self) -> bool:
        """More than :data:`TAIL_ROWS_ALLOWED` rows beyond twice the bound, at 3 noise sds.

        Only judged when the search :attr:`settled`: away from the mode the
        rows are large because the point is wrong, not because the tail is
        heavy (Poisson GLM, normal predictors, n = 1e3: flagged in 10 of 12
        unsettled runs), and that case has its own warning.
        """
        return bool(self.settled and self.tail_rows - 3.0 * self.tail_rows_sd > TAIL_ROWS_ALLOWED)
