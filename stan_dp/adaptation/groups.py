"""Centred hierarchical groups: the direction that moves a vector of group effects and its mean
together, for the private search (public: read from the program, never the data).

For ``a ~ normal(mu_a, sigma_a)`` with ``y ~ normal(a[g] + ..., sigma)`` (``radon``, the canonical
Stan varying intercept), each ``a_j`` depends on its own group's rows only, a county's 50 of 1,000,
too few for a private count or vote to see, while moving every ``a_j`` and ``mu_a`` by the same
amount leaves the hierarchical statement's value unchanged and moves every row: its curvature,
gradient median and vote are an intercept's.  The model declares these groups
(:attr:`stan_dp.model.ZeroRowPart.hierarchical_coordinates`, from
:func:`stan_dp.stan_source.hierarchical_locations`); here they become

* :func:`group_directions`, the far phase's extra directions (:mod:`stan_dp.adaptation.far`);
* :func:`grouped_frame`, the Newton rounds' initial frame with the group's direction in place of
  its location's axis, where the group's own elements are too sparse to be scaled
  (:mod:`stan_dp.adaptation.newton`);
* :func:`hyperparameter_scale`, the initial scale of a group's location and scale, which no row
  depends on, from the exact prior where every element has a scale of its own;
* :func:`pooled_mode_with_expected_hyperparameters`, in every pooled Newton round: the group's
  location and scale at the mode of the expected prior given the pooled elements (below);
* :func:`element_axes_widened`, where the search ends unsettled: the elements' axes of the final
  pool's frame widened to the curvature their own diagonal entries read;
* :func:`hyperparameters_at_expected_mode`, then: the group's location and scale at the mode of
  the exact prior averaged over the elements' Gaussian approximation
  (:class:`ExpectedGroupPrior`, one EM step).

A vector of fixed effects per group, ``y ~ normal(mu[g] + b * x, sigma)`` without a hierarchical
statement (:attr:`stan_dp.model.ZeroRowPart.index_groups`: indexed by each row's group), has the
same sparse elements and the same intercept-like common level, but no location: its direction is
its elements alone (:data:`NO_LOCATION`), used by the far phase and the initial scale (and
:func:`floor_elements_scaled`), and no frame column is replaced for it.

All are post-processing of the program and of released values; a density that declares no
groups (a NumPy density, a model without such a vector) gets none, and the search is then the
same release for release (docs/adaptation.md §3, "Far phase" step 6, "A vector of group
intercepts without a hierarchical prior", and "A group's frame").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import optimize, stats

from stan_dp.adaptation.curvature import _step_eigen, prior_neg_hessian, reported_covariance
from stan_dp.adaptation.initial_frame import DEPENDING_LOWER_SDS
from stan_dp.adaptation.pooling import _exact_prior_mode, _Pooled, axis_noise_sds
from stan_dp.density import prior_gradient

__all__ = ["NO_LOCATION", "ExpectedGroupPrior", "element_axes_widened", "group_directions",
           "group_locations", "grouped_frame", "hyperparameter_scale", "hyperparameters_at_expected_mode",
           "pooled_mode_with_expected_hyperparameters",
           "ridge_curvature_from_prior", "ridges_at_prior_mode", "rowless_hyperparameters"]


NO_LOCATION = -1
"""The location index :func:`group_locations` gives a group of fixed effects (no location parameter)."""


def group_locations(density: Any, d: int) -> list[tuple[np.ndarray, int]]:
    """The density's declared groups (``hierarchical_coordinates``) as ``(mask of the group's
    elements, location index)`` pairs, each checked (indices within ``d``, at least two distinct
    elements, the location not among them); ``[]`` where it declares none.

    Then the groups of ``index_group_coordinates`` (a vector indexed by each row's group without a
    hierarchical statement, :attr:`stan_dp.model.ZeroRowPart.index_groups`), each with location
    ``NO_LOCATION``: its direction moves its elements alone, and no frame column is replaced
    (:func:`grouped_frame`).  A vector of fixed effects per group is as sparse as a centred group's
    elements, and its common level is an intercept every row depends on: a regression with six
    group intercepts of 400 to 20 of 1,000 rows and a centred covariate (outcomes about 20, flat
    priors, epsilon = 16) ended 3.0-383 posterior sds off without the direction (the far phase
    could not move the intercepts, ``sigma`` took up the residuals, and the sparse intercepts'
    frames stayed 3-12 times too wide), 0.43-1.2 with it (docs/adaptation.md §3, "A vector of
    group intercepts without a hierarchical prior")."""
    out = []
    for members, location in getattr(density, "hierarchical_coordinates", None) or ():
        mask, loc = _members_mask(members, d), int(location)
        if mask is not None and 0 <= loc < d and not mask[loc]:
            out.append((mask, loc))
    taken = np.any([mask for mask, _ in out], axis=0) if out else np.zeros(d, dtype=bool)
    for members in getattr(density, "index_group_coordinates", None) or ():
        mask = _members_mask(members, d)
        if mask is not None and not (mask & taken).any():
            out.append((mask, NO_LOCATION))
    return out


def _members_mask(members: Any, d: int) -> np.ndarray | None:
    """A group's elements as a mask of the ``d`` coordinates, or None unless they are at least two,
    distinct and within ``d``."""
    idx = np.asarray(members, dtype=int)
    if not (idx.size >= 2 and np.all((idx >= 0) & (idx < d)) and np.unique(idx).size == idx.size):
        return None
    mask = np.zeros(d, dtype=bool)
    mask[idx] = True
    return mask


def group_directions(groups: list[tuple[np.ndarray, int]], d: int) -> np.ndarray:
    """One column per group of :func:`group_locations`, shape ``(d, G)``: 1 on the group's
    elements and on its location (if it has one), 0 elsewhere (``G = 0`` where there is none)."""
    cols = [(mask | (np.arange(d) == loc)).astype(float) for mask, loc in groups]
    return np.column_stack(cols) if cols else np.zeros((d, 0))


def grouped_frame(frame: np.ndarray, groups: list[tuple[np.ndarray, int]], group_scale: np.ndarray,
                  group_at_floor: np.ndarray, at_floor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The initial frame with each group's direction, scaled, in place of its location's axis.

    Parameters
    ----------
    frame : ndarray, shape (d, d)
        The initial frame (its columns the directions the rounds step and release along).
    groups : list
        :func:`group_locations`.
    group_scale, group_at_floor : ndarray, shape (G,)
        The released scale along each group's direction (the initial scale's extra columns,
        :func:`~stan_dp.adaptation.initial_frame._initial_scale` with ``groups``) and whether it
        is at the floor (no scale found).
    at_floor : ndarray of bool, shape (d,)
        Which coordinates' own scales are at the floor.

    Returns
    -------
    frame : ndarray
        ``frame`` with column ``l`` (the location's) replaced by ``u s_u`` (``u`` the group's
        direction, ``s_u`` its released scale) for each group whose scale was found, some of whose
        elements' scales were not, and whose location's column is still its own axis.  The
        columns still span the space (``u`` has the location's axis in it, and the elements'
        axes are kept).  Post-processing of released values.
    grouped : ndarray of bool, shape (d,)
        The columns replaced: the rows depend on them (the orientation that follows,
        :func:`~stan_dp.adaptation.initial_frame._oriented_frame`, counts them among the
        directions it may turn).

    Why: an element at the floor keeps the widest measured scale, a placeholder, and its
    curvature is below the rounds' release noise, so they step along it at the floor's pace;
    the group's common level, which all of its rows inform, then crawls too (``radon``, 1,000
    rows, epsilon = 16: 0.1-0.3 posterior sds a round, median 12.4 sds off after the far phase's
    group move).  Along ``u`` the released gradient sums every row's pull at an intercept's
    scale, and the step moves the level in one piece.  Where every element has its own scale
    (3,000 rows, epsilon = 16) the frame is left as it was: there the rounds resolve the
    elements, and the group's column (which mixes the location's noise into every element) cost
    more than it gave (geometric mean 1.114 over the 24 runs without this condition).
    """
    out = np.array(frame, dtype=float, copy=True)
    d = out.shape[0]
    grouped = np.zeros(d, dtype=bool)
    for g, (members, loc) in enumerate(groups):
        if loc == NO_LOCATION:   # no column of its own to replace
            continue
        axis = out[:, loc]
        own_axis = np.count_nonzero(axis) == 1 and axis[loc] != 0.0
        scaled = not group_at_floor[g] and np.isfinite(group_scale[g])
        if not (scaled and own_axis and at_floor[members].any()):
            continue
        out[:, loc] = (members | (np.arange(d) == loc)).astype(float) * float(group_scale[g])
        grouped[loc] = True
    return out, grouped


def floor_elements_scaled(scale: np.ndarray, at_floor: np.ndarray, groups: list[tuple[np.ndarray, int]],
                          group_threshold: np.ndarray, group_at_floor: np.ndarray, depending: np.ndarray,
                          count_sd: float) -> np.ndarray:
    """``scale`` with each declared group's elements at the floor scaled from their group's direction
    (post-processing of released values).

    An element whose released count of depending rows is within its noise (or whose search found
    no scale) would keep a placeholder, the widest measured scale, which is not a scale of its own.
    Its rows have the form of its siblings' (the program states them exchangeable), and the
    group's direction, searched among all of the group's rows, has a released upper quantile
    ``t_g`` of their curvatures: the element takes ``1 / sqrt(rows_j t_g)``, ``rows_j`` the larger
    of an upper bound on its own depending rows (its count plus
    :data:`~stan_dp.adaptation.initial_frame.DEPENDING_LOWER_SDS` noise sds) and its share of the
    group's (``m_g / J``).  Both err narrow: ``t_g`` is an upper quantile (the rows' mean
    curvature equals it where every row has the same curvature, and is 2.7 times less for GLM
    curvatures ``w x^2``, for which the group's own scale divides by ``chi2_1(0.9)``), and the
    rows are over-counted where the count is low by noise.  The element stays at the floor (the
    rows are not known to depend on it): only its scale changes.

    Why: at 1,000 rows a county of ``radon`` has ~50 rows against a count-noise sd of ~27, and
    most counties kept one placeholder scale whatever their rows.  Session 59 tried the group's
    scale times ``sqrt(J)`` (about the posterior sd: too wide, 1.254 over 24 runs); this one, on
    the narrow side, took ``radon`` at 1,000 rows, epsilon = 16 from a median of 2.19 to 1.60
    posterior sds (docs/adaptation.md §3, "Elements too few rows depend on to count").

    Parameters
    ----------
    scale, at_floor : ndarray, shape (d,)
        The initial scale and floor of every coordinate.
    groups : list
        :func:`group_locations`.
    group_threshold, group_at_floor : ndarray, shape (G,)
        The released curvature quantile along each group's direction
        (:attr:`~stan_dp.adaptation.initial_frame.InitialScale.threshold`) and whether its scale is
        at the floor.
    depending : ndarray, shape (d + G,)
        Released counts of depending rows: the coordinates, then the groups' directions.
    count_sd : float
        The counts' noise sd.
    """
    out = np.array(scale, dtype=float, copy=True)
    d = out.size
    for g, (members, _) in enumerate(groups):
        t_g = float(group_threshold[g])
        if group_at_floor[g] or not (math.isfinite(t_g) and t_g > 0.0):
            continue
        low = members & at_floor
        if not low.any():
            continue
        share = max(float(depending[d + g]), 1.0) / int(np.count_nonzero(members))
        rows_j = np.maximum(depending[:d][low] + DEPENDING_LOWER_SDS * count_sd, share)
        out[low] = 1.0 / np.sqrt(rows_j * t_g)
    return out


def scale_coordinate(density: Any, u: int, value: float) -> tuple[float, float]:
    """``(log sigma, d log sigma / du)`` of a group's scale at the value ``value`` of its
    unconstrained coordinate ``u`` (public: the program).

    ``u = log sigma`` (``real<lower=0> sigma``): ``(value, 1)``.  ``u = logit(sigma / U)``
    (``real<lower=0, upper=U> sigma``, ``U`` from the density's ``hierarchical_scale_uppers``):
    ``log sigma = log U - log(1 + e^-u)`` and its derivative ``logistic(-u) = 1 - sigma / U``, so
    that near 0 the coordinate is ``log sigma - log U`` and at the start (``sigma = U / 2``) it
    moves ``log sigma`` half as fast."""
    upper = (getattr(density, "hierarchical_scale_uppers", None) or {}).get(int(u))
    if upper is None:
        return float(value), 1.0
    return math.log(upper) - float(np.logaddexp(0.0, -value)), float(1.0 / (1.0 + math.exp(min(value, 700.0))))


def _declared_hyperparameters(density: Any, d: int,
                              zero_mean: bool = False) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The density's ``hierarchical_hyperparameters`` (with ``zero_mean``, its
    ``zero_mean_hyperparameters`` too: groups without a location) as integer arrays ``(members,
    location, log_scale)``, each group checked (at least two elements, every index within ``d``);
    ``[]`` where it declares none."""
    out = []
    declared = list(getattr(density, "hierarchical_hyperparameters", None) or ())
    if zero_mean:
        declared += list(getattr(density, "zero_mean_hyperparameters", None) or ())
    for members, location, log_scale in declared:
        members, location, log_scale = (np.asarray(v, dtype=int) for v in (members, location, log_scale))
        coordinates = np.concatenate([members, location, log_scale])
        if members.size >= 2 and np.all((coordinates >= 0) & (coordinates < d)):
            out.append((members, location, log_scale))
    return out


def rowless_hyperparameters(density: Any, d: int, data_coordinates: np.ndarray,
                            zero_mean: bool = False) -> np.ndarray:
    """Which coordinates are a declared group's location or ``log sigma`` that no row depends on.

    Parameters
    ----------
    density : RowDensity
        Declares ``hierarchical_hyperparameters`` (read from the program); none declared: all False.
    d : int
        Dimension.
    data_coordinates : ndarray of bool
        The coordinates rows depend on (the initial scale's released counts); a location or scale
        among them is left out.
    zero_mean : bool, default False
        The zero-mean groups' scales too (``zero_mean_hyperparameters``).

    Returns
    -------
    ndarray of bool
        The mask.  Public: the program and released verdicts.
    """
    rowless = np.zeros(d, dtype=bool)
    for _, location, log_scale in _declared_hyperparameters(density, d, zero_mean):
        rowless[location] = True
        rowless[log_scale] = True
    return rowless & ~np.asarray(data_coordinates, dtype=bool)


def hyperparameter_scale(density: Any, theta: np.ndarray, scale: np.ndarray, at_floor: np.ndarray,
                         h: float) -> np.ndarray:
    """``scale`` with a group's location and scale that no row depends on at the prior's scale.

    Parameters
    ----------
    density : RowDensity
        Declares ``hierarchical_hyperparameters``: per centred statement, its elements', location's
        and scale's coordinates (:attr:`stan_dp.model.ZeroRowPart.hierarchical_hyperparameters`,
        read from the program; the scale's for a ``normal`` statement on ``log sigma`` only).
        None declared: ``scale`` itself is returned.
    theta : ndarray
        Where the Newton rounds start (post-processing of released values).
    scale, at_floor : ndarray
        The initial scale per coordinate, and whether none was found (the released count of rows
        depending on the coordinate within its noise of 0).
    h : float
        Finite-difference step for the prior's curvature.

    Returns
    -------
    ndarray
        ``scale`` where nothing applies; for each group none of whose elements is at the floor:

        * its location, if at the floor, at the prior's conditional sd ``1 / sqrt(P_ll)`` (``P``
          the exact prior's negative Hessian at ``theta``; for ``a ~ normal(mu, sigma)``,
          ``J / sigma^2`` plus ``mu``'s own prior), at most 1 (the floor's unit scale);
        * its scale's ``log sigma``, if at the floor, at ``1 / sqrt(2 J)``: the Fisher information
          of ``log sigma`` in ``J`` draws of ``normal(mu, sigma)`` is ``2 J``, whatever ``sigma``,
          so this is the conditional sd of ``log sigma`` given elements drawn from the group's own
          law (the prior on ``sigma`` only narrows it); a scale declared with an upper bound, on
          ``logit(sigma / U)``, at that divided by ``d log sigma / du`` (:func:`scale_coordinate`).

    Why: a coordinate at the floor is held to the widest measured scale because rows may depend on
    it unseen (a county's intercept under the count noise).  A group's location and scale are
    different: no row depends on them, their curvature is the prior's, exact and public, and the
    rounds' released curvature along them is pure noise, floored at ``min(1, tau)``, so a frame
    too narrow there never widens.  In ``radon-slopes`` at 3,000 rows, epsilon = 16, those four
    frames were 5-14 times narrower than their posterior sds, 20-23 of the 25 released eigenvalues
    sat at the floor in every round, 17 of 24 runs never settled, and the four were the worst
    coordinates (median 2.0-3.3 sds).  For ``log sigma`` the observed curvature ``2 S / sigma^2``
    (``S = sum_j (a_j - mu)^2``) is not used: where the far phase moved every element by the
    same amount ``S`` is about 0, the prior's scale there is the cap, 1, five times the posterior
    sd with 20 groups, and the rounds walked it down the funnel's neck (``hierarchical-centred``
    0.39 -> 4.96 sds; docs/adaptation.md §3, "A group's location and scale start at the prior's
    scale").  Only where every element has a scale of its own: where some are at the floor
    (``radon``, 50 rows a county at 1,000 rows) the elements stay at one level for many rounds.
    Public: the program, released verdicts and the prior at a released point.
    """
    d = theta.size
    at_floor = np.asarray(at_floor, dtype=bool)
    target = np.full(d, np.nan)              # log sigma's Fisher scale
    locations = np.zeros(d, dtype=bool)      # the locations, at the prior's conditional sd
    for members, location, log_scale in _declared_hyperparameters(density, d):
        if at_floor[members].any():
            continue
        locations[location] = True
        for u in log_scale:   # the Fisher scale of log sigma, in the coordinate's own units
            target[u] = 1.0 / (math.sqrt(2.0 * members.size) * scale_coordinate(density, u, theta[u])[1])
    held = at_floor & (locations | ~np.isnan(target))
    if not held.any():
        return scale
    if np.any(held & locations):
        p = np.diag(prior_neg_hessian(density, theta, np.eye(d), h))
        with np.errstate(divide="ignore", invalid="ignore"):
            prior_sd = np.where(p > 0.0, 1.0 / np.sqrt(p), np.nan)
        target = np.where(locations, prior_sd, target)
    use = held & np.isfinite(target)
    return np.where(use, np.minimum(target, 1.0), scale)


class ExpectedGroupPrior:
    """A density's log prior averaged over a Gaussian approximation of its groups' elements.

    For a statement ``a ~ normal(mu, sigma)`` on ``J`` elements and ``q(a) = N(a_hat, C)``,
    ``E_q log N(a_j | mu, sigma) = log N(a_hat_j | mu, sigma) - C_jj / (2 sigma^2)`` exactly, so
    the expected log prior is the exact log prior at ``theta`` (elements at ``a_hat``) less
    ``V / (2 sigma^2)`` per group, ``V = sum_j C_jj`` the elements' summed variance and
    ``sigma`` the scale at its unconstrained coordinate ``u`` (``e^u``, or ``U logistic(u)`` for a
    scale declared with the upper bound ``U``: :func:`scale_coordinate`).  Maximising it over the location and
    ``u`` is the M-step of EM for the group's hyperparameters (Dempster, Laird and Rubin 1977).
    Exposes ``log_prior`` and ``log_prior_grad`` (the protocol of
    :func:`stan_dp.density.prior_gradient`); data-independent.

    Parameters
    ----------
    density : object
        The model (its ``log_prior`` / ``log_prior_grad``).
    spreads : sequence of (int, float)
        Per group, its scale's coordinate ``u`` and ``V``.
    """

    def __init__(self, density: Any, spreads: list[tuple[int, float]]) -> None:
        self.density = density
        self.spreads = [(int(u), float(v)) for u, v in spreads]

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """The expected log prior at ``theta`` and its gradient."""
        value, grad = prior_gradient(self.density, theta)
        grad = np.array(grad, dtype=float)
        for u, v in self.spreads:
            log_sigma, slope = scale_coordinate(self.density, u, float(theta[u]))
            w = v * math.exp(-2.0 * log_sigma)
            value -= 0.5 * w
            grad[u] += w * slope
        return value, grad

    def log_prior(self, theta: np.ndarray) -> float:
        """The expected log prior at ``theta``."""
        return self.log_prior_grad(theta)[0]


def hyperparameters_at_expected_mode(density: Any, pooled: _Pooled, frame: np.ndarray, h: float,
                                     data_coordinates: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An unsettled search's estimate with each group's location and scale at the expected prior's mode.

    Parameters
    ----------
    density : RowDensity
        Declares ``hierarchical_hyperparameters`` and ``zero_mean_hyperparameters`` (read from the
        program; a zero-mean group has no location); none declared: the pool's estimate is
        returned as it is.
    pooled : _Pooled
        The final pool (unresolved: its quadratic model is trusted at its one-step estimates only).
    frame : ndarray
        The frame the pool was taken in.
    h : float
        Finite-difference step for the prior's curvature.
    data_coordinates : ndarray of bool
        The coordinates rows depend on (released verdicts); a location or scale among them is left.

    Returns
    -------
    mode, noise_cov, curvature : ndarray
        As :func:`~stan_dp.adaptation.pooling._exact_prior_mode` with the density replaced by
        :class:`ExpectedGroupPrior` and only the groups' locations and ``log sigma`` held: those
        move to the maximum over them of the exact log prior averaged over ``q = N(mode, C)``,
        ``C = curvature^-1 + noise_cov`` the pool's Gaussian approximation (its posterior
        covariance widened by the privacy noise), the other coordinates fixed; the noise reaches
        the moved ones through the others (``J = -P_SS^-1 P_SR``).

    Why: no row depends on a group's location or scale, so the rounds' releases along them are
    noise and an unsettled search leaves them about where the far phase did (``radon``, 1,000
    rows, epsilon = 16: ``log sigma_a`` 2.9-5.8 sds above the posterior in 23 of 24 runs, the
    worst coordinate in 16).  Their conditional mode at the elements' point estimate (the prior alone,
    ``V = 0``) overshoots to the other side, 0.3-6.3 sds below in 22 of 24 runs: the estimates are
    less spread than the elements (``S`` too small: the funnel's neck), and with every element at
    one level it would send ``sigma`` to 0.  Averaging over the elements' uncertainty adds ``V`` to ``S``: ``radon``
    median worst error 5.08 -> 3.30 sds (24 runs), ``hierarchical-centred`` 3.25 -> 2.40,
    ``radon-slopes`` 4.84 -> 4.65 (docs/adaptation.md §3, "An unsettled search's hyperparameters").
    Post-processing of released values and the public program: no release.
    """
    d = frame.shape[0]
    hyper = rowless_hyperparameters(density, d, data_coordinates, zero_mean=True)
    if not hyper.any():
        return pooled.mode, pooled.noise_cov, pooled.curvature
    prior = _expected_prior(density, pooled.curvature, pooled.noise_cov, hyper)
    mode = bounded_scales_at_expected_mode(prior, pooled.mode)
    return _exact_prior_mode(prior, pooled._replace(mode=mode), frame, h, rowless=hyper, only=hyper)


def pooled_mode_with_expected_hyperparameters(density: Any, pooled: _Pooled, frame: np.ndarray, h: float,
                                              data_coordinates: np.ndarray) -> np.ndarray:
    """A pooled round's estimate with each declared group's location and scale that no row depends
    on at the expected prior's mode given the pooled elements (the mode of
    :func:`hyperparameters_at_expected_mode`: one EM step), or ``pooled.mode`` as it is where the
    pool's curvature or noise, or that mode, is not finite, and where the density declares no group
    whose location or scale no row depends on.

    The Newton rounds take it in every pooled round (:func:`stan_dp.adaptation.newton.private_mode`):
    their one-step estimates divide by eigenvalues floored at the release's noise, which moves a
    coordinate no row depends on only as far as that floor lets it (``glmmre``'s ``sigma_b``, 13
    posterior sds above at the start: 0.3-1 sds a round, 2,000 rows, epsilon = 16); the next round
    is released at the moved point, so the elements answer the new scale through the prior, and
    the next pool reads their spread again (docs/adaptation.md §3, "An expected-prior step in every
    pooled round").  Post-processing of released values and the program.
    """
    if not (np.all(np.isfinite(pooled.curvature)) and np.all(np.isfinite(pooled.noise_cov))):
        return pooled.mode
    mode = hyperparameters_at_expected_mode(density, pooled, frame, h, data_coordinates)[0]
    return mode if np.all(np.isfinite(mode)) else pooled.mode


def _expected_prior(density: Any, curvature: np.ndarray, noise_cov: np.ndarray,
                    hyper: np.ndarray) -> "ExpectedGroupPrior":
    """:class:`ExpectedGroupPrior` of the declared groups whose scale is in ``hyper``, each
    group's ``V`` the summed variance of its elements under ``N(mode, curvature^-1 + noise_cov)``
    (non-finite entries as 0)."""
    with np.errstate(all="ignore"):
        variance = np.diag(np.linalg.pinv(curvature) + noise_cov)
    variance = np.where(np.isfinite(variance), np.maximum(variance, 0.0), 0.0)
    spreads = [(int(u), float(np.sum(variance[members])))
               for members, _, log_scale in _declared_hyperparameters(density, hyper.size, zero_mean=True)
               for u in log_scale if hyper[u]]
    return ExpectedGroupPrior(density, spreads)


def bounded_scales_at_expected_mode(prior: "ExpectedGroupPrior", mode: np.ndarray) -> np.ndarray:
    """``mode`` with each of ``prior``'s group scales declared with an upper bound
    (``hierarchical_scale_uppers``) at its conditional maximum (:func:`_bounded_scale_mode`);
    post-processing of released values and the program."""
    bounded = getattr(prior.density, "hierarchical_scale_uppers", None) or {}
    mode = np.array(mode, dtype=float)
    for u, _ in prior.spreads:
        if u in bounded:
            mode[u] = _bounded_scale_mode(prior, mode, u)
    return mode


def unpooled_bounded_scales(density: Any, mode: np.ndarray, curvature: np.ndarray, noise_cov: np.ndarray,
                            data_coordinates: np.ndarray) -> np.ndarray:
    """A search that pooled fewer than two rounds: ``mode`` (its last one-step estimate, with that
    round's ``curvature`` and ``noise_cov``) with the groups' bounded scales that no row depends on
    at their expected prior's conditional maximum (:func:`bounded_scales_at_expected_mode`); the
    other coordinates as they are.  A scale declared ``real<lower=0, upper=U>`` starts at ``U / 2``,
    decades above a group's spread, and no round moves it (no row depends on it); a log scale
    starts at 1 and is left where the rounds put it, as before.  Where every round stepped back
    (no estimate: an infinite noise) nothing moves: the elements' spread is then unknown, and
    without it the prior's maximum is the funnel's neck.  Post-processing."""
    hyper = rowless_hyperparameters(density, np.size(mode), data_coordinates, zero_mean=True)
    if not hyper.any() or not (np.all(np.isfinite(curvature)) and np.all(np.isfinite(noise_cov))):
        return np.asarray(mode, dtype=float)
    return bounded_scales_at_expected_mode(_expected_prior(density, curvature, noise_cov, hyper), mode)


def _ridge_directions(density: Any, d: int) -> list[np.ndarray]:
    """The directions along which every row's log likelihood is exactly constant, read from the
    program (public; ``flat_directions``, :func:`stan_dp.stan_source.flat_directions`): an
    intercept ridge (``+1`` on ``mu``, ``-1`` on every ``a_j``), a vector read only through
    balanced differences (``1`` on every element), crossed factors (``+1`` on ``a``, ``-1`` on
    ``c``)."""
    return [np.array(v, dtype=float) for v in getattr(density, "flat_directions", None) or ()
            if np.size(v) == d]


def _ridge_basis(density: Any, frame: np.ndarray) -> tuple[np.ndarray, int] | None:
    """The density's ridges in ``frame`` units: ``(basis, k)``, an orthonormal basis of the whole
    space whose first ``k`` columns span ``frame^-1 V`` (``V`` the ridges,
    :func:`_ridge_directions`) and whose others span its complement; None where it declares none."""
    columns = _ridge_directions(density, frame.shape[0])
    if not columns:
        return None
    basis, _ = np.linalg.qr(np.linalg.inv(frame) @ np.column_stack(columns), mode="complete")
    return basis, len(columns)


def _curvature_from_ridge_basis(total: np.ndarray, curvature: np.ndarray, frame: np.ndarray,
                                basis: np.ndarray) -> np.ndarray:
    """``total``, a curvature in ``frame`` units written in ``basis`` (:func:`_ridge_basis`),
    symmetrised and mapped back to ``theta`` space; ``curvature`` (the one it replaces) where it is
    not finite and positive definite."""
    total = 0.5 * (total + total.T)
    if not (np.all(np.isfinite(total)) and np.all(np.linalg.eigvalsh(total) > 0.0)):
        return curvature
    inv_frame = np.linalg.inv(frame)
    out = inv_frame.T @ (basis @ total @ basis.T) @ inv_frame
    return 0.5 * (out + out.T)


def ridge_curvature_from_prior(density: Any, mode: np.ndarray, curvature: np.ndarray, frame: np.ndarray,
                               h: float) -> np.ndarray:
    """``curvature`` with its part along the density's ridges set to the exact prior's.

    Along a ridge ``v`` (``flat_directions``, :func:`_ridge_directions`: ``+1`` on ``mu``, ``-1`` on
    every ``a_j``; ``1`` on every element of a vector read through balanced differences; ``+1`` on
    one crossed factor and ``-1`` on the other) every row's log likelihood is exactly constant, so
    the rows' Hessian maps ``v`` to 0 and the posterior's negative Hessian satisfies ``P v = H_p
    v``, ``H_p`` the log prior's negative Hessian (public: the program, at the released ``mode``).
    In ``frame`` units, with ``W`` an orthonormal basis of the span of ``frame^-1 v`` and ``U`` of
    its complement, the blocks ``P_WW`` and ``P_UW`` become the prior's and ``P_UU`` stays.
    Unchanged where the density declares no ridge, where the prior does not hold the ridges
    (``H_WW`` not positive definite: flat priors on ``mu`` and the effects), or where the result is
    not positive definite.

    Why: the released curvature along ``v`` is noise alone, and the pool's noise floor holds it to
    the frame's scale, far narrower than the prior's ``sigma_a / sqrt(J)``: the replica
    ``ZeroMeanIntercept`` (1,000 rows, 20 groups, epsilon = 16) reported ``mu`` at 0.30-0.51 of its
    posterior sd, noise included.  Only the reported curvature: projecting the ridge off the pooled
    releases moved the pool's frame too and cost the estimate (docs/adaptation.md §3, "A zero-mean
    group's intercept ridge").  Post-processing of released values and the program.
    """
    ridges = _ridge_basis(density, frame)
    if ridges is None:
        return curvature
    basis, k = ridges
    w, u = slice(0, k), slice(k, mode.size)
    prior = basis.T @ prior_neg_hessian(density, mode, frame, h) @ basis
    total = basis.T @ (frame.T @ curvature @ frame) @ basis
    if not (np.all(np.isfinite(prior[:, w])) and np.all(np.linalg.eigvalsh(prior[w, w]) > 0.0)):
        return curvature
    total[w, w] = prior[w, w]
    total[u, w] = prior[u, w]
    total[w, u] = prior[w, u]
    return _curvature_from_ridge_basis(total, curvature, frame, basis)


def ridge_noise_from_prior(density: Any, mode: np.ndarray, noise_cov: np.ndarray, frame: np.ndarray,
                           h: float) -> np.ndarray:
    """``noise_cov``, the privacy noise's covariance of an estimate, carried through the move to the
    log prior's maximum along the density's ridges (:func:`ridges_at_prior_mode`).

    The move maps an estimate ``m`` to ``m + V t*(m)``, ``V`` the ridges' directions
    (:func:`_ridge_directions`) and ``t*`` the solution of ``V' grad log p(m + V t) = 0``.
    Differentiating that condition, ``V' H (dm + V dt) = 0`` with ``H`` the log prior's negative
    Hessian (public: the program, at the released ``mode``; central differences along ``frame``,
    step ``h``), gives ``dt = -(V' H V)^-1 V' H dm``: the moved estimate's noise is ``J noise_cov
    J'`` with ``J = I - V (V' H V)^-1 V' H``.  Along a ridge the estimate's position is then a
    function of its other coordinates, not noise of its own: with the isotropic prior of crossed
    factors (``a[site] + c[year]``, ``a, c ~ normal(0, 10)``) ``J`` removes the ridge's component
    entirely, since the prior's maximum along it does not depend on them.  Exact for a quadratic
    log prior, to first order otherwise.  Unchanged where the density declares no ridge, where
    the prior does not hold the ridges (``V' H V`` not positive definite: flat priors, where the
    move does not happen either) or where the noise is not finite (every round stepped back).

    Why: the reported spread is the curvature's covariance plus ``noise_cov``; the first is the
    prior's along a ridge (:func:`ridge_curvature_from_prior`) and the estimate sits at the prior's
    maximum there, so counting the rounds' noise along it too widened ``cross`` (1,000 rows,
    epsilon = 16) to 1.1-1.24 times the exact sd of ``(sum(a) - sum(c)) / 9``.  Post-processing
    of released values and the program.
    """
    d = np.size(mode)
    columns = _ridge_directions(density, d)
    if not columns or not np.all(np.isfinite(noise_cov)):
        return noise_cov
    v = np.column_stack(columns)
    inv_frame = np.linalg.inv(frame)
    hessian = inv_frame.T @ prior_neg_hessian(density, mode, frame, h) @ inv_frame
    held = v.T @ hessian @ v
    if not (np.all(np.isfinite(held)) and np.all(np.linalg.eigvalsh(0.5 * (held + held.T)) > 0.0)):
        return noise_cov
    jacobian = np.eye(d) - v @ np.linalg.solve(held, v.T @ hessian)
    out = jacobian @ noise_cov @ jacobian.T
    return 0.5 * (out + out.T)


def resolved_off_ridges(density: Any, pooled: Any, frame: np.ndarray) -> bool:
    """Whether the search has settled: its pool (:class:`~stan_dp.adaptation.pooling._Pooled`)
    resolves the curvature in every direction, or, where the density declares ridges
    (:func:`_ridge_directions`), in every direction off them.

    In ``frame`` units, with ``U`` an orthonormal basis of the complement of the span of
    ``frame^-1 V`` (``V`` the ridges), the released data curvature and the prior's, both restricted
    to ``U``, are made positive definite against the pool's noise as the pool's own are
    (:func:`~stan_dp.adaptation.curvature._step_eigen`, threshold ``tau``), and none of the
    eigenvalues may be at the floor ``min(1, tau)``.  As the pool judged itself where the density
    declares no ridge or the pool splits off coordinates no row depends on; False where a ridge's
    prior does not hold it (its final curvature is then not the prior's either).

    Why: along a ridge the rows' curvature is exactly 0, so the released curvature there is noise
    and the pool is never resolved along it, however many rounds agree; yet the estimate there is
    the prior's maximum (:func:`ridges_at_prior_mode`) and its curvature the prior's
    (:func:`ridge_curvature_from_prior`), neither of them read from the pool.  ``cross``
    (``a[site] + c[year]``, 1,000 rows) never settled, and so was reported with the unsettled
    search's warning and through its unpooled path at every epsilon.  Post-processing of released
    values and the program.
    """
    ridges = _ridge_basis(density, frame)
    projected = getattr(pooled, "projected", None)
    if (ridges is None or pooled.resolved or pooled.prior_curvature is None
            or (projected is not None and bool(np.any(projected)))):
        return bool(pooled.resolved)
    basis, k = ridges
    w, u = basis[:, :k], basis[:, k:]
    prior_f = frame.T @ pooled.prior_curvature @ frame
    held = w.T @ prior_f @ w
    if not (np.all(np.isfinite(held)) and np.all(np.linalg.eigvalsh(0.5 * (held + held.T)) > 0.0)):
        return False
    data_u = u.T @ (frame.T @ pooled.data_curvature @ frame) @ u
    _, lam, _ = _step_eigen(0.5 * (data_u + data_u.T), u.T @ prior_f @ u, pooled.tau)
    return bool(np.all(lam > 1.0001 * min(1.0, pooled.tau)))


RIDGE_SCALE_DRAWS = 256
""":func:`ridge_curvature_over_scales` averages over this many points of the reported law (a
scrambled Sobol sequence with a fixed public seed: deterministic post-processing)."""


def ridge_curvature_over_scales(density: Any, mode: np.ndarray, curvature: np.ndarray, frame: np.ndarray,
                                h: float) -> np.ndarray:
    """``curvature`` with its block along the density's ridges the prior's, averaged over the
    reported law of the coordinates it depends on, as a variance is.

    After :func:`ridge_curvature_from_prior` the curvature along a ridge is the prior's at the
    released ``mode``: ``J / sigma_a^2`` along an intercept ridge, at ``sigma_a``'s mode.  The
    posterior's variance along the ridge given ``sigma_a`` is the inverse of that, and marginally
    its mean over ``sigma_a``: ``E[sigma_a^2] / J``, not ``sigma_a_mode^2 / J``.  With ``W`` an
    orthonormal basis (frame units) of the ridges' span, ``P_WW`` becomes ``(E[P_WW(theta)^-1])^-1``
    with ``theta`` drawn from the reported posterior, ``N(mode, curvature^-1)`` (the privacy
    noise, added to the draws apart, is the mode's uncertainty, not the scale's posterior spread;
    :data:`RIDGE_SCALE_DRAWS` quasi-random points; ``P_WW(theta)`` the log prior's
    negative Hessian along ``W`` by central differences, step ``h`` in frame units); ``P_UW`` and
    ``P_UU`` stay.  Where the prior's curvature along the ridges does not depend on any coordinate
    (the fixed scales of ``cross`` and ``bt``) nothing changes; unchanged too where the density
    declares no ridge, where the law is not finite, where some point's ``P_WW`` is not positive
    definite (the prior does not hold the ridge there), or where the result is not positive
    definite.

    Why: ``poishier`` (eight zero-mean groups, 1,000 rows) reported its ``u`` at a median 0.85-0.88
    of NUTS's sds at epsilon = 16 (seeds 1-3): along its ridge the reported variance used
    ``sigma_u``'s mode, and NUTS's ``E[sigma_u^2]`` is 1.22 times ``exp(2 E[log sigma_u])``; with
    the average, 0.91-0.96.  Post-processing of released values and the program, with public
    randomness only.
    """
    ridges = _ridge_basis(density, frame)
    if ridges is None:
        return curvature
    law = reported_covariance(curvature, frame)[0]
    if not (np.all(np.isfinite(law)) and np.all(np.isfinite(mode))):
        return curvature
    lam, q = np.linalg.eigh(0.5 * (law + law.T))
    if not np.all(lam > 0.0):
        return curvature
    basis, k = ridges
    along = frame @ basis[:, :k]   # theta space; unit length in frame units

    def block(theta: np.ndarray) -> np.ndarray:
        out = np.empty((k, k))
        for j in range(k):
            up = prior_gradient(density, theta + h * along[:, j])[1]
            down = prior_gradient(density, theta - h * along[:, j])[1]
            out[:, j] = -(along.T @ (up - down)) / (2.0 * h)
        return 0.5 * (out + out.T)

    at_mode = block(np.asarray(mode, dtype=float))
    sobol = stats.qmc.Sobol(np.size(mode), scramble=True, seed=0).random(RIDGE_SCALE_DRAWS)
    points = mode + stats.norm.ppf(np.clip(sobol, 1e-12, 1.0 - 1e-12)) @ (q * np.sqrt(lam)).T
    inverses = []
    for theta in points:
        b = block(theta)
        if not (np.all(np.isfinite(b)) and np.all(np.linalg.eigvalsh(b) > 0.0)):
            return curvature
        inverses.append(np.linalg.inv(b))
    averaged = np.linalg.inv(np.mean(inverses, axis=0))
    averaged = 0.5 * (averaged + averaged.T)
    if np.allclose(averaged, at_mode, rtol=1e-6, atol=0.0):
        return curvature
    total = basis.T @ (frame.T @ curvature @ frame) @ basis
    total[:k, :k] = averaged
    return _curvature_from_ridge_basis(total, curvature, frame, basis)


RIDGE_SWEEPS = 50
""":func:`ridges_at_prior_mode` sweeps along several ridges in turn at most this many times."""


def ridges_at_prior_mode(density: Any, mode: np.ndarray) -> np.ndarray:
    """``mode`` moved to the log prior's maximum along the density's ridges, the directions along
    which every row's log likelihood is exactly constant (``flat_directions``,
    :func:`_ridge_directions`); unchanged where it declares none.  Besides intercept ridges
    (below): a vector read only through balanced differences (``ability[p1] - ability[p2]``, ``v``
    = 1 on every element) and crossed factors (``a[site] + c[year]``, ``+1`` on ``a``, ``-1`` on
    ``c``).  With several ridges the searches along each are repeated in turn until none moves
    (at most :data:`RIDGE_SWEEPS` sweeps): coordinate ascent along a basis of their span, which
    converges to the maximum there where the log prior is concave on it (normal priors).

    A ridge is a vector of group effects (rstanarm's zero-mean ``a ~ normal(0, sigma_a)``, or fixed
    effects) whose every use in the likelihood is ``mu + a[g]``
    (:func:`stan_dp.stan_source.flat_directions`): along ``v`` (``+1`` on ``mu``,
    ``-1`` on every ``a_j``) every row's log likelihood is exactly constant, so the posterior's
    maximum along ``v`` from ``mode`` is the prior's, ``t* = argmax_t log p(mode + t v)``.  With
    ``mu``'s prior flat that is ``t* = mean(a)`` exactly (``-sum_j (a_j - t)^2 / (2 sigma_a^2)``);
    with ``mu ~ normal(m, s)`` it is shrunk towards ``m`` (the search on one line:
    :func:`_prior_maximum_along`).

    Why: the rows' released gradient along ``v`` is pure noise (its exact value is 0), and the
    prior's curvature along it, ``J / sigma_a^2``, is all that holds it, so the search's estimate
    drifts along ``v``: ``radonre`` (``mu + a[county]``, 1,000 rows, epsilon = 16, seeds 1-4) ended
    with ``mu`` the worst coordinate, 8.6-12.4 posterior sds off; with the move (before the
    hyperparameters' step, so that the elements' spread no longer holds ``J mean(a)^2``, and after
    it) 1.4-2.0 (docs/adaptation.md §3, "A zero-mean group's intercept ridge").  Post-processing of
    released values and the program: no release.
    """
    mode = np.array(mode, dtype=float)
    directions = _ridge_directions(density, mode.size)
    for _ in range(RIDGE_SWEEPS if len(directions) > 1 else 1):
        start = mode.copy()
        for v in directions:
            mode = _prior_maximum_along(density, mode, v)
        if np.max(np.abs(mode - start)) <= 1e-10 * max(1.0, float(np.max(np.abs(mode)))):
            break
    return mode


def _prior_maximum_along(density: Any, mode: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``mode`` moved along ``v`` to the log prior's maximum on that line
    (:func:`ridges_at_prior_mode`).  The log prior along an intercept ridge is a concave quadratic
    plus ``mu``'s log prior: one Newton step from the prior's slope and curvature (central
    differences) brackets it, and a bounded scalar search within ``|t0|`` plus one prior sd of that
    step finds it; the move is kept only where it raises the log prior.  Unchanged where the prior
    does not bend down along ``v``."""
    h = 1e-4 * max(1.0, float(np.max(np.abs(mode[v != 0.0]))))

    def negative(t: float) -> float:
        value = float(density.log_prior(mode + t * v))
        return -value if np.isfinite(value) else np.inf

    slope = float(prior_gradient(density, mode)[1] @ v)
    bend = -(float(prior_gradient(density, mode + h * v)[1] @ v)
             - float(prior_gradient(density, mode - h * v)[1] @ v)) / (2.0 * h)
    if not (np.isfinite(slope) and np.isfinite(bend) and bend > 0.0):
        return mode
    t0 = slope / bend
    reach = abs(t0) + 1.0 / math.sqrt(bend)
    best = optimize.minimize_scalar(negative, bounds=(t0 - reach, t0 + reach),
                                    method="bounded", options={"xatol": 1e-10 * max(1.0, reach)})
    if np.isfinite(best.fun) and best.fun < negative(0.0):
        return mode + float(best.x) * v
    return mode


BOUNDED_SCALE_RANGE = 60.0
""":func:`_bounded_scale_mode` searches ``logit(sigma / U)`` within this of its start (``sigma`` from
``U e^-60`` to ``U``)."""


def _bounded_scale_mode(prior: "ExpectedGroupPrior", theta: np.ndarray, u: int) -> float:
    """The maximum over a group's bounded scale coordinate ``u`` (``logit(sigma / U)``) of the
    expected log prior, the other coordinates at ``theta`` (a bounded one-dimensional search;
    public: the program and released values).

    Why not the joint damped Newton of :func:`~stan_dp.adaptation.pooling._exact_prior_mode`
    alone: along ``u`` the log prior is ``-J log sigma(u) - (S + V) / (2 sigma(u)^2)`` plus the
    transform's log Jacobian ``log sigma + log(1 - sigma / U)``, and near the start, ``sigma = U /
    2``, the first term is convex in ``u`` (``-J log logistic(u)``), so the prior's curvature there
    is negative, the coordinate is not seen to be held, and the scale stays where it started:
    Gelman and Hill's radon model as its BUGS code writes it (``sigma_a ~ uniform(0, 100)``; 20
    counties, 1,000 rows) ended every run with ``sigma_a`` near 50, 1,000 posterior sds off.  In
    ``log sigma`` every term is concave (the last one too), so the function of ``u`` is unimodal
    and a bounded scalar search finds its maximum; Newton then polishes every held coordinate
    jointly from there."""
    start = float(theta[u])
    point = np.array(theta, dtype=float)

    def negative(x: float) -> float:
        point[u] = x
        value = prior.log_prior(point)
        return -value if np.isfinite(value) else np.inf

    best = optimize.minimize_scalar(negative, bounds=(start - BOUNDED_SCALE_RANGE, start + BOUNDED_SCALE_RANGE),
                                    method="bounded", options={"xatol": 1e-9})
    return float(best.x) if np.isfinite(best.fun) and best.fun <= negative(start) else start


ELEMENT_WIDENING_MAX = 2.0
"""Most :func:`element_axes_widened` widens an element's axis (its diagonal read down to
``ELEMENT_WIDENING_MAX ** -2``)."""


def element_axes_widened(density: Any, pooled: _Pooled, frame: np.ndarray) -> np.ndarray:
    """Per axis of an unresolved final pool's frame, the factor (at least 1) that widens a group
    element's axis to the curvature its own diagonal entry reads.

    Parameters
    ----------
    density : RowDensity
        Declares ``hierarchical_hyperparameters`` and ``zero_mean_hyperparameters`` (read from the
        program; the groups' elements are what it reads); none declared: all 1.
    pooled : _Pooled
        The final pool, taken in ``frame``.
    frame : ndarray
        The pooling frame ``A``.

    Returns
    -------
    ndarray
        Per group whose elements' median diagonal ``m`` is below ``1 - k s``: on the axis of
        each of its elements ``j`` whose own diagonal ``c_j`` is below it too,
        ``1 / sqrt(max(c_j, m, ELEMENT_WIDENING_MAX ** -2))``; 1 elsewhere.  ``c_j`` is the
        released data curvature plus the exact prior in frame units, ``s`` the pool's entry noise
        sd (:attr:`~stan_dp.adaptation.pooling._Pooled.entry_sd`) and ``k``
        :func:`~stan_dp.adaptation.pooling.axis_noise_sds` (as
        :func:`~stan_dp.adaptation.pooling._axis_narrowing`, the other side).  The pool taken
        again in ``A diag(f)`` divides the elements' gradients by about ``c_j`` instead of the
        eigenvalue floor 1.

    Why: where the pool is unresolved, every eigenvalue of its curvature is at the floor
    ``min(1, tau)`` and its one-step estimates divide each direction's gradient by 1 in frame
    units, the frame's own scale.  The elements' frame comes from the initial scale's count
    search, which cannot resolve coordinates that depend on 5 % of the rows each, and the floor
    keeps it: in ``radon`` at 1,000 rows, epsilon = 16 (data set 0, noise seed 12) the counties'
    frame was half their conditional posterior sd (curvature 0.24 in frame units), every
    eigenvalue sat at the floor (``tau`` 2.4) in all 8 rounds, each round moved the counties'
    spread about a tenth of Newton's step, and the search ended with the counties' spread 0.43
    of the posterior's.  A
    single diagonal entry's noise is ``s``, not the spectral ``tau`` (``1.5 s sqrt(2 d)``), and
    pooled over the rounds it reads those curvatures to about 0.09.  Only the final estimate
    uses it: widening the search's own frame round by round fed back through clipping (a wider
    axis has larger per-row curvatures, clipped, read lower, widened again: one county's frame
    grew to 5.4 times its posterior sd and ended 7.6 sds off), and only the elements: a
    diagonal widening of every axis cost ``earnings`` and ``hetero`` (docs/adaptation.md §7,
    "Axes widened from the pooled diagonal").  At most 2-fold (a cap at 3 ended one run of six
    5.5 sds off against 2.0), and no more than the group's median element: a clipped sum under-reads
    an axis too (its rows' curvatures are at most the bound each), and one county read 0.26 where
    its group's median was about 1 (``radon``, 3,000 rows, epsilon = 16, data set 0, seed 19):
    widened alone, the pool's rounds disagreed beyond their noise, the random-effects pooling
    moved every county, and the run ended 15.1 sds off instead of 2.1.  The elements' frames come
    from one count search and share its failure; an axis far below its group's median is more
    likely clipped than too narrow.  Zero-mean groups (``a ~ normal(0, tau)``) are read the same
    way: left out, the replica ``ZeroMeanIntercept`` (1,000 rows in 20 groups, ``tau`` on
    ``(0, 100)``, noise seeds 1-6) reported its elements' sds at a median 0.62-0.89 of the exact
    posterior's at epsilon = 16 and 0.25-0.45 at epsilon = 4, noise included (docs/adaptation.md
    §3, "A zero-mean group's elements widened too").  Post-processing of released values and the
    program.
    """
    d = frame.shape[0]
    wider = np.ones(d)
    # zero-mean groups too: their elements' frames come from the same count search
    declared = _declared_hyperparameters(density, d, zero_mean=True)
    if not declared or pooled.prior_curvature is None or not math.isfinite(pooled.tau):
        return wider
    below = 1.0 - axis_noise_sds(d) * pooled.entry_sd
    with np.errstate(all="ignore"):
        c = np.diag(frame.T @ (pooled.data_curvature + pooled.prior_curvature) @ frame)
    c = np.where(np.isfinite(c), c, np.inf)
    floor = ELEMENT_WIDENING_MAX ** -2
    for members, _, _ in declared:
        typical = float(np.median(c[members]))
        if not typical < below:
            continue
        own = np.minimum(1.0 / np.sqrt(np.maximum(c[members], floor)), 1.0 / math.sqrt(max(typical, floor)))
        wider[members] = np.where(c[members] < below, own, 1.0)
    return wider
