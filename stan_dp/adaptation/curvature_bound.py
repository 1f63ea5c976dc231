"""The curvature bound near the mode, raised where released counts say its clipping biases the sum.

Each Newton round releases the rows' curvatures (``-A' H_i A`` in the round's frame) clipped in
Frobenius norm at a public bound, ``kappa_hessian`` (1.5) times the forecast 90th percentile of
their norms (:func:`~stan_dp.adaptation.forecast.whitened_hessian_scale`), set to clip under 1 % of
a GLM's rows in the posterior's frame.  Where the rows' curvatures are large, of either sign and
sum to little, the rows clipped push one way and the clipped sum can curve upward where the log
density is concave: the search then reads a saddle and its saddle-free steps go astray.  Two rules,
each spending one of a near round's tail-count releases (same multiplier, so the plan and its
accounting are unchanged), raise the bound by :data:`CURVATURE_STEP` from that round on (at most
:data:`CURVATURE_ADJUST_MAX`-fold, not with fewer than :data:`CURVATURE_RAISE_ROUNDS` rounds left)
and restart the pool, whose rounds were released at the lower bound:

* the bulk (:attr:`~stan_dp.adaptation.plan.AdaptationSettings.raise_curvature`): more than
  :data:`CURVATURE_CLIPPED_SHARE` of the rows beyond the bound, by the round's own count;
* the tail (:attr:`~stan_dp.adaptation.plan.AdaptationSettings.raise_curvature_tail`): the rows
  beyond :data:`CURVATURE_TAIL` times the bound clipped by a sizeable share of the released
  curvature (:func:`curvature_clipped`), where a released curvature at this bound curved upward
  beyond its noise, or where the raise is affordable (:func:`raise_affordable`: the doubled noise
  still resolves the released curvature).

Every decision is post-processing of released counts and curvatures (docs/adaptation.md §3,
"The curvature bound raised for a simplex" and "... where its rows are clipped by much").
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from stan_dp.adaptation.releases import Ledger, noisy_counts
from stan_dp.adaptation.result import SADDLE_LIMIT
from stan_dp.aggregates import RowColumns

__all__ = ["CURVATURE_CLIPPED_SHARE", "CURVATURE_TAIL", "CURVATURE_BIAS_SHARE", "CURVATURE_COUNT_SDS",
           "CURVATURE_STEP", "CURVATURE_ADJUST_MAX", "CURVATURE_RAISE_ROUNDS", "CURVATURE_AFFORDABLE",
           "curvature_clipped", "raise_affordable", "CurvatureBound"]


CURVATURE_CLIPPED_SHARE = 0.25
"""The bulk rule raises the curvature bound where a round's released count says that more than this
share of the rows is beyond it (at 2 noise sds).  The rows' curvature norms move with the frame, so
the count is the round's own, not pooled over rounds.

With a quarter of the rows beyond it the bound is inside their bulk, not in their tail.  Rows whose
curvature is mostly a residual times the curvature of a transform (a simplex's in a multinomial
logit, ``eta = log(share) + x beta``) are of either sign and sum to little, and the rows clipped are
those of the rare outcomes (the largest residuals): the clipped sum's bias has a sign.  A
multinomial logit with a ``simplex[4]`` baseline (3,000 rows, epsilon = 16) had 2,220-2,653 rows
beyond the bound and 675-1,359 beyond twice it, and its pooled curvature read as a saddle (least
eigenvalue -1.3 to -2.2 in the frame against +0.65 to +0.71 unclipped, at the last three rounds of
one run) in 4 of 6 runs; with the raise in none.  On by default only for a simplex: a quarter of a
GLM's rows are beyond the bound in a frame wider than the posterior's too, and over the 20-model
battery at 1,000 rows the count raised the bound in 30 of 480 runs at epsilon = 16 and 10 at
epsilon = 4, where no saddle was at stake in most (a tenth: 88 and 72; docs/adaptation.md §3)."""
CURVATURE_TAIL = 1.5
"""The tail rule counts the rows whose curvature norm is beyond this multiple of the bound: each
loses at least ``(CURVATURE_TAIL - 1)`` bounds to clipping (:func:`curvature_clipped`)."""
CURVATURE_BIAS_SHARE = 0.1
""":func:`curvature_clipped`'s share of the released curvature's mean eigenvalue that the tail's
clipped excess must exceed."""
CURVATURE_COUNT_SDS = 3.0
""":func:`curvature_clipped` takes the pooled count this many noise sds low.  The test is made again
at every near round, on a mean over more rounds each time; at 2 sds a logistic regression's first
near round at epsilon = 1 (count noise sd 101 rows) raised on a count of 253."""
CURVATURE_STEP = 2.0
"""Factor by which either rule raises the curvature bound."""
CURVATURE_ADJUST_MAX = 8.0
"""Largest factor the counts apply to the public curvature bound."""
CURVATURE_AFFORDABLE = 1.0
""":func:`raise_affordable`: the raise doubles the curvature release's noise bound ``tau``; it is
affordable where the doubled ``tau`` is at most this multiple of the released curvature's mean
eigenvalue."""
CURVATURE_RAISE_ROUNDS = 4
"""A raise needs this many rounds left (this one included): it empties the pool, whose rounds were
released at the lower bound, and the rounds after it pool afresh."""


def curvature_clipped(counts: list[float], scale: float, bound: float, count_sd: float) -> bool:
    """Whether the rows clipped far beyond the curvature bound take more than
    :data:`CURVATURE_BIAS_SHARE` of the released curvature's scale (post-processing).

    A row whose curvature norm (Frobenius, in the frame) is beyond ``CURVATURE_TAIL`` times the
    bound ``B`` loses at least ``(CURVATURE_TAIL - 1) B`` to clipping, so ``N`` such rows take at
    least ``N (CURVATURE_TAIL - 1) B`` out of the sum, in that norm summed over the rows.  Where
    the clipped rows' curvatures share a direction and sign (the large counts of a negative
    binomial along its dispersion, the rare outcomes of a multinomial logit: the cases that read
    a false saddle) that is a lower bound on the clipped sum's change itself; where they cancel
    it overstates it, and the upward gate (:class:`CurvatureBound`) keeps the raise to where the
    clipped sum curved upward.  ``N`` is the mean of the released ``counts`` of the near rounds at this
    bound less :data:`CURVATURE_COUNT_SDS` noise sds (``count_sd / sqrt(len(counts))``).
    ``scale`` is the released curvature's mean eigenvalue (its trace over ``d``, with the exact
    prior's) at those rounds: about 1 in the posterior's frame and ``w^2`` in one ``w`` times too
    wide, where the rows' curvatures, and so the count, grow alike; the ratio does not read a
    frame too wide as a clipped tail.
    """
    if not counts or not math.isfinite(scale):
        return False
    rows = float(np.mean(counts)) - CURVATURE_COUNT_SDS * count_sd / math.sqrt(len(counts))
    return rows > 0.0 and rows * (CURVATURE_TAIL - 1.0) * bound > CURVATURE_BIAS_SHARE * max(scale, 0.0)


def raise_affordable(taus: list[float], scale: float) -> bool:
    """Whether doubling the curvature bound leaves its release resolving the curvature
    (post-processing of public noise bounds and a released figure).

    The clipped curvature's noise bound ``tau`` (a margin over its spectral norm) grows with the
    bound.  Where ``CURVATURE_STEP`` times the mean ``tau`` of the near rounds at this bound
    (``taus``) is within :data:`CURVATURE_AFFORDABLE` times the released curvature's mean
    eigenvalue ``scale`` (about 1 in the posterior's frame), the rounds
    still resolve their curvature after the raise, and the raise removes the clipped rows' bias at
    little cost.  Where rows whose curvature spans decades (counts with an exposure, a zero-inflated
    or negative binomial's large counts) are clipped in a frame too wide, the clipped sum reads about
    1 there while the truth is several times more, and the search settles in that frame: its
    covariance too wide, its noise stated in those wide sds.  Without this gate the tail rule raised
    only at an upward curvature.  With it, at 1,000 rows and epsilon = 16 (the battery's 216 runs,
    53 changed): ``student`` 0.765 of the worst error (p = 0.03), ``zip`` 0.815 (p = 0.01), the
    frames nearer the posterior's (``zip``'s least eigenvalue of the NUTS covariance in the final
    frame 0.35 -> 0.51); ``hetero`` 1.107 (p = 0.47); 0.986 over all; at epsilon = 4 two runs changed
    (docs/adaptation.md §3, "The curvature bound raised where its rows are clipped by much")."""
    if not taus or not math.isfinite(scale):
        return False
    return CURVATURE_STEP * float(np.mean(taus)) <= CURVATURE_AFFORDABLE * scale


class _Released(NamedTuple):
    """A round's released curvature as the tail rule reads it (:meth:`CurvatureBound.observe`)."""

    scale: float
    """Its mean eigenvalue (data part and the exact prior's, in the round's frame)."""
    upward: bool
    """Whether its least eigenvalue is below ``-SADDLE_LIMIT tau``."""
    tau: float
    """Its noise's spectral-norm bound."""


class CurvatureBound:
    """The factor on the public curvature bound near the mode, and the released figures that raise it.

    Parameters
    ----------
    bulk, tail
        Which rules are on (module docs); each makes one count release per near round.
    public_bound
        The public curvature bound (frame units) the factor multiplies.
    n_public
        The public row count (the bulk rule's share is of it).
    count_sd
        Noise sd of one count release (its multiplier: a row moves a count by at most one).
    rounds
        The Newton rounds planned.
    """

    def __init__(self, bulk: bool, tail: bool, public_bound: float, n_public: int, count_sd: float,
                 rounds: int) -> None:
        self.bulk, self.tail = bool(bulk), bool(tail)
        self.public_bound = float(public_bound)
        self.n_public, self.count_sd, self.rounds = int(n_public), float(count_sd), int(rounds)
        self.adjust = 1.0
        self._counts: list[float] = []    # the tail's released counts at this bound, near rounds
        self._near: list[_Released] = []  # the released curvatures' figures there ...
        self._last = _Released(math.nan, False, math.nan)   # ... and at the last round

    @property
    def releases(self) -> int:
        """Count releases a near round spends on the curvature (taken from the tail counts)."""
        return int(self.bulk) + int(self.tail)

    def _can_raise(self, k: int) -> bool:
        return self.adjust * CURVATURE_STEP <= CURVATURE_ADJUST_MAX and k + CURVATURE_RAISE_ROUNDS <= self.rounds

    def _raise(self) -> None:
        self.adjust *= CURVATURE_STEP
        self._counts.clear()
        self._near.clear()

    def near_round(self, rng_noise: np.random.Generator, beyond: RowColumns, ledger: Ledger, k: int) -> bool:
        """Make a near round's count releases and raise the bound where a rule says so; True if it
        was raised (the caller then restarts its pool).

        ``beyond`` holds each row's curvature norm over the public bound (one column).
        """
        raised = False
        if self.bulk:
            count = float(noisy_counts(rng_noise, beyond, np.array([self.adjust]), self.count_sd, ledger,
                                       f"curvature clipped count, round {k}")[0])
            if count - 2.0 * self.count_sd > CURVATURE_CLIPPED_SHARE * self.n_public and self._can_raise(k):
                self._raise()
                raised = True
        if self.tail:
            self._counts.append(float(noisy_counts(rng_noise, beyond, np.array([CURVATURE_TAIL * self.adjust]),
                                                   self.count_sd, ledger, f"curvature tail count, round {k}")[0]))
            seen = self._near or [self._last]
            scale = float(np.mean([r.scale for r in seen]))
            upward = any(r.upward for r in seen)
            affordable = raise_affordable([r.tau for r in seen], scale)
            bound = self.public_bound * self.adjust
            # one raise a round: after the bulk's, the tail's count is the new bound's first
            if (not raised and (upward or affordable)
                    and curvature_clipped(self._counts, scale, bound, self.count_sd) and self._can_raise(k)):
                self._raise()
                raised = True
        return raised

    def observe(self, released: np.ndarray, prior: np.ndarray, tau: float, near: bool) -> None:
        """Record a round's released curvature (``released``, data part, and ``prior``, the exact
        prior's, in the round's frame; ``tau`` its noise's spectral norm): its mean eigenvalue,
        whether its least is below ``-SADDLE_LIMIT tau``, and ``tau``; kept for the tail rule where
        ``near``."""
        total = 0.5 * (released + released.T) + prior
        self._last = _Released(float(np.trace(total)) / total.shape[0],
                               bool(np.linalg.eigvalsh(total)[0] < -SADDLE_LIMIT * tau), float(tau))
        if near:
            self._near.append(self._last)
