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

__all__ = ["prior_neg_hessian"]


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
    ``min(1, tau)``: a direction whose curvature the release cannot resolve
    keeps the current frame's scale (it is neither widened by noise nor by a
    curvature that is merely unknown) — so an unresolved frame stays too
    narrow rather than too wide, and steps stay short.  Bounded to
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
