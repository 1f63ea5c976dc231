"""Per-row curvature in the learned frame, and the frame algebra of one Newton round.

Per-row negative Hessians by central differences of per-row gradients
(:func:`_row_neg_hessians`), the exact prior's (:func:`prior_neg_hessian`), the
per-row statistics one round releases (:func:`_round_rows`), and what a round
does with its released curvature: shrink it against its noise
(:func:`_shrunk_eigen`), cap the step's gain (:func:`_gain_floor`) and take the
next frame (:func:`_next_frame`).  No release is made here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stan_dp.density import prior_gradient

__all__ = ["prior_neg_hessian", "declared_mask", "logit_coordinates", "log_coordinates",
           "transform_curvature_ratio", "centred_coordinates", "reported_covariance"]


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


def declared_mask(density: Any, name: str, d: int) -> np.ndarray | None:
    """The boolean per-coordinate mask ``density.<name>`` (read from the program, public), or None
    where the density does not declare one of shape ``(d,)`` (a NumPy density)."""
    mask = getattr(density, name, None)
    if mask is None:
        return None
    mask = np.asarray(mask, dtype=bool)
    return mask if mask.shape == (d,) else None


def logit_coordinates(density: Any, d: int) -> np.ndarray | None:
    """The density's coordinates on Stan's logit transform (``bounded_coordinates``, a boolean
    mask read from the program, public), or None where it declares none."""
    mask = declared_mask(density, "bounded_coordinates", d)
    return mask if mask is not None and bool(mask.any()) else None


def log_coordinates(density: Any, d: int) -> np.ndarray | None:
    """The density's coordinates on Stan's log transform (``log_coordinates``: parameters declared
    with a lower bound only, a boolean mask read from the program, public), or None where it
    declares none."""
    mask = declared_mask(density, "log_coordinates", d)
    return mask if mask is not None and bool(mask.any()) else None


def transform_curvature_ratio(theta: np.ndarray, bounded: np.ndarray) -> np.ndarray:
    """``T''(u) / T'(u)`` per coordinate: ``1 - 2 logistic(u)`` where ``bounded`` (Stan's
    ``x = L + (U - L) logistic(u)``, whatever ``L`` and ``U``), 0 elsewhere."""
    with np.errstate(over="ignore"):
        return np.where(bounded, 1.0 - 2.0 / (1.0 + np.exp(-np.asarray(theta, dtype=float))), 0.0)


CENTRE_RATIO = 1.0
""":func:`centred_coordinates`: the logit transform's curvature is taken out of the rows' where its
per-row size over the rows' own, about ``sqrt(n) sd |T''/T'|``, exceeds this."""


def centred_coordinates(bounded: np.ndarray | None, theta: np.ndarray, frame: np.ndarray,
                        n_public: int) -> np.ndarray | None:
    """The coordinates of ``bounded`` along which :func:`_row_neg_hessians` takes the transform's
    curvature out at ``theta`` in ``frame`` (public and released values only).

    Along a logit-transformed coordinate ``u`` a row's Hessian is ``T'^2 d2l_i/dx2 + g_i r``
    (``g_i = dl_i/du``, ``r = T''/T'``).  In a frame whose sd along ``u`` is ``s`` the first
    term is about ``1 / n`` per row and the second about ``s |r| / sqrt(n)`` (a row's whitened
    gradient is about ``1 / sqrt(n)``): their ratio is ``sqrt(n) s |r|``.  Where it is large (a
    regression coefficient near one of its bounds: ``wells`` with ``b_arsenic`` in ``(0, 10)`` at
    1,000 rows, 4.9) the second term dominates, is of either sign, and a clipped sum of it is
    biased: it is taken out.  Where it is below :data:`CENTRE_RATIO` (a scale declared
    ``<lower=0, upper=100>``, sampled near its lower bound where the logit is a log: ``s`` about
    ``1 / sqrt(2 n)``, 0.7) the rows' curvature is kept as it is on the log scale, which suits a
    scale (docs/adaptation.md §3, "Bounded coordinates: the curvature of the transform").
    :func:`~stan_dp.adaptation.newton.private_mode` asks only in rounds near the mode (a pool
    exists): far out, where the rows saturate, their curvature in the bounded parameter vanishes.
    """
    if bounded is None:
        return None
    sd = np.sqrt(np.sum(np.asarray(frame, dtype=float) ** 2, axis=1))
    ratio = math.sqrt(max(int(n_public), 1)) * sd * np.abs(transform_curvature_ratio(theta, bounded))
    centred = bounded & (ratio > CENTRE_RATIO)
    return centred if bool(centred.any()) else None


FLAT_FAMILIES = frozenset({"double_exponential", "skew_double_exponential"})
"""Outcome families whose log density is piecewise linear in its location: each row's curvature
there is 0 but at one point, so central differences of each row's gradient a small step apart
read 0 in almost every row (a Laplace regression at its posterior, in its posterior's frame: all
1,000 rows) and the released sum reads no curvature where the posterior has some.  For a density
whose ``outcome_families`` (public: the program's sampling statements on row variables) include
one (:func:`flat_likelihood`, decided where the releases are planned and passed to the row
functions as ``outer``), :func:`_flat_rows_neg_hessians` takes, in the coordinates a row is linear
in, the outer product of its gradient, whose sum is the empirical Fisher information: at the mode
its mean is the curvature's (the information identity), and a Laplace row's gradient in its
location is ``sign(r) x / s``, the same size at any residual.  Elsewhere (a scale) the differences
stay.  The release is the same clipped matrix sum, so its sensitivity is unchanged
(docs/adaptation.md §7, "A Laplace likelihood")."""


FLAT_RTOL = 1e-9
"""Relative change of a row's gradient across a step, beyond the transform's Jacobian, up to which
:func:`_flat_rows_neg_hessians` reads its coordinate as one the row is linear in (rounding only)."""


def flat_likelihood(density: Any) -> str:
    """The density's outcome families from :data:`FLAT_FAMILIES`, comma-separated, or ``""``."""
    return ", ".join(sorted(set(getattr(density, "outcome_families", ()) or ()) & FLAT_FAMILIES))


def _row_neg_hessians(density: Any, theta: np.ndarray, frame: np.ndarray, h: float,
                      diagonal_only: bool = False, bounded: np.ndarray | None = None,
                      outer: bool = False) -> np.ndarray:
    """Per-row ``-A' H_i A`` (shape ``(n, k, k)`` for a ``(d, k)`` frame), symmetrised; non-finite
    entries zeroed.  With ``outer`` (a likelihood with no curvature in its location,
    :data:`FLAT_FAMILIES`) :func:`_flat_rows_neg_hessians` instead: the outer product of each row's
    gradient in the coordinates the row is linear in.

    With ``diagonal_only`` only its diagonal, shape ``(n, k)``.  Along the coordinates
    ``bounded`` marks (Stan's logit transform of a parameter with both bounds, ``x = T(u)``) the
    transform's own curvature is taken out: a row's Hessian in ``u`` is
    ``T'^2 d2l_i/dx2 + (dl_i/du) T''/T'``, and the second term, proportional to the row's
    gradient (its residual), is removed, leaving ``T'^2 d2l_i/dx2`` (docs/adaptation.md §3,
    "Bounded coordinates: the curvature of the transform").  Near a bound (``T''/T'`` near
    ``±1``) that term is many times a row's share of the curvature and of either sign, and a
    clipped sum of it is biased.
    """
    if outer:
        mats = _flat_rows_neg_hessians(density, theta, frame, h, bounded)
        return np.diagonal(mats, axis1=1, axis2=2).copy() if diagonal_only else mats
    cols = []
    centre = None
    with np.errstate(all="ignore"):
        for j in range(frame.shape[1]):
            _, up = density.row_log_lik_grad(theta + h * frame[:, j])
            _, down = density.row_log_lik_grad(theta - h * frame[:, j])
            up, down = np.asarray(up, dtype=float), np.asarray(down, dtype=float)
            if centre is None and bounded is not None:   # the rows' gradients at theta, to O(h^2)
                centre = 0.5 * (up + down).reshape(-1, theta.size) * transform_curvature_ratio(theta, bounded)
            diff = (up - down) @ frame
            cols.append(-diff / (2.0 * h))
        mats = np.stack(cols, axis=2)
        if centre is not None:   # + A' diag(g_i r) A, over the bounded coordinates j only
            idx = np.flatnonzero(bounded)
            outer = frame[idx, :, None] * frame[idx, None, :]   # (m, k, k): row j of A, outer itself
            mats = mats + (centre[:, idx] @ outer.reshape(idx.size, -1)).reshape(mats.shape)
        if diagonal_only:
            out = np.diagonal(mats, axis1=1, axis2=2).copy()
            out[~np.isfinite(out)] = 0.0
            return out
        mats = 0.5 * (mats + np.transpose(mats, (0, 2, 1)))
    mats[~np.isfinite(mats)] = 0.0
    return mats


def _jacobian_ratio(density: Any, theta: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """``T'(u + s) / T'(u - s)`` per coordinate for Stan's transform ``x = T(u)`` read from the
    program (public): ``exp(2 s)`` on a log transform (a lower bound only), the ratio of
    ``logistic(u)(1 - logistic(u))`` on a logit transform (both bounds: ``interval_coordinates``,
    or ``bounded_coordinates`` where a density declares only those), 1 elsewhere (an upper bound
    only among them: its coordinates are not read as linear)."""
    d = theta.size
    ratio = np.ones(d)
    logs = log_coordinates(density, d)
    if logs is not None:
        ratio[logs] = np.exp(2.0 * steps[logs])
    bounded = declared_mask(density, "interval_coordinates", d)
    if bounded is None:
        bounded = declared_mask(density, "bounded_coordinates", d)
    if bounded is not None and bool(bounded.any()):
        def slope(u: np.ndarray) -> np.ndarray:
            p = 1.0 / (1.0 + np.exp(-u))
            return p * (1.0 - p)
        with np.errstate(over="ignore"):
            ratio[bounded] = slope(theta[bounded] + steps[bounded]) / slope(theta[bounded] - steps[bounded])
    return ratio


def _flat_rows_neg_hessians(density: Any, theta: np.ndarray, frame: np.ndarray, h: float,
                            bounded: np.ndarray | None = None) -> np.ndarray:
    """Per-row ``A' M_i A`` (shape ``(n, k, k)``) for a likelihood piecewise linear in some
    parameters (:data:`FLAT_FAMILIES`).

    ``M_i`` is the row's negative Hessian in the parameter coordinates, by central differences
    along each axis (``h`` frame units: ``h`` times the frame's sd along that axis; ``bounded`` as
    in :func:`_row_neg_hessians`), except in the block of the coordinates along which the row's
    gradient in the constrained parameter does not change across the step (its location: a Laplace
    row's gradient there is ``sign(r) x / s`` on both sides; on the unconstrained scale it changes
    only by the transform's Jacobian, :func:`_jacobian_ratio`, to rounding), where it is the outer
    product of the row's gradient ``g_i g_i'``.

    At the mode the outer product's mean is the curvature's there (the information identity), and
    the differences are exact everywhere else: in a Laplace scale ``log s`` they read ``|r| / s``,
    where the outer product reads ``(|r| / s - 1)^2``, ``|r| / s`` times too much far below the mode,
    so that a scale started at 1 for residuals in the tens rose by about ``s / |r|`` per round
    (docs/adaptation.md §7, "A Laplace likelihood").  Non-finite entries are zeroed; symmetrised.
    """
    d = theta.size
    steps = h * np.sqrt(np.sum(np.asarray(frame, dtype=float) ** 2, axis=1))
    ratio = _jacobian_ratio(density, theta, steps)
    with np.errstate(all="ignore"):
        _, grads = density.row_log_lik_grad(theta)
        g = np.asarray(grads, dtype=float).reshape(-1, d)
        cols, flat = [], []
        for j in range(d):
            e = np.zeros(d)
            e[j] = steps[j]
            _, up = density.row_log_lik_grad(theta + e)
            _, down = density.row_log_lik_grad(theta - e)
            up = np.asarray(up, dtype=float).reshape(-1, d)
            down = np.asarray(down, dtype=float).reshape(-1, d)
            cols.append(-(up - down) / (2.0 * steps[j]))
            flat.append(np.isclose(up[:, j], ratio[j] * down[:, j], rtol=FLAT_RTOL, atol=0.0))
        mats = np.stack(cols, axis=2)
        if bounded is not None:   # + diag(g_i r) over the bounded coordinates
            idx = np.flatnonzero(bounded)
            mats[:, idx, idx] += g[:, idx] * transform_curvature_ratio(theta, bounded)[idx]
        mats = 0.5 * (mats + np.transpose(mats, (0, 2, 1)))
        g[~np.isfinite(g)] = 0.0
        flat_rows = np.column_stack(flat)
        both = flat_rows[:, :, None] & flat_rows[:, None, :]
        mats = np.where(both, g[:, :, None] * g[:, None, :], mats)
        mats[~np.isfinite(mats)] = 0.0
        out = np.einsum("ji,njk,kl->nil", frame, mats, frame)
    out[~np.isfinite(out)] = 0.0
    return out


def _curvature_rows(density: Any, theta: np.ndarray, h: float,
                    directions: np.ndarray | None = None, outer: bool = False) -> np.ndarray:
    """Per-row ``|diag(-B' H_i B)|`` at ``theta`` (shape ``(n, k)``): the curvature along each column
    of ``B = directions`` (``(d, k)``; default the coordinate axes, the initial frame's statistic).
    ``outer`` as in :func:`_row_neg_hessians`."""
    b = np.eye(theta.size) if directions is None else np.asarray(directions, dtype=float)
    with np.errstate(all="ignore"):
        return np.abs(_row_neg_hessians(density, theta, b, h, diagonal_only=True, outer=outer))


def _orientation_rows(density: Any, theta: np.ndarray, frame: np.ndarray, h: float,
                      outer: bool = False) -> np.ndarray:
    """Per-row ``-A' H_i A`` divided by its Frobenius norm, flattened (shape ``(n, d*d)``).

    Every row weighs the same (norm 1, or 0 where its curvature is 0), so the
    sum needs no clip bound: sensitivity ``k`` (2 replace-one, 1 add/remove).  ``outer`` as in
    :func:`_row_neg_hessians`."""
    d = theta.size
    mats = _row_neg_hessians(density, theta, frame, h, outer=outer).reshape(-1, d * d)
    norms = np.linalg.norm(mats, axis=1)
    with np.errstate(all="ignore"):
        return np.where(norms[:, None] > 0.0, mats / np.where(norms > 0.0, norms, 1.0)[:, None], 0.0)


def _round_rows(density: Any, theta: np.ndarray, frame: np.ndarray, h: float,
                scales: np.ndarray, bounded: np.ndarray | None = None, outer: bool = False) -> np.ndarray:
    """One Newton round's per-row statistic, shape ``(n, d + d*d + 2)``.

    Columns: the gradient in the frame (``Aᵀ g_i``), the symmetrised
    ``-Aᵀ H_i A`` flattened row-major, and the norms of both divided by the
    public forecast bounds ``scales`` (for the private median).  ``bounded`` and ``outer`` as in
    :func:`_row_neg_hessians`.
    """
    d = theta.size
    _, grads = density.row_log_lik_grad(theta)
    with np.errstate(all="ignore"):
        whitened = np.asarray(grads, dtype=float).reshape(-1, d) @ frame
    mats = _row_neg_hessians(density, theta, frame, h, bounded=bounded,
                             outer=outer).reshape(whitened.shape[0], d * d)
    with np.errstate(all="ignore"):
        norms = np.column_stack([np.linalg.norm(np.where(np.isfinite(whitened), whitened, 0.0), axis=1),
                                 np.linalg.norm(mats, axis=1)]) / np.asarray(scales, dtype=float)
    return np.column_stack([whitened, mats, norms])


CURVATURE_CAP = 1e8
"""Largest eigenvalue (frame units) :func:`_shrunk_eigen` returns unless told otherwise: a frame
made from it (:func:`_next_frame`) narrows at most ``1e4``-fold along any direction in one round.
Newton steps are not held to it (:data:`STEP_CURVATURE_TOP`, :func:`_step_eigen`)."""
STEP_CURVATURE_TOP = math.inf
"""Largest eigenvalue (frame units) that a Newton step or one-step estimate divides by: none.

Divided by an eigenvalue capped at :data:`CURVATURE_CAP`, a step along a curvature beyond the cap is
longer than Newton's by their ratio.  Such curvatures come from the exact prior far from its mode
(a half-normal prior on a scale ``sigma`` has curvature ``2 sigma^2 / s^2`` along ``log sigma``):
``radon``'s group scale near 0 at 1,000 rows, epsilon = 4, had prior gradients of 1e6-1e9 noise
sds, and its capped steps ended 3.9e4 sds off (58 with Newton's); at epsilon = 1 two runs ended
3,050 and 1,440 sds off (276 and 302).  No other run of the paired ones changed: below the cap the
steps are the same (docs/adaptation.md §3, "The step is Newton's")."""


def _shrunk_eigen(data: np.ndarray, prior: np.ndarray, tau: float,
                  top: float = CURVATURE_CAP) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of ``prior + data`` after removing what the noise ``tau`` explains.

    ``data`` is the released (noisy) curvature in the current frame, ``prior``
    the exact prior curvature in that frame.  The data part's eigenvalues are
    shrunk towards 0 by their signal-to-noise ratio
    (``lambda (1 - tau^2 / lambda^2)_+``), the exact prior is added, absolute
    values are taken (saddle-free Newton), and eigenvalues are floored at
    ``min(1, tau)``.  Where the noise is at least the frame's unit curvature
    (``tau >= 1``) a direction whose curvature the release cannot resolve
    keeps the current frame's scale: it is neither widened by noise nor by a
    curvature that is merely unknown, so an unresolved frame stays too
    narrow rather than too wide, and steps stay short.  Where ``tau < 1``
    the release shows such a direction's curvature to be below about
    ``tau``, and the next frame (:func:`_next_frame`) widens along it by up
    to ``1 / sqrt(tau)`` in one round: how a frame too narrow by more than
    the noise grows, and, where the rows saturate far from the mode (their
    curvature truly near 0), how it keeps widening round after round
    (:data:`~stan_dp.adaptation.plan.FIRST_RADIUS`).  Bounded to
    ``[1e-3, top]`` (:data:`CURVATURE_CAP` by default).
    """
    data = np.where(np.isfinite(data), data, 0.0)
    lam_d, q_d = np.linalg.eigh(0.5 * (data + data.T))
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.clip(1.0 - tau**2 / np.maximum(lam_d * lam_d, 1e-300), 0.0, 1.0)
    total = (q_d * (lam_d * keep)) @ q_d.T + np.where(np.isfinite(prior), prior, 0.0)
    lam, q = np.linalg.eigh(0.5 * (total + total.T))
    lam = np.maximum(np.abs(lam), min(1.0, tau))
    return np.clip(lam, 1e-3, top), q


def _step_eigen(data: np.ndarray, prior: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_shrunk_eigen` for a Newton step and for a frame: ``(lam_step, lam, q)``.

    ``lam_step`` is capped at :data:`STEP_CURVATURE_TOP` (a step divides by it), ``lam`` at
    :data:`CURVATURE_CAP` (the next frame, the noise level and the pool's curvature use it); the
    eigenvectors ``q`` are shared.
    """
    lam_step, q = _shrunk_eigen(data, prior, tau, top=STEP_CURVATURE_TOP)
    return lam_step, np.minimum(lam_step, CURVATURE_CAP), q


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


def reported_covariance(curvature: np.ndarray, frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The covariance ``curvature^-1`` and its symmetric root, computed in ``frame``'s units.

    ``curvature`` is the search's final one (``theta`` space) and ``frame`` the search's last frame
    (the one its final rounds pooled in), where its eigenvalues are about 1.  In ``theta`` space an
    unstandardised model's span many decades, and there a floor relative to the largest cut the
    posterior: a regression on ``year`` and ``year^2`` (years 1950-2020, 800 rows) has precision
    eigenvalues from 1.7e-6 to 3.0e15,
    and the floor at 1e-12 of the largest, applied there, reported sds 4e4 times too small for the
    intercept along the coefficients' ridge, its noise as 1.8e4 of those sds (0.42 of the exact
    ones) and draws 0.43 times as wide as the exact posterior (``tests/test_reported_covariance.py``).
    Here the eigenvalues are floored at 1e-12 of the largest in the frame (invertible where the
    curvature is singular or, by round-off, not positive).  The root is ``U S U'`` from the SVD
    ``U S V'`` of ``frame Q diag(lam^-1/2)``: the symmetric root of the covariance, which depends
    on the covariance alone (not on the eigenbasis LAPACK picks: :func:`_next_frame`), computed
    from a factor whose condition number is the square root of the covariance's.
    """
    in_frame = frame.T @ curvature @ frame
    lam, q = np.linalg.eigh(0.5 * (in_frame + in_frame.T))
    lam = np.maximum(lam, 1e-12 * max(float(lam.max()), 1e-300))
    factor = frame @ (q / np.sqrt(lam))
    if not np.all(np.isfinite(factor)):   # a search gone to infinity: what is not finite stays so
        return factor @ factor.T, factor
    u, s, _ = np.linalg.svd(factor)
    root = (u * s) @ u.T
    return factor @ factor.T, 0.5 * (root + root.T)


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
