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
  (:mod:`stan_dp.adaptation.newton`).

Both are post-processing of the program and of released scales; a density that declares no
groups (a NumPy density, a model without such a vector) gets none, and the search is then the
same release for release (docs/adaptation.md §3, "Far phase" step 6, and "A group's frame").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stan_dp.adaptation.curvature import prior_neg_hessian

__all__ = ["group_directions", "group_locations", "grouped_frame", "hyperparameter_scale"]


def group_locations(density: Any, d: int) -> list[tuple[np.ndarray, int]]:
    """The density's declared groups (``hierarchical_coordinates``) as ``(mask of the group's
    elements, location index)`` pairs, each checked (indices within ``d``, at least two distinct
    elements, the location not among them); ``[]`` where it declares none."""
    out = []
    for members, location in getattr(density, "hierarchical_coordinates", None) or ():
        idx = np.asarray(members, dtype=int)
        loc = int(location)
        if (idx.size >= 2 and np.all((idx >= 0) & (idx < d)) and 0 <= loc < d and loc not in idx
                and np.unique(idx).size == idx.size):
            mask = np.zeros(d, dtype=bool)
            mask[idx] = True
            out.append((mask, loc))
    return out


def group_directions(groups: list[tuple[np.ndarray, int]], d: int) -> np.ndarray:
    """One column per group of :func:`group_locations`, shape ``(d, G)``: 1 on the group's
    elements and on its location, 0 elsewhere (``G = 0`` where there is none)."""
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
        axis = out[:, loc]
        own_axis = np.count_nonzero(axis) == 1 and axis[loc] != 0.0
        scaled = not group_at_floor[g] and np.isfinite(group_scale[g])
        if not (scaled and own_axis and at_floor[members].any()):
            continue
        out[:, loc] = (members | (np.arange(d) == loc)).astype(float) * float(group_scale[g])
        grouped[loc] = True
    return out, grouped


def hyperparameter_scale(density: Any, theta: np.ndarray, scale: np.ndarray, at_floor: np.ndarray,
                         h: float) -> np.ndarray:
    """``scale`` with a resolved group's hyperparameters that no row depends on scaled by the exact prior.

    Parameters
    ----------
    density : RowDensity
        Declares ``hierarchical_hyperparameters`` (read from the program: per centred
        hierarchical statement, its vector's coordinates and its location's and scale's;
        :attr:`stan_dp.model.ZeroRowPart.hierarchical_hyperparameters`); none: ``scale`` unchanged.
    theta : ndarray
        Where the Newton rounds start (post-processing of released values).
    scale, at_floor : ndarray
        The initial scale per coordinate and whether none was found (the released count of rows
        depending on it within its noise of 0).
    h : float
        Finite-difference step for the prior's curvature.

    Returns
    -------
    ndarray
        ``scale`` with, for each group none of whose elements is at the floor, each of its
        hyperparameters at the floor scaled by the prior's conditional sd given the other
        coordinates, ``1 / sqrt(P_jj)`` (``P`` the exact prior's negative Hessian at ``theta``), at
        most 1 (the floor's unit scale); where ``P_jj`` is not positive, as it was.

    Why: a coordinate at the floor is held to the widest measured scale because rows may depend on
    it unseen (a county's intercept under the count noise), and its curvature is then the
    release's to find.  A group's location or scale is different: no row depends on it, its
    curvature is the prior's, exact and public, and the rounds' released curvature there is pure
    noise, floored at ``min(1, tau)``, so a frame too narrow along it never widens.  In
    ``radon-slopes`` at 3,000 rows, epsilon = 16, ``log sigma_a``'s frame was 14 times narrower than
    its posterior sd (the widest measured scale, a county's), and ``mu_a``'s, ``mu_b``'s and
    ``log sigma_b``'s were narrow too: 20-23 of the 25 released eigenvalues sat at the floor in
    every round, 17 of 24 runs never settled, and those four were the worst coordinates (median
    2.0-3.3 sds); scaled by the prior, median 5.07 -> 1.7 sds, 14 settled.  Only where the
    group's elements have scales of their own: where some are at the floor (``radon``, 50 rows a
    county at 1,000 rows) they stay near the start for many rounds, every element at one level
    (the far phase moves them together), where the prior's scale of ``log sigma_a`` is the
    funnel's neck; its frame then was 1, several times its posterior sd, and the rounds walked it
    down the neck (median 5.08 -> 13 sds, 24 runs).  Public: the program, released verdicts and
    the prior at a released point.
    """
    declared = getattr(density, "hierarchical_hyperparameters", None) or ()
    at_floor = np.asarray(at_floor, dtype=bool)
    held = np.zeros(theta.size, dtype=bool)
    for members, hyper in declared:
        members, hyper = np.asarray(members, dtype=int), np.asarray(hyper, dtype=int)
        inside = (members.size and hyper.size and np.all((members >= 0) & (members < theta.size))
                  and np.all((hyper >= 0) & (hyper < theta.size)))
        if inside and not at_floor[members].any():
            held[hyper] = at_floor[hyper]
    if not held.any():
        return scale
    p = np.diag(prior_neg_hessian(density, theta, np.eye(theta.size), h))
    with np.errstate(divide="ignore", invalid="ignore"):
        prior_sd = np.where(p > 0.0, 1.0 / np.sqrt(p), np.nan)
    use = held & np.isfinite(prior_sd)
    return np.where(use, np.minimum(prior_sd, 1.0), scale)
