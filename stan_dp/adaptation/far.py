"""The far phase: sign-led steps from a start far from the posterior, before the Newton rounds.

The Newton rounds of :mod:`stan_dp.adaptation.newton` measure their frame at
the start and resolve curvature at the noise of the posterior's own frame.
From a start far away that frame can be wrong by orders of magnitude, and
slowly: a scale parameter started at 1 under an outcome around 100 +- 18
(the default init puts every positive parameter at 1) sees rows whose
curvature in ``log sigma`` is ~300 times the mode's, so the frame is 18-140
times too narrow, the released curvature there is unresolved and floored,
and even exact Newton moves ``log sigma`` by at most 1/2 per round from
below (the log-likelihood is ``-n s - S exp(-2 s) / 2``).  Measured: a
normal regression with unknown sigma and flat priors (434 rows, epsilon 4)
ended 80 posterior sds off, unsettled (docs/adaptation.md §7).

What is robust far away is the *sign* of each coordinate's gradient: when
the start is far, nearly all rows agree on it.  So the far phase takes
``rounds`` cheap rounds of a per-coordinate sign-led search (Rprop's rules,
Riedmiller and Braun 1993, on released quantities):

1. At the start, a private upper quantile of the per-row curvatures (the
   statistic of the Newton rounds' initial scale) gives each coordinate's
   curvature scale ``n c_j`` (its inverse square root, ``a_j``, is the local
   sd).
2. Each round releases, per coordinate, a private median ``b_j`` of
   ``|g_ij|`` (``g_i`` the per-row log-likelihood gradient; the first round's,
   which searches the whole range, with the budget that keeps it from
   landing decades off, :func:`planned_first_median_boost`) and then the sum
   ``v = sum_i clip(g_i / b, -1, 1)`` (each coordinate clipped at its own
   median: a bounded, scale-free vote, row norm at most ``sqrt(d)``), to
   which the exact prior gradient is added as ``clip(grad log prior / b, -n, n)``.
3. A coordinate moves only where its vote is beyond :data:`SIGNIFICANCE`
   noise sds and beyond :data:`AGREEMENT` ``n`` (most rows agree: the start
   is far; near a mode the median-clipped vote of skewed gradients is not 0,
   and the gate keeps the phase from walking to that vote's root).  Its
   first move is the diagonal Newton step of the vote,
   ``(|v_j| - 2 sd) b_j a_j^2``, divided by the number of coordinates that
   move together (Jacobi relaxation with weight ``1/k``: the summed moves
   of ``k`` correlated coordinates cannot overshoot further than one
   coordinate's step would).  Afterwards the step doubles while the vote
   keeps its sign from one round to the next, halves when it flips (the
   point moves back by the halved step, and the next round neither doubles
   nor halves, as in iRprop-, which however would not move on the flip),
   and stays while the vote is within the gate; a scale's coordinate's step
   (:func:`scale_coordinates`: log-transformed, or logit-transformed and passed as a sampling
   statement's scale) is held at :data:`LOG_STEP_MAX` e-folds.  Only a coordinate's first
   move reads the start's curvature (which is stale once the point has
   moved: above the mode of a Poisson intercept ``b`` grows like
   ``exp(eta)``, and steps scaled by it at every round ran to ``-9e5``),
   and a first move made after the others have moved reads it shrunk by
   how much that coordinate's median ``b_j`` has grown since the start
   (:func:`first_move_variance`).
   3b. A direction that moves again after rounds within the gate halves its step, where no other
   direction moved since its last vote beyond the gate (beyond :data:`NEGLIGIBLE_MOVE`): against
   that vote, as at a flip (the pause does not erase the sign change), and along it (its vote fell
   within the gate at the point it stands on, so the mode is nearer than the step that brought it
   there).  Rstanarm-style radon intercepts with ``sigma_y`` on ``(0, 100)`` (1,000 rows, epsilon
   = 4): a flip moved ``sigma_y``'s logit coordinate back to 10 posterior sds above its mode, a
   round passed within the gate, and the next vote sent it the flip's full step, 1.56 e-folds, to
   58 sds below, where the Newton rounds' frame, measured there, was 6 times too narrow; in
   Gelman and Hill's BUGS radon model the same scale stood 10 sds above its mode for three rounds
   and the fourth sent it 2.35 e-folds down, 94 sds below.  Where others moved, the sign change
   may be theirs (a scale's conditional mode moves with a far-off location), and halving there
   stranded a ``uniform(0, 100)`` scale 10 sds above its mode once the location came in
   (``tests/test_uniform_scale.py``'s replica, noise seed 18).
4. Where a move other than a coordinate's first shrank its median ``b_j``
   more than :data:`COLLAPSE_OCTAVES` while the rows' vote still passes the
   gate the same way, the move is taken back and the coordinate stays
   there: most rows' gradients vanish along it (they saturate) while they
   still outvote the few that pull back hard, so the vote cannot tell where
   the mode is (a binary outcome far from 50 %, counts that are mostly 0),
   and the next moves would only double into the flat region.  Only where
   the coordinate alone moved (every coordinate's median depends on all of
   them) — or, where every row's gradient sign is fixed by its outcome (a
   Bernoulli or categorical likelihood, :data:`FIXED_SIGN_FAMILIES`), where no
   scale's coordinate moved with it —, and not along a log- or
   logit-transformed parameter (:func:`holdable_coordinates`), whose median
   collapses the same way while a scale rises from far below its mode.
   4b. Where a move raised a direction's median more than :data:`OVERSHOOT_OCTAVES` and
   its vote then flipped, the move overshot a mode beyond which the rows' gradients grow
   fast (an exponential's: a Poisson rate from far below); from then on the direction
   moves at most halfway to the far end of the bracket its votes set (bisection).  Not a
   scale's coordinate (:func:`scale_coordinates`).

5. A centred hierarchical vector (``a ~ normal(mu_a, sigma_a)``, read from the program) adds
   one direction, every ``a_j`` and ``mu_a`` together
   (:func:`~stan_dp.adaptation.groups.group_directions`): it is voted on,
   scaled and stepped like a coordinate, and every row depends on it, where a group effect alone
   depends on too few rows to pass the gate.  So does a vector indexed by each row's group
   without a hierarchical statement (``mu[g]``, fixed effects per group): every element together,
   no location.

The phase ends where no vote passes the gate — a few to a few tens of
posterior sds from the mode — and the Newton rounds start there with a
frame measured there.  Its plan (:func:`far_releases`, its share
:func:`planned_far_share`) is fixed by public facts: one quantile search,
then per round a median search and one vote release.  Everything after a
release is post-processing.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from stan_dp.accounting import Release
from stan_dp.adaptation.curvature import declared_mask, log_coordinates, logit_coordinates
from stan_dp.adaptation.quantile import LOG2_RANGE, private_quantiles
from stan_dp.adaptation.releases import Ledger, clipped_vector_sum
from stan_dp.aggregates import RowColumns
from stan_dp.density import prior_gradient

__all__ = ["COLLAPSE_OCTAVES", "FAR_ROUNDS", "FAR_SHARE", "FIXED_SIGN_FAMILIES", "LOG_STEP_MAX", "NEGLIGIBLE_MOVE",
           "OVERSHOOT_OCTAVES",
           "collapsed_moves", "far_multipliers", "first_move_variance", "far_releases", "far_phase", "fixed_sign_rows",
           "holdable_coordinates", "planned_far_share", "scale_coordinates",
           "planned_first_median_boost", "vote_noise_forecast"]

FAR_ROUNDS = 10
"""Default number of far rounds (``AdaptationSettings.far_rounds``)."""
FAR_SHARE = 0.1
"""Largest share of the adaptation budget (PLD mean) :func:`planned_far_share` gives the far phase."""
FAR_SHARE_MIN = 0.02
"""Smallest share :func:`planned_far_share` gives the far phase."""
FAR_SHARE_MAX = 0.3
"""Largest share :func:`planned_far_share` raises the far phase to where :data:`FAR_SHARE` would leave
its vote's noise beyond :data:`VOTE_NOISE_LIMIT` (at 1,000 rows, epsilon = 1: 0.19 at D = 4, 0.28 at
D = 6, none at D = 11)."""
VOTE_NOISE_LIMIT = 0.15
""":func:`planned_far_share` gives the far phase the share that keeps its vote's noise sd within this
fraction of ``n``, and leaves it out (share 0) where that would take more than :data:`FAR_SHARE_MAX`:
its releases cannot be resolved there (its curvature scale neither: count noise ~0.8 of the vote's),
and a noise-driven move of a coordinate whose scale is wrong is unbounded — a logistic regression
with a predictor in thousands, n = 1e3, epsilon = 1 (vote noise 0.34 n at :data:`FAR_SHARE`, 0.20 n
at :data:`FAR_SHARE_MAX`: left out), moved that coefficient by 0.5 on a 3-sd noise vote, every row
saturated, and the search ended 5e6 posterior sds off.  The far-start cell it was first set for,
434 rows at epsilon = 4 (D = 4), forecasts 0.14 n at :data:`FAR_SHARE`."""
VOTE_NOISE_TARGET = 0.05
""":func:`planned_far_share` spends what brings the vote's noise sd down to this fraction of ``n``
(then a vote of half the :data:`AGREEMENT` gate, ``0.175 n``, is beyond :data:`SIGNIFICANCE` noise
sds), and no more."""
SCALE_SHARE = 0.25
"""Share of the far phase's budget for the curvature scale at the start."""
MEDIAN_SHARE = 0.3
"""Share of each far round's budget for the per-coordinate medians of ``|g_ij|``."""
FIRST_MEDIAN_ROUNDS = 7
"""Binary-search rounds of the first median (over :data:`~stan_dp.adaptation.quantile.LOG2_RANGE`:
about one octave)."""
MEDIAN_ROUNDS = 4
"""Binary-search rounds of the later medians (over :data:`MEDIAN_WINDOW` octaves either side of the
previous one: 1.5 octaves)."""
MEDIAN_WINDOW = 12.0
"""Octaves either side of the previous median that a later median search covers."""
FIRST_MEDIAN_GAP_SDS = 3.5
"""The first median's count releases get the budget (:func:`planned_first_median_boost`) that puts
``n / 2`` at least this many count-noise sds from 0 and from ``n``."""
FIRST_MEDIAN_BOOST_MAX = 4.0
"""Most the first median's budget is raised by (in units of a later median's)."""
SIGNIFICANCE = 3.0
"""A coordinate moves only when its vote is beyond this many noise sds."""
AGREEMENT = 0.35
"""A coordinate moves only when its vote is beyond ``AGREEMENT * n`` too: most rows agree on its
direction, the start is far.  Near a mode the median-clipped vote is not 0 where skewed per-row
gradients are clipped (a logistic regression's: 0.14-0.24 n at its exact mode, n = 5000): at 0.25
one of four seeds walked 17 posterior sds away from a start at the mode, at 0.35 none did."""
GROWTH = 2.0
"""Step factor while a coordinate's vote keeps its sign (its inverse when the sign flips)."""
LOG_STEP_MAX = 10.0
"""Largest step of a scale's coordinate (:func:`scale_coordinates`) in one far round (e-folds).  The step itself is
held there, so a flip halves it from the cap.  A Student-t regression of spending in dollars
(1,500 rows, epsilon = 16) has rows whose ``log sigma`` gradient is at most ``nu`` each while their
curvature vanishes like ``sigma^2 / r^2`` at ``sigma = 1``: the first step's diagonal Newton scale
put ``log sigma`` at 7.6e6 and every draw overflowed.  Not the Newton rounds' 3
(:data:`stan_dp.adaptation.newton.LOG_STEP_MAX`, which bounds a quadratic model's extrapolation):
a sign-led step has no model to extrapolate, and at 3 a Poisson rate of mostly-zero counts
(``tests/stan/poisson_rate.stan``, 1,000 rows, epsilon = 16) stopped its far phase at ``log lambda``
-7.8 instead of -12.4 and ended 2.9 sds off in rms over 8 seeds instead of 0.71 (6: 1.0; 10: as
uncapped).  Ten rounds still cover 100 e-folds (docs/adaptation.md §3, "Far phase", step 4)."""
NEGLIGIBLE_MOVE = 1e-12
"""A far move this small does not count as a move for step 3b (it changes no row's gradient beyond
round-off: a sparse group element whose released median is at the search's floor takes steps of
~1e-16)."""
OVERSHOOT_OCTAVES = 3.0
"""A sign flip after a move that raised a direction's released median ``|g_ij|`` by more than this
many octaves (8-fold) brackets the direction (:func:`far_phase`, step 4b): from then on it moves at
most halfway to the bracket's far end, the last points where its vote passed the gate the other
way (a bisection), instead of Rprop's halved step, which goes back by that step and then by the
same step again, to the bracket's near end.  Such a move overshot a mode where the rows' gradients
grow fast beyond it: the first, diagonal Newton step of a Poisson regression from rate 1 below
counts around 180, on beds (50-400) and staff (120 +- 30), raised the linear predictor to about
250 (the start's curvature, the rate's, is 180 times the mode's inverse), and ten rounds of
halving back and forth ended it near 30, where the Newton rounds cannot move (1,500 rows,
epsilon 16 and 4: 820-1,420 posterior sds off, warned); bracketed, 0.2-1.0.  Not along a
scale's coordinate (:func:`scale_coordinates`), whose step :data:`LOG_STEP_MAX` already holds (a
scale below its mode raises its median ``r^2 / sigma^2 - 1`` as fast: bracketed too, the
battery's Student-t regression went 1.15 times further off at epsilon 4; and the flip of a scale's
vote says where its mode lies given the other coordinates, which move meanwhile).  docs/adaptation.md §3, "Far phase"."""
COLLAPSE_OCTAVES = 3.0
"""A move after which a coordinate's released median ``|g_ij|`` is more than this many octaves
(8-fold) below the median where the move began, while the rows' own vote (without the prior)
still passes the gate the same way, is taken back and the coordinate stays there for the rest of
the phase (:func:`far_phase`, step 4) — if the coordinate alone moved (its median depends on the
others: a scale's move rescales every row's gradient; for rows of :data:`FIXED_SIGN_FAMILIES`, if
no scale's coordinate moved with it), the move was not its first (a diagonal
Newton step, which landed near the mode in every imbalanced case measured, and after which a
normal mean started far away has shrunk its median by the ratio of the distances) and the
coordinate is not a scale's (:func:`holdable_coordinates`).  Such a move crossed the scale of most
rows' gradients without reaching a point where they disagree: they saturate (``|y - p|`` of the
many rows with ``y = 0`` falls like ``p``), and only a minority that the median-clipped vote
cannot weigh pulls back.  Logistic regressions with 5 % events (intercept -3.1): the doubled
second move took the intercept from -3.4 to -10 (9.7 octaves; 3,000 rows, epsilon = 16), from
-1.9 to -5.8 (5.3 octaves; 1,000 rows, epsilon = 4), or with a flat prior from -2.6 to -7.8 (7.5
octaves) and on to -49, where every row's curvature is 0; with 20 % events (-1.5) at 1,000 rows,
epsilon = 4, from near the mode to -4.3 and beyond, 2.3-4 octaves.  3 octaves is twice the later
medians' resolution (1.5 octaves).  Paired over the 18-model battery (432 runs per cell) the rule
changed no run at 1,000 rows, epsilon = 16, 2 at epsilon = 4 (``radon``, 28 -> 16 and 20.7 -> 20.5
sds) and 16 at 3,000 rows, epsilon = 16 (the standardised Poisson GLM, geometric mean 0.85)
(docs/adaptation.md §7, "Imbalanced binary outcomes")."""


def first_move_variance(local_sd: np.ndarray, start_median: np.ndarray, median: np.ndarray) -> np.ndarray:
    """``a_j^2`` for a coordinate's first move (step 3 of :func:`far_phase`): the start's
    ``local_sd^2`` times ``min(1, (b_j0 / b_j)^2)``, ``b_j0`` its released median ``|g_ij|`` at the
    start and ``b_j`` the one where it moves (post-processing of released values).

    The curvature scale ``a_j`` is measured at the start.  A coordinate whose vote passes the gate
    only after others have moved takes its first step where that scale may be decades off: along
    a slope of a normal regression, ``g_ij = r_i x_ij / sigma^2`` and the curvature is ``x_ij^2 /
    sigma^2``, so where ``sigma`` fell from ``sigma_0`` to ``sigma_1`` the curvature grew by
    ``(sigma_0 / sigma_1)^2`` and the median by ``(r_1 / r_0) (sigma_0 / sigma_1)^2``.  Its square,
    the factor taken here, is at least the curvature's growth wherever the standardised residuals
    ``r / sigma`` grew — as they do when a scale started far above its mode comes down (a
    ``uniform(0, 100)`` ``sigma`` starts at 50) — so the first step is at most Newton's; too
    short a first step costs a round or two of doubling, too long a one does not come back.
    Where the median fell (a scale rising from below, rows saturating) the start's scale is kept.

    Measured: ``d_km ~ normal(a + b * temp, sigma)`` with ``real<lower=0, upper=100> sigma`` (600
    rows, ``temp`` centred, the posterior's ``sigma`` 0.002), whose slope first moves in the far
    phase's last rounds with ``sigma`` by then 3 decades lower, took a first step of 24 (``b``'s
    posterior sd is 1e-5) and ended 1.1e6 posterior sds off (epsilon = 4, seed 1); with this, 19
    (unsettled, warned; docs/adaptation.md §7, "A scale far above its mode under a uniform prior").
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        shrink = np.where(median > start_median, (start_median / median) ** 2, 1.0)
    return np.asarray(local_sd, dtype=float) ** 2 * np.where(np.isfinite(shrink), shrink, 1.0)


def far_multipliers(pld_far: float, rounds: int, quantile_rounds: int,
                    first_boost: float = 1.0) -> dict[str, float]:
    """Noise multipliers of the far phase's releases for its PLD-mean budget ``pld_far`` (public).

    ``SCALE_SHARE`` of it for the curvature scale (``quantile_rounds`` count
    releases), the rest over ``rounds`` rounds; in each, ``MEDIAN_SHARE`` for
    the median search and the remainder for the vote, except that the first
    round's median search gets ``first_boost`` times a round's median budget
    (:func:`planned_first_median_boost`), the extra taken equally from every
    round: a round's budget is ``(1 - SCALE_SHARE) pld_far / (rounds +
    (first_boost - 1) MEDIAN_SHARE)``.
    """
    if rounds < 1 or not pld_far > 0.0:
        raise ValueError("the far phase needs at least one round and a positive budget")
    if not 1.0 <= first_boost < math.inf:
        raise ValueError("first_boost must be finite and at least 1")
    m_round = (1.0 - SCALE_SHARE) * pld_far / (rounds + (first_boost - 1.0) * MEDIAN_SHARE)
    m_median = MEDIAN_SHARE * m_round
    return {
        "far scale": math.sqrt(quantile_rounds / (2.0 * SCALE_SHARE * pld_far)),
        "far first median": math.sqrt(FIRST_MEDIAN_ROUNDS / (2.0 * first_boost * m_median)),
        "far median": math.sqrt(MEDIAN_ROUNDS / (2.0 * m_median)),
        "far vote": 1.0 / math.sqrt(2.0 * (1.0 - MEDIAN_SHARE) * m_round),
    }


def vote_noise_forecast(share: float, n_public: int, dim: int, pld_mean: float, rounds: int) -> float:
    """The sd of one far round's vote release as a fraction of ``n`` at budget share ``share`` (public).

    The vote's rows have L2 norm at most ``sqrt(d)``; its noise sd is
    ``k sqrt(d) z_vote`` with ``k = 2`` (replace-one, the larger sensitivity).
    """
    z = far_multipliers(share * pld_mean, rounds, 1)["far vote"]
    return 2.0 * math.sqrt(dim) * z / n_public


def planned_far_share(n_public: int, dim: int, pld_mean: float, rounds: int) -> float:
    """The far phase's share of the adaptation budget: :data:`FAR_SHARE`, cut where less will do and
    raised where more is needed (public).

    The vote's noise goes like ``1 / sqrt(share)``.  Where
    :func:`vote_noise_forecast` at :data:`FAR_SHARE` is within
    :data:`VOTE_NOISE_LIMIT` the share is cut until it is
    :data:`VOTE_NOISE_TARGET`, within ``[FAR_SHARE_MIN, FAR_SHARE]``: where the
    rows are many the votes are resolved cheaply and the rest goes to the
    Newton rounds (a D = 10 logistic regression at n = 1e4: 0.046 at
    epsilon = 1, the floor at epsilon = 4; at 434 rows, epsilon = 4, D = 4,
    noise 0.14 n, nothing is cut).  Beyond the limit it is raised to the
    least share that brings the noise to :data:`VOTE_NOISE_LIMIT`, if that is
    at most :data:`FAR_SHARE_MAX`, and is 0 (no far phase) otherwise.

    Why raise it: a start far from the posterior is the rule for models as
    users write them (an intercept near 7.5 for costs or survival days in
    thousands, a scale parameter at 1 under an outcome around 20), and without
    the phase the Newton rounds, whose frame is measured at the start, moved
    such a start by about half a posterior sd a round.  At 1,000 rows,
    epsilon = 1 (D = 4: 0.19; D = 6: 0.28), 24 runs per model of
    ``benchmarks/published_models.py``, median (max) worst error before ->
    after: gamma GLM 136 (2,060) -> 48 (1,250), heteroscedastic normal 31
    (212) -> 9.0 (57), censored Weibull 45 (55) -> 16 (42), ``earnings`` 10.6
    (47) -> 3.7 (12), beta regression 4.6 (24) -> 2.9 (13), ``roaches`` 18.7
    (451) -> 15 (129), ``wells`` 2.6 (5.2) -> 2.3 (4.6).  The cost is the
    budget a near start does not use: the ordered logistic regression (D = 6,
    its start within about 10 posterior sds) went 5.4 (186) -> 7.4 (1.2e10),
    its runs beyond 20 sds 2 -> 5 of 24, all from its top cut point, whose
    frame is 12 times too wide where its few rows leave it at the initial
    scale's floor (docs/adaptation.md §7); the pool's axis narrowing and the
    sparse coordinates' cap of :mod:`stan_dp.adaptation.initial_frame` since took it
    to 5.2 (9.8).
    """
    noise = vote_noise_forecast(FAR_SHARE, n_public, dim, pld_mean, rounds)
    if noise > VOTE_NOISE_LIMIT:
        raised = FAR_SHARE * (noise / VOTE_NOISE_LIMIT) ** 2   # the least that resolves the votes
        return float(raised) if raised <= FAR_SHARE_MAX else 0.0
    return float(min(FAR_SHARE, max(FAR_SHARE_MIN, FAR_SHARE * (noise / VOTE_NOISE_TARGET) ** 2)))


def planned_first_median_boost(n_public: int, dim: int, pld_far: float, rounds: int) -> float:
    """The first median's budget factor (:func:`far_multipliers`), from public facts.

    The first median searches all of :data:`~stan_dp.adaptation.quantile.LOG2_RANGE`, so its
    first comparisons are at thresholds where the count is 0 or ``n``, ``n / 2`` from the target:
    one noise draw that far (count-noise sd ``z sqrt(dim)``) sends the median decades off, and
    with it the first move's step.  At 434 rows, D = 4, epsilon = 4 that gap was 1.8 noise sds (4 %
    a comparison, 28 comparisons): in 12 of 24 NumPy seeds of a ``kidiq``-like regression some
    coordinate's first median was off by more than 10 times (up to 1e8, or at the search's
    floor), ``log sigma``'s first step 4e-6 where it had to move 2.9, and 6 runs ended 22-58 sds
    off.  The boost is the least factor in ``[1,
    FIRST_MEDIAN_BOOST_MAX]`` with ``n / 2 >= FIRST_MEDIAN_GAP_SDS z sqrt(dim)``; 1 (no change)
    where the rows are many enough (at D = 4 from about 1,000 rows at epsilon = 4).
    """
    target = (n_public / (2.0 * FIRST_MEDIAN_GAP_SDS)) ** 2 / dim   # the largest z^2 allowed
    # z^2 = K (MEDIAN_SHARE + (rounds - MEDIAN_SHARE) / b) from far_multipliers
    k = FIRST_MEDIAN_ROUNDS / (2.0 * MEDIAN_SHARE * (1.0 - SCALE_SHARE) * pld_far)
    room = target / k - MEDIAN_SHARE
    if room <= 0.0:
        return FIRST_MEDIAN_BOOST_MAX
    return float(min(FIRST_MEDIAN_BOOST_MAX, max(1.0, (rounds - MEDIAN_SHARE) / room)))


def far_releases(pld_far: float, rounds: int, quantile_rounds: int, first_boost: float = 1.0) -> list[Release]:
    """The far phase's releases as accounting lines (data-independent)."""
    z = far_multipliers(pld_far, rounds, quantile_rounds, first_boost)
    later = [Release(z["far median"], MEDIAN_ROUNDS * (rounds - 1))] if rounds > 1 else []
    return [Release(z["far scale"], quantile_rounds), Release(z["far first median"], FIRST_MEDIAN_ROUNDS),
            *later, Release(z["far vote"], rounds)]


def scale_coordinates(density: Any, d: int) -> np.ndarray | None:
    """The coordinates whose far steps stop at :data:`LOG_STEP_MAX` and that step 4b of
    :func:`far_phase` never brackets (boolean, public): those the density's program puts on Stan's
    log transform (``log_coordinates``), and those on its logit transform that the program passes
    as a sampling statement's scale (``bounded_scale_coordinates``, read from the program:
    :func:`stan_dp.stan_source.scale_parameters`); ``None`` where it declares neither.

    A scale declared ``real<lower=0, upper=100> sigma`` is a scale: below its mode its rows'
    median ``|g|`` rises as fast as a log-transformed one's, so a flip of its vote after such a
    rise does not say that a bracket holds its mode — the flip says where its mode lies *given*
    the other coordinates, and while a location is still far off that point is far above the
    mode.  ``d_km ~ normal(a + b * temp, sigma)`` (the replica of ``tests/test_uniform_scale.py``,
    600 rows, epsilon = 4, noise seed 17): ``sigma``'s logit coordinate moved from -5.1 to -11.0
    (its mode -10.9) while ``a`` was 0.6 from its mode, the vote there said "up" (``a``'s residuals
    dwarfed ``sigma``), the coordinate was bracketed between -6.6 and -5.9 by votes taken while
    ``a`` moved, and the phase ended it at -6.5, 80 times too wide in ``sigma``; the Newton rounds'
    frame, measured there, was 25-95 times too wide and the run ended 34 posterior sds off.
    Unbracketed it ended the phase at -9.5 and the run 5.2 sds off.  Over 24 noise seeds x 2 data
    sets (docs/adaptation.md §7, "A scale far above its mode under a uniform prior") the median
    worst error went 8.6 / 7.6 -> 3.6 / 2.7 at epsilon = 4 and 0.63 / 0.63 -> 0.43 / 0.40 at
    epsilon = 16.  A bounded coefficient is not a scale: a Poisson regression of admissions on
    beds and staff with ``real<lower=-20, upper=20> a`` and slopes in ``(-10, 10)`` (1,500 rows)
    needs step 4b's bracket after its first move's overshoot (0.18-0.93 sds off with it, epsilon
    16 and 4; 700-1,230 treated as scales)."""
    log = log_coordinates(density, d)
    scale = declared_mask(density, "bounded_scale_coordinates", d)
    if log is None and (scale is None or not scale.any()):
        return None
    return (np.zeros(d, dtype=bool) if log is None else log) | (False if scale is None else scale)


def holdable_coordinates(density: Any, d: int) -> np.ndarray:
    """The coordinates step 4 of :func:`far_phase` may take back and hold (boolean, public): those
    the density's program puts neither on Stan's log transform (``log_coordinates``) nor on its
    logit transform with bounds other than ``(0, 1)`` and ``(-1, 1)`` (``bounded_coordinates``,
    :func:`~stan_dp.adaptation.curvature.logit_coordinates`), both read from the program; none
    where the density does not say (a NumPy density: the phase as before).

    Scale parameters are declared so, and a scale far from its mode shrinks its rows' median
    gradient the same way: a sigma at 1 under incomes in dollars (sd 15,000), ``r^2 / sigma^2 -
    1``, 100-fold in one doubled move while every row still says "larger" (held there, 200-350
    posterior sds short); a ``uniform(0, 100)`` sigma of log earnings (0.88) in 2 of 24 runs at
    1,000 rows, epsilon = 4 (held, 50 sds off).  A probability (``<lower=0, upper=1>``) stays: its
    rows are a binary outcome's."""
    log = declared_mask(density, "log_coordinates", d)
    if log is None:
        return np.zeros(d, dtype=bool)
    logit = logit_coordinates(density, d)
    return ~(log | (False if logit is None else logit))


FIXED_SIGN_FAMILIES = frozenset({"bernoulli", "bernoulli_logit", "bernoulli_logit_glm", "categorical",
                                 "categorical_logit", "categorical_logit_glm"})
"""Outcome families whose rows' gradient signs the outcome alone fixes.  A Bernoulli row's log
density is ``y log p + (1 - y) log(1 - p)``, so ``d/dtheta = (y / p - (1 - y) / (1 - p)) dp/dtheta``:
the first factor is positive for an event and negative otherwise at every ``theta``; a categorical
row's gradient along class ``k``'s linear predictor is ``1{y = k} - p_k``.  Along an intercept
the far phase's vote then counts the classes (``n_1 - n_0``) at the start, at the mode and past
it, and so does it along a slope whose predictor keeps one sign (a weight in kg): the joint moves
of all of them walk past the mode together.  For such a density (every outcome family of the
program in this set: :func:`fixed_sign_rows`) step 4 of :func:`far_phase` takes back a collapse
of several coordinates that moved together, so long as none of them is a scale's (no scale's move
rescaled the others' gradients).  A binomial with several trials (``y - N p``) and a Poisson
(``y - lambda``) change sign with ``theta``: not in the set."""


def fixed_sign_rows(density: Any) -> bool:
    """Whether every outcome family of the density's program (``outcome_families``, public: its
    sampling statements on row variables) is in :data:`FIXED_SIGN_FAMILIES` (False where it does
    not say: a NumPy density, or a likelihood written in another shape)."""
    families = set(getattr(density, "outcome_families", ()) or ())
    return bool(families) and families <= FIXED_SIGN_FAMILIES


def collapsed_moves(moved: np.ndarray, repeated: np.ndarray, holdable: np.ndarray, left_median: np.ndarray,
                    median: np.ndarray, rows_vote: np.ndarray, gate: float, jointly: bool = False) -> np.ndarray:
    """Step 4 of :func:`far_phase`: which coordinates' last move to take back (post-processing).

    Parameters
    ----------
    moved : ndarray
        Each coordinate's last move (0: it did not move).
    repeated : ndarray of bool
        Whether that move was not the coordinate's first.
    holdable : ndarray of bool
        :func:`holdable_coordinates`.
    left_median, median : ndarray
        ``log2`` of the released median of ``|g_ij|`` where the move began and where it ended.
    rows_vote : ndarray
        The rows' released vote where it ended (without the prior).
    gate : float
        The vote's gate (``max(SIGNIFICANCE sd, AGREEMENT n)``).
    jointly : bool, default False
        The density's rows have fixed gradient signs (:func:`fixed_sign_rows`): a move together
        with other coordinates counts, so long as none of those moved is a scale's.

    Returns
    -------
    ndarray of bool
        The coordinate moved alone (a coordinate's median depends on every coordinate: a scale's
        move rescales all the rows' gradients) — or, ``jointly``, with no coordinate that is not
        holdable —, not for the first time, is holdable, its median fell more than
        :data:`COLLAPSE_OCTAVES`, and the rows still vote beyond the gate the way it moved.
    """
    moved = np.asarray(moved, dtype=float)
    holdable = np.asarray(holdable, dtype=bool)
    if jointly:
        alone = not bool(np.any((moved != 0.0) & ~holdable))
    else:
        alone = bool(np.count_nonzero(moved) == 1)
    return (holdable & np.asarray(repeated, dtype=bool) & (moved != 0.0) & alone
            & (np.asarray(left_median) - np.asarray(median) > COLLAPSE_OCTAVES)
            & (np.sign(rows_vote) == np.sign(moved)) & (np.abs(rows_vote) > gate))


def _direction_gradients(density: Any, theta: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    """Per-row ``[g_i, U' g_i]`` (shape ``(n, d + G)``; ``U = groups``, ``(d, G)``, none by
    default), ``g_i`` the row's log-likelihood gradient."""
    _, grads = density.row_log_lik_grad(theta)
    g = np.asarray(grads, dtype=float).reshape(-1, theta.size)
    if groups is None or np.shape(groups)[1] == 0:
        return g
    with np.errstate(all="ignore"):
        return np.hstack([g, g @ np.asarray(groups, dtype=float)])


def _abs_gradient_rows(density: Any, theta: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """Per-row ``|[g_i, U' g_i]|`` (:func:`_direction_gradients`), non-finite entries as ``+inf``."""
    g = np.abs(_direction_gradients(density, theta, groups))
    return np.where(np.isnan(g), np.inf, g)


def _vote_rows(density: Any, theta: np.ndarray, bounds: np.ndarray,
               groups: np.ndarray | None = None) -> np.ndarray:
    """Per-row ``clip([g_i, U' g_i] / bounds, -1, 1)`` (shape ``(n, k)``, ``k = d + G``; NaN
    entries 0): L2 norm at most ``sqrt(k)``."""
    with np.errstate(all="ignore"):
        v = np.clip(_direction_gradients(density, theta, groups) / bounds, -1.0, 1.0)
    return np.where(np.isnan(v), 0.0, v)


def far_phase(holder: Any, density: Any, theta: np.ndarray, *, local_sd: np.ndarray, moving: np.ndarray,
              n_public: int, rounds: int, multipliers: dict[str, float], max_step: float,
              rng_noise: np.random.Generator, ledger: Ledger, groups: np.ndarray | None = None,
              on_round: Callable[[dict[str, Any]], None] | None = None) -> list[np.ndarray]:
    """Run the far rounds from ``theta``; return the points visited after it (post-processing).

    The phase moves along ``k = d + G`` directions: the ``d`` coordinates, then the ``G`` columns
    of ``groups`` (:func:`~stan_dp.adaptation.groups.group_directions`; each moves its coordinates
    together).  Each direction
    has its own median, vote and step, read from released sums over its per-row values
    (``[g_i, U' g_i]``, :func:`_direction_gradients`), and a round's move along the directions
    ``m`` moves the point by ``B m``, ``B = [I | U]``.

    Parameters
    ----------
    holder : AggregateDensity
        Where the rows live (:func:`stan_dp.aggregates.queries`).
    density : RowDensity
        For the exact prior gradient (public).
    theta : ndarray
        Start (unconstrained, data-independent).
    local_sd : ndarray
        ``a_j``: the released curvature scale at the start (``1 / sqrt(n c_j)``), per direction.
    moving : ndarray of bool
        Directions that may move (their scale was found); the others stay.
    multipliers : dict
        :func:`far_multipliers` of the phase's budget.
    max_step : float
        Public cap on any coordinate's move in one round.
    groups : ndarray, optional
        ``U``, shape ``(d, G)`` (public; default none).
    on_round : callable, optional
        Called with each round's released quantities (for traces).
    """
    theta = np.array(theta, dtype=float)
    u = np.zeros((theta.size, 0)) if groups is None else np.asarray(groups, dtype=float)
    d = theta.size + u.shape[1]   # the directions

    def along(m: np.ndarray) -> np.ndarray:   # B m: the point's move for moves m along the directions
        return m[:theta.size] + u @ m[theta.size:] if u.shape[1] else m

    moving = np.asarray(moving, dtype=bool)
    sqrt_d = math.sqrt(d)
    step = np.zeros(d)
    last = np.zeros(d)
    log2_median = None
    moved = np.zeros(d)        # each coordinate's last move
    repeated = np.zeros(d, dtype=bool)   # and whether it was not its first (a Newton step)
    left_median = np.zeros(d)  # log2 of the median where that move began
    held = np.zeros(d, dtype=bool)   # taken back after a collapse (step 4): stays for the phase
    holdable = holdable_coordinates(density, theta.size)   # public: the others are never taken back
    holdable = np.concatenate([holdable, [bool(holdable[col > 0].all()) for col in u.T]]).astype(bool)
    jointly = fixed_sign_rows(density)   # public: the program's outcome families
    logs = scale_coordinates(density, theta.size)   # public: their steps stop at LOG_STEP_MAX
    position = np.zeros(d)     # each direction's cumulative move
    low = np.full(d, -np.inf)  # where its vote last passed the gate up ...
    high = np.full(d, np.inf)  # ... and down: the mode along it lies between
    bracketed = np.zeros(d, dtype=bool)   # an overshoot seen: moves stay inside the bracket
    capped = np.zeros(d, dtype=bool)
    if logs is not None:
        capped[:theta.size] = logs
        capped[theta.size:] = [bool((logs & (col != 0)).any()) for col in u.T]
    stat_args = (u,) if u.shape[1] else ()
    points = []
    start_median = None   # the medians at the start (first_move_variance)
    voted = np.zeros(d)  # each direction's last vote beyond the gate (its sign), kept through pauses
    paused = np.zeros(d, dtype=bool)   # within the gate last round
    alone = np.zeros(d, dtype=bool)    # no other direction moved since that vote
    for k in range(rounds):
        stat = holder.row_statistic(_abs_gradient_rows, theta, *stat_args)
        if log2_median is None:
            b, _ = private_quantiles(rng_noise, RowColumns(holder, stat, 0, d), tail=0.5, n_public=n_public,
                                     rounds=FIRST_MEDIAN_ROUNDS, noise_multiplier=multipliers["far first median"],
                                     ledger=ledger, what="far first median count")
        else:
            window = (log2_median - MEDIAN_WINDOW, log2_median + MEDIAN_WINDOW)
            b, _ = private_quantiles(rng_noise, RowColumns(holder, stat, 0, d), tail=0.5, n_public=n_public,
                                     rounds=MEDIAN_ROUNDS, noise_multiplier=multipliers["far median"],
                                     ledger=ledger, what=f"far median count, round {k}",
                                     log2_range=window)
        del stat
        log2_median = np.clip(np.log2(b), *LOG2_RANGE)
        stat = holder.row_statistic(_vote_rows, theta, b, *stat_args)
        v, _ = clipped_vector_sum(rng_noise, RowColumns(holder, stat, 0, d), sqrt_d, multipliers["far vote"],
                                  ledger, f"far vote sum, round {k}")
        del stat
        sd = ledger.entries[-1].noise_sd
        # ---- post-processing of released values only ----
        gate = max(SIGNIFICANCE * sd, AGREEMENT * n_public)
        collapsed = collapsed_moves(moved, repeated, holdable, left_median, log2_median, v, gate, jointly)
        if collapsed.any():   # step 4: take the move back, and stay (the others did not move last
            # round, so their votes, released at the point the move reached, are read as they are)
            theta = theta - along(np.where(collapsed, moved, 0.0))
            position = position - np.where(collapsed, moved, 0.0)
            log2_median = np.where(collapsed, left_median, log2_median)   # the next search's window
            held |= collapsed
        _, pg = prior_gradient(density, theta)
        if u.shape[1]:
            with np.errstate(all="ignore"):
                pg = np.concatenate([pg, pg @ u])
        with np.errstate(all="ignore"):
            vote = v + np.clip(np.where(np.isfinite(pg), pg, 0.0) / b, -n_public, n_public)
        significant = moving & ~held & (np.abs(vote) > gate)
        sign = np.sign(vote) * significant
        if start_median is None:
            start_median = b.copy()
        newton = (np.maximum(np.abs(vote) - 2.0 * sd, 0.0) * b * first_move_variance(local_sd, start_median, b)
                  / max(int(significant.sum()), 1))
        first = significant & (step == 0.0)
        step = np.where(first, newton, step)
        grow = significant & ~first & (sign == last)
        flip = significant & ~first & (sign == -last)
        # a move after a pause at a point nothing else moved from halves the step (step 3b): against
        # the last vote (a sign change), and along it (the vote fell within the gate where it stood)
        resumed = significant & ~first & paused & alone
        shrink = flip | (resumed & (sign == -voted))
        step = np.where(grow, GROWTH * step, np.where(shrink | resumed, step / GROWTH, step))
        # step 4b: a flip after a move that raised the median beyond OVERSHOOT_OCTAVES brackets it
        bracketed |= flip & ~capped & (log2_median - left_median > OVERSHOOT_OCTAVES)
        step = np.where(capped, np.minimum(step, LOG_STEP_MAX), step)
        low = np.where(significant & (sign > 0), np.maximum(low, position), low)
        high = np.where(significant & (sign < 0), np.minimum(high, position), high)
        room = np.where(bracketed, np.where(sign > 0, high - position, position - low) / 2.0, np.inf)
        move = np.where(significant, sign * np.minimum(np.minimum(step, max_step), room), 0.0)
        move = np.where(np.isfinite(move), move, 0.0)
        position = position + move
        last = np.where(shrink, 0.0, sign)   # after a flip, the next round neither grows nor halves
        moved = move
        voted = np.where(significant, sign, voted)
        paused = ~significant
        # whether no other direction moved since (and in) the round of each direction's last vote
        # (a move within round-off, from a median at the search's floor, does not count)
        went = np.abs(move) > NEGLIGIBLE_MOVE
        others = (np.count_nonzero(went) - went) > 0
        alone = np.where(significant, ~others, alone & ~others)
        repeated = ~first
        left_median = log2_median.copy()
        theta = theta + along(move)
        points.append(theta.copy())
        if on_round is not None:
            on_round({"theta": theta.copy(), "vote": vote, "vote_sd": sd, "step": step.copy(), "far": True,
                      "median": b.copy(), "held": held.copy()})
    return points
