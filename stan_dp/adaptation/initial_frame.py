"""The search's initial frame: private per-coordinate scales and, optionally, a turn along a ridge.

At the starting point (:func:`_initial_scale`) a private tail quantile of the
per-row curvatures gives each coordinate its scale, with a released count of
the rows that depend on it; :func:`_oriented_frame` then turns that diagonal
frame along the principal directions of the rows' released curvature.  Every
data access is a release written to the ledger
(:mod:`stan_dp.adaptation.releases`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from scipy import stats

from stan_dp.adaptation.curvature import _curvature_rows, _orientation_rows, flat_likelihood
from stan_dp.adaptation.plan import NOISE_SPECTRAL_FACTOR, AdaptationSettings, scale_tail, tail_rows
from stan_dp.adaptation.quantile import LOG2_RANGE, private_quantiles
from stan_dp.adaptation.ridge import apart_from, thresholded_ridges
from stan_dp.adaptation.releases import Ledger, clipped_matrix_sum, noisy_counts
from stan_dp.aggregates import RowColumns

__all__ = ["ELEMENT_THRESHOLD_OCTAVES", "InitialScale", "elements_within_group", "initial_scale_release",
           "sparse_direction_tails", "unit_diagonal"]


DEPENDING_SDS = 3.0
"""A coordinate counts as depending on the rows (:func:`_initial_scale`) only where its released
count of depending rows is beyond this many noise sds."""
DEPENDING_LOWER_SDS = 2.0
"""The initial scale's tail holds at most half of the released count of depending rows less this
many noise sds (a lower bound on the rows that depend on the coordinate: :func:`_initial_scale`)."""


WEIGHED_GAP_SDS = 5.0
"""The initial scale searches a coordinate by probabilistic bisection
(:func:`~stan_dp.adaptation.quantile.private_quantiles`' ``weighed``) where its released count of
depending rows is within this many count-noise sds of the search's target (a public function of
released counts): there the depending rows lie within a few noise sds of the target, or the target
within a few of 0, and a halving search takes a count read a noise sd or two on the wrong side as
certain.  Both happened:

* a count read low below every depending row sent the search decades down (an ordered logistic
  regression's top cut point at 1,000 rows, epsilon = 1: 285 depending rows, count-noise sd 81,
  target 149, read 135 at ``2^-15``; its frame came out 51 times too wide and the private mean of
  the cut point 1.2e7 reference sds off);
* a count read high above every depending row sent it decades up, a frame that many times too
  narrow (a non-centred group effect with 251 depending rows at a count-noise sd of 55.6, target
  49.7 rows, 0.89 sds above 0: read 55.8 and 61.8 at ``2^0`` and ``2^30`` where the true count is 0,
  and ended at ``2^41``; the draws' sd came out 3e-8 against NUTS's 0.38).  The county intercepts of
  ``radon`` at 3,000 rows, epsilon = 16 (150 rows each against a count-noise sd of 26) did so in
  most runs, which then crawled 23 sds from the posterior for all their rounds.

Beyond the gap a count read below the target where every depending row is above it happens once in
3.5 million comparisons, and the halving search of such a coordinate is the same as before,
threshold for threshold.  (Until session 58 these coordinates took two recheck rounds of the upper
end instead: docs/adaptation.md §3, "A count read low is read again", which guarded the first
case only.)"""


SPARSE_FRACTION = 0.2
"""The Newton rounds' initial scale (:func:`_initial_scale` with ``sparse_rows``) divides a
coordinate's curvature quantile by an upper bound on the rows that depend on it (its released count
plus :data:`DEPENDING_LOWER_SDS` noise sds), not by all ``n`` rows, where that bound is at most this
fraction of ``n`` (a public function of released counts): a group's intercept or effect among many
groups.  Taken over all ``n`` rows the frame of such a coordinate is narrower than its posterior sd
by about ``sqrt(chi2_1(0.5) m_j / n)`` (0.15 for one county of ``radon``'s 20), below what the
rounds' curvature release resolves, so the rounds crawl: ``radon`` at 3,000 rows, epsilon = 16
ended 14.3 sds off (median of 24 runs), along county intercepts whose frames were 0.15-0.2 of their
posterior sds.  With the upper bound, 2.02 (0.187 geometric mean of the 24 paired ratios); the
8-group ``hierarchical`` (12.5 % of the rows per group) 0.934; no other run of the 18-model battery
changed at 1,000 rows (epsilon 4 and 16) or 3,000 rows (docs/adaptation.md §3, "A sparse
coordinate's frame").  Denser coordinates keep ``n``: binary predictors at 25-60 % went 1.06-1.24
times further with the bound (gamma, Weibull, ``roaches``, a bounded-coefficient ``wells``), as a
40 % one had before with the released count itself.

Except a declared group's elements (``initial_scale_release``'s ``elements``, read from the
program), which take the bound wherever it is below ``n``: a group effect depends on its group's
rows alone, whatever share of the rows that is.  At epsilon = 4 the count noise put the bound of
a group of 100 rows in 1,000 beyond ``0.2 n``, and its frame was taken over all 1,000 rows, 3-6
times narrower than its posterior sd: fixed effects per group of 400 down to 20 rows (the NumPy
replica of ``tests/test_index_groups.py``) ended 1.1-14.9 sds off (median 4.0, seeds 1-12), 0.9-4.3
(median 1.7) with the bound; ten user programs with declared groups (``benchmarks/user_programs``,
noise seeds 1-6) went 0.74 times as far off in geometric mean (p = 0.004; runs beyond 10 sds 11 ->
7), ``cross`` (crossed site and year effects) 0.20 and ``fec`` 0.45, while ``pfe`` (Poisson region
intercepts beside an uncentred temperature) went 1.40 times further; at epsilon = 16 0.96 (p =
0.77).  The 18-model battery at 1,000 rows was unchanged (its groups were within the gate)."""


RIDGE_EIGENVALUE = 0.25
""":func:`_oriented_frame` turns the frame when the released orientation matrix, scaled to unit
diagonal, has an eigenvalue within its noise of this or below: some combination of coordinates has
less than a quarter of the curvature its coordinates have on their own (an intercept and a predictor
in metres around 5 km: 0.02), a ridge that the diagonal frame hides from the rounds.

"Within its noise" (``lambda_min < RIDGE_EIGENVALUE + tau_G``): where the release is
noisy the released ``R`` of a strong ridge is far from its truth either way (a diagonal high by
noise shrinks the entry, a low one inflates it: a Poisson GLM's intercept-metres entry, 0.98 without noise, came
out at 0.52-1.17 at 1,000 rows, epsilon = 1).  Held to 0.25 itself, 5 of 24 such runs
kept the diagonal frame and ended 12-21 sds off; within the noise 2 did (24 NumPy seeds,
median (rms) worst error 7.7 (11.4) -> 6.2 (9.6)).  At the budgets that oriented before (1,000
rows at epsilon = 4, 10,000 rows) the NumPy cells turned as before, draw for draw: none of their
released eigenvalues fell between 0.25 and ``0.25 + tau_G``."""


INDEFINITE_STRETCH = 100.0
""":func:`_oriented_frame` does not widen the frame along a turned direction whose released
eigenvalue is negative beyond the noise's spectral norm (``lambda_k < -||E||``, the group's
``noise_norm``) where its direction count would widen it more than this many times: the rows are
indefinite along it (a start far from the mode, where a scale parameter's rows are not
positive-definite), not a ridge, and the direction count's quantile of their curvature finds ~0
there.  An `earnings`-like regression at 500 rows, epsilon = 1 (height around 66, a scale at 1
at the start) turned a block ``(a, b_height, log sigma)`` read at -0.80 against a noise norm of
0.58, its direction count came out 10 decades below the others' and the stretch 1.8e5: the
intercept's frame sd was 424 against a posterior sd of 0.82, the first Newton round moved it by
-24,170 and ``log sigma`` by -747, and the fit ended 5,736 and 35,384 sds off (Stan, two data
sets); with the stretch held to 1, 10.6 and 9.6.  A ridge's rows are positive semi-definite, so
its direction count is not that low: in good runs the stretches were at most 16 (`earnings`), 52
(Weibull) and 3.9 (heteroscedastic normal), and a Poisson GLM (positive-definite rows) whose
reading fell below ``-||E||`` by noise (2 of 12 runs at 1,000 rows, epsilon = 1) is stretched less
than 100-fold and keeps it.  Paired runs (docs/adaptation.md §3, "Indefinite directions are not
widened"): 3 of 24 Stan `earnings` runs at 500 rows changed (5,736 -> 10.6, 35,384 -> 9.6,
157 -> 69), 1 of 24 of its NumPy twin (309 -> 14.6) and 2 of 120 NumPy regressions on a predictor
around 170 at 434-2,000 rows (62.6 -> 57.0, 189 -> 52.4); none of 120 runs of `radon`, the
Student-t regression, gamma, `hetero` and `roaches` at 500-1,000 rows, and none of 624 runs of
13 models at 1,000 rows (epsilon 1 and 4) nor 48 of the GLMs in metres at 10^4 rows, which did not
change even with every stretch capped at 100 (a superset of this rule's changes)."""


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


def sparse_direction_tails(depending: np.ndarray, count_sd: float, groups: list[np.ndarray], n_public: int,
                           default_tail: float, directions: int,
                           z_direction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per turned direction, the direction count's target where few rows depend on its group.

    Parameters
    ----------
    depending : ndarray
        Released counts of the rows that depend on each of the orientation's coordinates (the
        initial scale's first release, :class:`InitialScale`), noise sd ``count_sd``.
    groups : list of ndarray
        The turned groups (positions among those coordinates): each group's directions are its
        block's eigenvectors, and every row that depends on one depends on some member.
    default_tail : float
        The tail of all ``n`` rows the direction count takes otherwise (:func:`scale_tail`).
    directions, z_direction : int, float
        The direction count's columns and noise multiplier (its noise sd ``z sqrt(directions)``).

    Returns
    -------
    tail : ndarray
        Per coordinate position, the fraction of all ``n`` rows the count's target holds.
    within : ndarray
        That target as a fraction of the rows depending on the direction (what the quantile
        is of, for the mean curvature it implies: ``chi2_1(1 - within)``).
    rows : ndarray
        The rows the mean curvature is taken over (``n``, or an upper bound on the group's
        depending rows: the narrow side).
    weighed : ndarray of bool
        Searched by probabilistic bisection (the target within
        :data:`WEIGHED_GAP_SDS` noise sds of the count).

    A group whose every member is sparse (an upper bound on its depending rows, the count plus
    :data:`DEPENDING_LOWER_SDS` noise sds, within :data:`SPARSE_FRACTION` of ``n``, as for the
    initial scale's sparse rows) takes the initial scale's target among those rows
    (:func:`initial_scale_release`): ``SCALE_TAIL`` of them and at least ``SCALE_TAIL_SDS`` noise
    sds, at most half of a lower bound on them (its largest member's count less
    ``DEPENDING_LOWER_SDS`` noise sds); the mean curvature is taken over an upper bound on the
    group's rows (the members' upper bounds summed: a row depends on the direction only if on
    some member; the narrow side).  Elsewhere every value is the default's, so the release is the
    same, draw for draw.  Post-processing of released counts; the plan (columns, rounds, noise)
    is unchanged.

    Why: the default target of a sparse group is beyond the rows that depend on it, so its search
    ends among rows that do not, at a quantile near 0, and stretches the direction by decades:
    ``radon-slopes`` (a county's intercept and slope on an 80 % binary predictor, a tenth of the
    rows each, a ridge) at 3,000 rows, epsilon = 16, had a county's pair read at 277 and 206
    depending rows (count-noise sd 28) against a default target of 300; its turned direction was
    stretched about 3e5-fold, thousands of posterior sds wide, and the rounds diverged along it.
    Here the target is 111 rows (median worst error of 24 runs 23.1 -> 5.07 sds; the NumPy twin,
    ``tests/test_sparse_ridge.py``: the frame's widest direction 1e6 -> 1.6-2.1 posterior sds).
    """
    k = len(depending)
    tail = np.full(k, float(default_tail))
    within = tail.copy()
    rows = np.full(k, float(n_public))
    weighed = np.zeros(k, dtype=bool)
    sd_direction = z_direction * math.sqrt(max(directions, 1))
    for group in groups:
        dep = np.asarray(depending, dtype=float)[group]
        if not (np.all(np.isfinite(dep))
                and np.max(dep) + DEPENDING_LOWER_SDS * count_sd <= SPARSE_FRACTION * n_public):
            continue
        target, within[group] = _target_among_depending(np.max(dep), count_sd, n_public, max(directions, 1),
                                                        z_direction)
        tail[group] = target / n_public
        rows[group] = float(np.clip(np.sum(dep + DEPENDING_LOWER_SDS * count_sd), 1.0, n_public))
        weighed[group] = float(np.clip(np.max(dep), 1.0, n_public)) - target < WEIGHED_GAP_SDS * sd_direction
    return tail, within, rows, weighed


def _target_among_depending(depending: Any, count_sd: float, n_public: int, dim: int,
                            z: float) -> tuple[np.ndarray, np.ndarray]:
    """The scale search's target among the rows depending on a direction, and its share of them.

    ``depending``: released counts (noise sd ``count_sd``); ``dim`` and ``z``: the columns and
    noise multiplier of the count releases that search (:func:`tail_rows`).  The target holds
    ``SCALE_TAIL`` of the depending rows and at least ``SCALE_TAIL_SDS`` of that search's noise
    sds, at most half of the rows that surely depend (the count less :data:`DEPENDING_LOWER_SDS`
    noise sds): a count high by noise must not put the target beyond the rows really there.  Where
    it is cut there, the tail is taken as the median of those rows (as if fewer rows depended on
    it: the narrow side).  Returns ``(target rows, fraction of the depending rows above it)``, the
    latter for the mean curvature the quantile implies (``chi2_1(1 - fraction)``).
    """
    m = np.clip(depending, 1.0, float(n_public))
    need = tail_rows(m, dim, z)
    half = 0.5 * np.clip(np.asarray(depending, dtype=float) - DEPENDING_LOWER_SDS * count_sd, 1.0,
                         float(n_public))
    capped = need > half
    return np.where(capped, half, need), np.where(capped, 0.5, need / m)


def _oriented_frame(holder: Any, theta: np.ndarray, frame: np.ndarray, data_coordinates: np.ndarray,
                    n_public: int, s: AdaptationSettings, z_orientation: float, z_direction: float,
                    rng_noise: np.random.Generator, ledger: Ledger, depending: np.ndarray | None = None,
                    count_sd: float = math.nan,
                    elements: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
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
       is below :data:`RIDGE_EIGENVALUE` within its noise (``+ tau_G``) and
       below ``1 - tau_G`` (beyond its noise, ``tau_G`` the block's noise in
       spectral norm) but not below
       ``-tau`` (far from the mode a scale parameter makes rows indefinite:
       a varying intercept had -0.39 against 0.18, and turning there sent
       its mean 277 sds off), ``tau`` the whole release's noise where it is
       below 1 (as before the groups: a regression whose intercept starts
       100 away from an outcome around 100, -0.3 to -0.48 against ~0.5,
       needs the turn; held to its pair's noise, 0.2, its sigma ended 4-6
       sds off instead of within 1.6), the group's own otherwise.  A turned
       group's directions are its block's eigenvectors
       (``u_k = D^-1/2 w_k``, unit length in the frame); every other
       coordinate keeps its axis.  With ``elements`` (the declared groups'
       elements) a group that fails the test and holds some of them is
       judged again without them (:func:`~stan_dp.adaptation.ridge.apart_from`):
       its other members (the groups' directions, which share rows with
       every element, and coordinates in no declared group) form groups of
       their own size and noise, each put to the same test, and the elements
       keep their axes.  A varying intercept's and a varying slope's
       directions share every row where the predictor is not 0, a ridge
       that is lost in a block with the elements.
    3. A private upper quantile of the per-row curvature along every
       direction (:func:`~stan_dp.adaptation.quantile.private_quantiles`, the
       statistic of the initial scale along ``b_k = A u_k``) gives each
       turned direction its scale: the new frame's columns are
       ``b_k / sqrt(c_k)`` (``c_k`` the mean curvature the quantile implies,
       as in the initial scale); an axis (no turned group) keeps the initial
       scale, and so does a direction the release reads as indefinite that
       the count would widen beyond :data:`INDEFINITE_STRETCH`.  When the
       frame is not turned the quantiles are released all the same (the plan
       does not depend on the data) and the initial frame is kept.

    With ``depending`` (the released counts of rows depending on each column of ``frame``, noise
    sd ``count_sd``: :class:`InitialScale`) a turned group that few rows depend on (a county's
    intercept and slope) takes its direction count's target among those rows
    (:func:`sparse_direction_tails`), not a tail of all ``n``.

    The plan is the same whatever the data (one matrix release and
    ``quantile_rounds`` count releases); everything after the releases is
    post-processing.  Returns the new frame and whether it was turned.
    """
    d = theta.size
    outer = bool(flat_likelihood(holder))   # public: the program's outcome family
    stat = holder.row_statistic(_orientation_rows, theta, frame, s.fd_step, outer)
    m_rel, sd_m = clipped_matrix_sum(rng_noise, RowColumns(holder, stat, 0, d * d), 1.0,
                                     z_orientation, ledger, "orientation sum")
    del stat
    idx = np.flatnonzero(data_coordinates)
    # where no coordinate got a scale (every row flat in every coordinate: a start far out where a
    # logistic regression's rows saturate) the planned count releases are made along the first axis
    # all the same, and the frame is kept
    directions = np.eye(d)[:, idx] if idx.size else np.eye(d)[:, :1]
    turned = False
    ridged = np.zeros(idx.size, dtype=bool)   # coordinates whose group of R turns
    turned_groups: list[np.ndarray] = []
    if idx.size >= 2:
        r, entry_sd, diag = unit_diagonal(m_rel[np.ix_(idx, idx)], sd_m)
        ridges = thresholded_ridges(r, entry_sd)
        # the whole release's noise in R (an upper bound: the smallest diagonal scales it)
        tau_all = NOISE_SPECTRAL_FACTOR * sd_m * math.sqrt(2.0 * idx.size) / float(np.min(diag))
        element = np.zeros(idx.size, dtype=bool) if elements is None else np.asarray(elements, dtype=bool)[idx]
        pending = list(ridges.groups)
        while pending:
            group = pending.pop(0)
            lam = ridges.eigenvalues[group]
            tau_g = NOISE_SPECTRAL_FACTOR * float(ridges.noise_norm[group[0]])
            # rows indefinite beyond the noise mean a start far from the mode, not a ridge;
            # where the whole release resolves R that noise is its own (as before the groups)
            guard = tau_all if tau_all < 1.0 else tau_g
            ridged[group] = (np.all(np.isfinite(lam)) and tau_g < 1.0
                             and -guard < float(lam.min()) < min(RIDGE_EIGENVALUE + tau_g, 1.0 - tau_g))
            if ridged[group[0]]:
                turned_groups.append(np.asarray(group))
            elif element[group].any() and (~element[group]).sum() >= 2:
                ridges, parts = apart_from(ridges, r, entry_sd, np.asarray(group), element)
                pending.extend(parts)
        if ridged.any():
            u = np.where(ridged[None, :], ridges.directions, np.eye(idx.size)) / np.sqrt(diag)[:, None]
            u /= np.linalg.norm(u, axis=0)
            directions = np.zeros((d, idx.size))
            directions[idx] = u
            turned = True
    b = frame @ directions
    stat = holder.row_statistic(_curvature_rows, theta, s.fd_step, b, outer)
    tail = scale_tail(n_public, max(idx.size, 1), z_direction)
    within, rows = tail, float(n_public)
    weighed = None
    if turned and depending is not None:
        tail, within, rows, weighed = sparse_direction_tails(np.asarray(depending, dtype=float)[idx], count_sd,
                                                             turned_groups, n_public, tail, b.shape[1],
                                                             z_direction)
    t, at_floor = private_quantiles(rng_noise, RowColumns(holder, stat, 0, b.shape[1]), tail=tail,
                                    n_public=n_public, rounds=s.quantile_rounds,
                                    noise_multiplier=z_direction, ledger=ledger, what="direction count",
                                    weighed=weighed)
    del stat
    if not turned:
        # No ridge: keep the initial scale.  Averaging in this second estimate of the same axes
        # cost more than it gave (Poisson GLM, n = 1e3, eps = 4: rms 4.3 against 2.5 sds).
        return frame, turned
    c = rows * t / stats.chi2.ppf(1.0 - within, 1)
    with np.errstate(all="ignore"):
        stretch = np.where(at_floor | ~np.isfinite(c) | (c <= 0.0), 1.0, 1.0 / np.sqrt(c))
    stretch = np.clip(stretch, 1e-6, 1e6)
    # A coordinate in no ridge keeps its initial scale: that estimate counted the rows depending
    # on it first, this one takes its tail of all n rows and finds ~0 for a coordinate few rows
    # touch (an ordered logit's top cut point: stretched 1,350-fold, the search 240 units off).
    stretch = np.where(ridged, stretch, 1.0)
    # ... nor one the release reads as the indefinite rows of a far start (INDEFINITE_STRETCH;
    # turned: some group was ridged, so ``ridges`` exists)
    indefinite = ridged & (ridges.eigenvalues < -ridges.noise_norm) & (stretch > INDEFINITE_STRETCH)
    stretch = np.where(indefinite, 1.0, stretch)
    out = frame.copy()
    out[:, idx] = b * stretch
    return out, turned


class InitialScale(NamedTuple):
    """What :func:`initial_scale_release` returns: the scales and the released counts they came from."""

    scale: np.ndarray
    """Local sd per direction (1, or the widest measured, where none was found)."""
    at_floor: np.ndarray
    """Directions with no scale found (bool)."""
    depending: np.ndarray
    """The released count of rows whose curvature along each direction is above the range's floor."""
    count_sd: float
    """Those counts' noise sd (``z sqrt(directions)``)."""
    threshold: np.ndarray
    """The released upper quantile of the depending rows' curvatures along each direction (after
    :func:`elements_within_group`)."""


def _initial_scale(holder: Any, theta: np.ndarray, n_public: int, s: AdaptationSettings, z: float,
                   rng_noise: np.random.Generator, ledger: Ledger, what: str,
                   sparse_rows: bool = False,
                   groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`initial_scale_release`'s scale and floor mask (the same releases)."""
    out = initial_scale_release(holder, theta, n_public, s, z, rng_noise, ledger, what, sparse_rows, groups)
    return out.scale, out.at_floor


def initial_scale_release(holder: Any, theta: np.ndarray, n_public: int, s: AdaptationSettings, z: float,
                          rng_noise: np.random.Generator, ledger: Ledger, what: str,
                          sparse_rows: bool = False,
                          groups: np.ndarray | None = None,
                          elements: np.ndarray | None = None) -> InitialScale:
    """The local sd of every coordinate at ``theta`` from a private upper quantile of the per-row
    curvatures (step 1 of :func:`private_mode`), and the coordinates no significant number of rows
    depends on (their scale is 1).

    The first of ``s.quantile_rounds`` count releases counts, per coordinate,
    the rows ``m_j`` whose curvature is above the search range's floor (the
    rows that depend on it); the others search the quantile among those rows:
    a fraction ``SCALE_TAIL`` of them, at least 3.7 count-noise sds of rows
    (:func:`scale_tail`'s reason), at most half of them; where that target is
    within :data:`WEIGHED_GAP_SDS` noise sds of the count, by probabilistic
    bisection (one count read on the wrong side sent a halving search
    decades off).  A tail taken of all
    ``n`` rows instead finds ~0 for a coordinate that fewer rows depend on
    than the tail (a binary predictor at 40 % against the tail of 0.5 the
    count noise forces at n = 1e3, epsilon = 1): a frame 1e4 times too wide.
    The frame still divides by all ``n`` rows (as if every row depended on
    the coordinate), so for a sparse one it errs narrow, the safe side.  A
    coordinate whose count of depending rows is within
    :data:`DEPENDING_SDS` noise sds of 0 (or whose search ends at the
    bottom of its range) is at the floor: no scale was found, and it gets 1
    in the model's units but no more than the widest scale measured (the
    narrow side: steps short, and an unresolved direction leaves the search
    unsettled, which warns).  Scale 1 was 13 times the posterior sd of the
    gamma GLM's binary predictor (one round then moved it 4,500 posterior
    sds), 12 times an ordered logit's top cut point's, and 7-9 times the
    county intercepts' of ``radon`` (46 rows each against a count noise sd
    of 82), whose first rounds then sent its hierarchical scale to 1e-20 or
    beyond.  The cap first held only coordinates whose count was beyond 2
    noise sds (rows surely depend on them; 24 runs each at 1,000 rows,
    epsilon = 1, median (max) worst error: gamma GLM 31 (1,250) -> 12 (153),
    ordered logit 7.2 (12.5) -> 5.2 (9.8), ``roaches`` 15 (129) -> 14 (68));
    a count within its noise of that says as little about the scale, and
    every coordinate at the floor is held now (docs/adaptation.md §3, "A
    coordinate with no scale found"): ``radon`` at 1,000 rows, epsilon = 4,
    median 1.2e10 -> 23 sds, the gamma GLM at 500 rows, epsilon = 1, 79
    (4,600) -> 59 (373).  Models without a coordinate at the floor are draw
    for draw the same.  The cap
    at half is half of ``m_j - DEPENDING_LOWER_SDS`` noise sds, not of the
    released ``m_j``: a count high by noise put the target beyond the rows
    really there, and the search then found a threshold among the rows that
    do not depend on the coordinate (curvature ~0; a frame up to the scale's
    clip, 1e3, and in an ordered logistic regression a first step of 1e6
    along its top cut point's log increment).

    With ``groups`` (``(d, G)``, :func:`~stan_dp.adaptation.groups.group_directions`)
    the same releases cover ``d + G`` directions, the coordinates and then the columns of
    ``groups`` (the curvature along each column, its own count and quantile): the results have
    ``d + G`` entries.

    ``elements`` (boolean, ``(d,)``, public: read from the program) marks the elements of declared
    groups (:func:`~stan_dp.adaptation.groups.group_locations`): with ``sparse_rows`` each of them
    takes the upper bound on its depending rows wherever that is below ``n``, not only below
    :data:`SPARSE_FRACTION` of it (:data:`SPARSE_FRACTION` says why, and why other coordinates
    keep the gate).
    """
    # Per-row values are computed and kept where the rows live (in this
    # process, or on the workers of a sharded model); only counts and clipped
    # sums of them come back, through the mechanisms of releases.py.
    directions = None   # the axes (_curvature_rows' default), then any groups' directions
    if groups is not None and np.shape(groups)[1]:
        directions = np.hstack([np.eye(theta.size), np.asarray(groups, dtype=float)])
    d = theta.size if directions is None else directions.shape[1]
    curv_stat = holder.row_statistic(_curvature_rows, theta, s.initial_fd_step, directions,
                                     bool(flat_likelihood(holder)))
    cols = RowColumns(holder, curv_stat, 0, d)
    depending = noisy_counts(rng_noise, cols, np.full(d, 2.0 ** LOG2_RANGE[0]), z, ledger,
                             f"{what}, rows depending")
    # ---- post-processing of the released counts ----
    count_sd = z * math.sqrt(d)
    target, tail = _target_among_depending(depending, count_sd, n_public, d, z)
    weighed = depending - target < WEIGHED_GAP_SDS * count_sd
    t, at_floor = private_quantiles(rng_noise, cols, tail=target / n_public, n_public=n_public,
                                    rounds=s.quantile_rounds - 1, noise_multiplier=z, ledger=ledger,
                                    what=what, weighed=weighed)
    del curv_stat, cols  # the rows' statistic is dropped where it lives
    at_floor = at_floor | (depending < DEPENDING_SDS * count_sd)
    if groups is not None and np.shape(groups)[1]:
        t, at_floor = elements_within_group(t, at_floor, tail, weighed, depending >= DEPENDING_SDS * count_sd,
                                            np.asarray(groups) != 0)
    # t is an upper quantile of the depending rows' curvatures; their mean is about
    # t / chi2_1.ppf(1 - tail) for GLM rows (w x^2 with x^2 ~ chi2_1).  The frame takes it over all
    # n rows, as if every row depended on the coordinate: for one that only m_j rows depend on it
    # errs narrow by sqrt(m_j / n) (safe: steps short), where m_j would make a point mass (a binary
    # predictor, curvature 1 on its rows) 1.65 times too wide (tried: 3 of 24 seeds of a regression
    # with a 40 % binary predictor ended 60-375 posterior sds off at n = 1059, epsilon = 4, against
    # at most 7.9 before; with n, 2 of 64 beyond 20, as before).  With ``sparse_rows`` (the Newton
    # rounds' scale) a coordinate that surely few rows depend on takes an upper bound on them
    # instead (:data:`SPARSE_FRACTION`)
    rows = np.full(d, float(n_public))
    if sparse_rows:
        upper = depending + DEPENDING_LOWER_SDS * count_sd   # above the depending rows but 2.3 % of the time
        sparse = upper <= SPARSE_FRACTION * n_public
        if elements is not None:   # a group's element depends on its group's rows alone
            k = np.size(elements)
            sparse[:k] |= np.asarray(elements, dtype=bool) & (upper[:k] < n_public)
        rows = np.where(sparse, np.maximum(upper, 1.0), rows)
    scale = 1.0 / np.sqrt(rows * t / stats.chi2.ppf(1.0 - tail, 1))
    out = np.where(at_floor | ~np.isfinite(scale), 1.0, np.clip(scale, 1e-12, 1e3))
    return InitialScale(_held_to_widest_measured(out, at_floor, ~at_floor & np.isfinite(scale)), at_floor,
                        np.asarray(depending, dtype=float), count_sd, np.asarray(t, dtype=float))


ELEMENT_THRESHOLD_OCTAVES = 1.0
"""How far (octaves of the curvature quantile) a group element's own threshold may lie beyond the
band its group's direction sets before :func:`elements_within_group` replaces it."""


def elements_within_group(t: np.ndarray, at_floor: np.ndarray, tail: np.ndarray, weighed: np.ndarray,
                          depended: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The initial scale's thresholds with each declared group's weighed elements held to the band
    their group's direction sets (post-processing of released values).

    Parameters
    ----------
    t : ndarray, shape (d + G,)
        Released curvature quantiles: the ``d`` coordinates, then the ``G`` groups' directions.
    at_floor : ndarray of bool, shape (d + G,)
        No scale found (the search ended at the bottom of its range, or too few rows depend).
    tail : ndarray, shape (d + G,)
        Each quantile's fraction of the rows depending on its direction.
    weighed : ndarray of bool, shape (d + G,)
        Searched by probabilistic bisection (the target within :data:`WEIGHED_GAP_SDS`
        count-noise sds of the depending count).
    depended : ndarray of bool, shape (d + G,)
        The released count of depending rows is beyond :data:`DEPENDING_SDS` noise sds.
    members : ndarray of bool, shape (d, G)
        Column ``g``: the coordinates on group ``g``'s direction (its elements and location,
        :func:`~stan_dp.adaptation.groups.group_directions`).

    Returns
    -------
    t, at_floor : ndarray
        ``t`` with every weighed coordinate of a group whose own direction has a scale (and was
        not weighed itself) replaced
        where it lies beyond ``[t_g min(r, 1), t_g max(r, 1)]`` widened by
        :data:`ELEMENT_THRESHOLD_OCTAVES` each side, ``t_g`` the group direction's quantile and
        ``r = chi2_1(1 - tail_j) / chi2_1(1 - tail_g)`` (the element's quantile is of a larger
        share of its rows: ``t_g`` is what rows of equal curvature give, ``r t_g`` what
        ``chi2_1``-shaped rows, GLM curvatures ``w x^2``, give).  Only coordinates the rows surely
        depend on (``depended``) are held; a search of one that ended at the bottom of its range
        (a count read low) is outside the band too.  A replaced threshold takes the median of its
        group's held coordinates within the band (``t_g sqrt(r)`` where none is), and is no
        longer at the floor.

    Why: a county of ``radon`` at 3,000 rows, epsilon = 16 has ~150 rows of equal curvature
    ``1 / sigma_y^2`` against a count-noise sd of 26.7, and its search's target is at most half of
    its surely-depending rows, ~24, within one noise sd of the 0 rows above any threshold past
    that curvature.  Every reading up there is then wrong one time in five, and 11 readings over
    the 120 octaves of the range do not overcome it: over 24 runs, 37 of the 474 counties
    searched so came out more than an octave above the group's quantile, 17 of them 3-40 octaves
    (a frame that many half-octaves narrow: one county at ``2e-5`` of its posterior sd, which the
    pool's frame, growing at most :data:`~stan_dp.adaptation.pooling.POOL_FRAME_GROWTH` a round,
    never recovered; the run ended 15 sds off).  The group's direction is searched among all of
    its rows (2,966), far from its noise; its elements' rows have the same form (the program
    states them exchangeable), so their quantiles lie within the band but by noise (416 of the
    474 within 0.3 octaves of the group's).
    """
    t, at_floor = np.array(t, dtype=float), np.array(at_floor, dtype=bool)
    d, groups = members.shape
    for g in range(groups):
        col = d + g
        if at_floor[col] or weighed[col] or not (math.isfinite(t[col]) and t[col] > 0.0):
            continue   # the group's own quantile is no surer than its elements'
        own = np.flatnonzero(members[:, g] & weighed[:d] & depended[:d])
        if not own.size:
            continue
        r = stats.chi2.ppf(1.0 - tail[own], 1) / stats.chi2.ppf(1.0 - tail[col], 1)
        widen = 2.0 ** ELEMENT_THRESHOLD_OCTAVES
        low, high = t[col] * np.minimum(r, 1.0) / widen, t[col] * np.maximum(r, 1.0) * widen
        inside = ~at_floor[own] & (t[own] >= low) & (t[own] <= high)
        if inside.all():
            continue
        fill = (float(np.exp(np.median(np.log(t[own][inside])))) if inside.any()
                else t[col] * float(np.exp(np.median(0.5 * np.log(r)))))
        t[own[~inside]] = fill
        at_floor[own[~inside]] = False
    return t, at_floor


def _held_to_widest_measured(scale: np.ndarray, at_floor: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """``scale`` with every coordinate at the floor (no scale found) no wider than the widest
    coordinate ``measured`` (:func:`_initial_scale`: the narrow side, steps short, and an unresolved
    direction leaves the search unsettled, which warns); unchanged where none was measured."""
    if not (at_floor.any() and measured.any()):
        return scale
    return np.where(at_floor, np.minimum(scale, float(np.max(scale[measured]))), scale)
