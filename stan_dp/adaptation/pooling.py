"""Pooling the Newton rounds near the mode: the pooled estimate, its frame, and the exact prior.

Post-processing of released gradients and curvatures only: the rounds near the
mode are combined by precision weight (:func:`_pooled_estimate`, with a
random-effects widening where they disagree beyond their noise,
:func:`_random_effects`), rounds far from the pool leave it
(:func:`_drop_consistent`), the pool's next frame narrows axes its diagonal
resolves (:func:`_axis_narrowing`), and a settled search's coordinates held by
the prior move to the exact prior's conditional mode (:func:`_exact_prior_mode`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from scipy import linalg, optimize, stats

from stan_dp.adaptation.curvature import _next_frame, _shrunk_eigen, _step_eigen, prior_neg_hessian
from stan_dp.adaptation.plan import NOISE_SPECTRAL_FACTOR
from stan_dp.density import prior_gradient

__all__ = ["curvature_diagonal_sd", "model_reach", "trimmed_pool"]


AXIS_FAMILYWISE = 0.05
"""Probability that noise alone narrows some axis in :func:`_axis_narrowing` (Bonferroni over the
``d`` diagonal entries, one-sided)."""


AXIS_NARROW_MIN = 2.0
"""An axis narrows only where its diagonal curvature is beyond this (its frame at least ``sqrt(2)``
times too wide): near it the eigenvalue floor of :func:`_shrunk_eigen` (``min(1, tau)``, below 1)
widens the narrowed axis again, and the two alternated."""


def axis_noise_sds(d: int) -> float:
    """``k``: how many entry-noise sds a diagonal entry must clear for its axis to narrow
    (:func:`_axis_narrowing`) or widen (:func:`~stan_dp.adaptation.groups.element_axes_widened`),
    one-sided Bonferroni over the ``d`` axes at :data:`AXIS_FAMILYWISE`."""
    return float(stats.norm.isf(AXIS_FAMILYWISE / max(d, 1)))


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
    k = axis_noise_sds(d)
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


POLISH_ITERATIONS = 50
"""Most Newton iterations of :func:`_exact_prior_mode` (a public computation)."""
HELD_NOISE_SDS = 3.0
"""A coordinate is *held by the prior* (:func:`_exact_prior_mode`) when the pooled released data
curvature on its diagonal is within this many noise sds of 0 and the exact prior's is beyond it."""


def _absolute_eigen(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of the symmetric part of ``m`` with absolute eigenvalues floored at
    ``1e-12`` times the largest (saddle-free, and invertible where ``m`` is singular)."""
    lam, q = np.linalg.eigh(0.5 * (m + m.T))
    return np.maximum(np.abs(lam), 1e-12 * max(float(np.max(np.abs(lam))), 1e-300)), q


def _split_curvature(data: np.ndarray, prior: np.ndarray, frame: np.ndarray, tau: float,
                     rowless: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pooled curvature (theta space) with the noise floor applied only where the release's
    noise is, and the eigenvalues that floor acted on.

    Parameters
    ----------
    data : ndarray
        The pooled released data curvature, theta space, its ``rowless`` rows and columns 0 (their
        exact value: :func:`~stan_dp.adaptation.newton._without_rowless`).
    prior : ndarray
        The exact prior's negative Hessian, theta space.
    frame : ndarray
        The pooling frame ``F``, where the release's noise is isotropic with spectral norm at most
        ``tau``.
    tau : float
        That spectral norm.
    rowless : ndarray of bool
        A group's location and scale that no row depends on (released verdicts); some, not all.

    Returns
    -------
    curvature, lam : ndarray
        In ``F`` units split the space into ``W``, an orthonormal basis of the span of
        ``F^-1 e_r`` (``r`` rowless), and ``U``, of its complement: the data curvature and its
        noise are exactly 0 on ``W`` (``F' D F^-1 e_r = F' D e_r = 0``) and all on ``U``.  In the
        basis ``(U, W)`` the curvature is ``H_WW = |P_WW|``, ``H_UW = P_UW`` and ``H_UU = T +
        P_UW |P_WW|^-1 P_WU``, where ``T`` is :func:`~stan_dp.adaptation.curvature._shrunk_eigen`
        of ``D_UU`` plus the prior's marginal curvature of ``U`` (its Schur complement, ``P_UU -
        P_UW |P_WW|^-1 P_WU``); ``|.|`` takes absolute eigenvalues.  ``lam`` are ``T``'s
        eigenvalues (the pool is resolved where none is at the floor).  The Schur complement of
        ``H_WW`` in ``H`` is ``T``, so ``H`` is positive definite; where nothing is floored or
        shrunk, ``H = D + P``.

    Why: the floor ``min(1, tau)`` holds a direction the release cannot resolve at the frame's
    scale, since rows may depend on it unseen.  Along a coordinate no row depends on the data
    curvature is 0 and the prior's is exact: with ``mu ~ normal(m0, 100)`` and six group
    intercepts (1,000 rows, epsilon = 16), ``m0``'s curvature in frame units was 6e-4 of the
    floor, which held its reported sd to the frame's scale (7 against 40.9 after 17 pooled rounds)
    and left the pool unresolved there.  The split is made in the frame's units, not by theta's
    coordinates: where the frame mixes a location with its elements
    (:func:`~stan_dp.adaptation.groups.grouped_frame`) the other coordinates' frame given the
    location is narrower along the group's direction, and the floor there held ``radon``'s slope
    to half its posterior sd.  Post-processing of released values and the exact prior.
    """
    d = frame.shape[0]
    k = int(np.count_nonzero(rowless))
    basis, _ = np.linalg.qr(np.linalg.solve(frame, np.eye(d)[:, np.asarray(rowless, dtype=bool)]),
                            mode="complete")
    basis = np.roll(basis, d - k, axis=1)   # (U, W): W, the first k columns of the QR, last
    u, w = slice(0, d - k), slice(d - k, d)
    data_v = basis.T @ (frame.T @ data @ frame) @ basis
    prior_v = basis.T @ (frame.T @ prior @ frame) @ basis
    lam_w, q_w = _absolute_eigen(prior_v[w, w])
    coupling = prior_v[u, w]
    through = coupling @ ((q_w / lam_w) @ q_w.T) @ coupling.T   # P_UW |P_WW|^-1 P_WU
    lam, q = _shrunk_eigen(data_v[u, u], prior_v[u, u] - through, tau)
    curvature_v = np.empty((d, d))
    curvature_v[u, u] = (q * lam) @ q.T + through
    curvature_v[u, w] = coupling
    curvature_v[w, u] = coupling.T
    curvature_v[w, w] = (q_w * lam_w) @ q_w.T
    inv_frame = np.linalg.inv(frame)
    curvature = inv_frame.T @ (basis @ curvature_v @ basis.T) @ inv_frame
    return 0.5 * (curvature + curvature.T), lam


def _splits(projected: np.ndarray | None) -> bool:
    """Whether a pool's curvature is split (:func:`_split_curvature`): some of its coordinates had
    their releases projected off, and not all."""
    return projected is not None and bool(projected.any()) and not bool(projected.all())


def _exact_prior_mode(density: Any, pooled: "_Pooled", frame: np.ndarray, h: float,
                      rowless: np.ndarray | None = None,
                      only: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Put the coordinates the prior holds at their exact conditional mode (settled searches).

    The pooled one-step estimates use the prior's curvature averaged over the
    rounds' points, which is right where the rows dominate and wrong for a
    coordinate only the prior touches — a hierarchical mean or scale, whose
    conditional mode moves with the group effects (the released data
    gradient there is pure noise).  The coordinates ``S`` whose released data
    curvature is within :data:`HELD_NOISE_SDS` noise sds of 0 while the exact
    prior's is beyond that (or, for a coordinate ``rowless`` — the initial
    scale's released counts put fewer than its tail share of the rows, at
    least 10 %, above the curvature floor, and it is no declared group's
    element — positive) are moved to the
    maximum of the exact log prior over ``theta_S`` with the other
    coordinates fixed at the pooled estimate
    (damped Newton with backtracking, public).  The privacy noise reaches them only through the
    others: with ``J = -P_SS^-1 P_SR`` (``P`` the prior's negative Hessian at
    the new point) the noise covariance is ``L Sigma L'``, ``L`` the
    identity on ``R`` and ``J`` on ``S``.  The curvature is recomputed with
    the prior's at the new point.  Post-processing of released values only.

    With ``only`` (a mask) no other coordinate is held, and the trust region of each held
    coordinate is the wider of its pooled sd and its sd under the exact prior's curvature: an
    unresolved pool's curvature along a coordinate no row depends on is its noise floor, which
    says nothing about how far the prior's conditional mode is (the search then stopped a tenth
    of the way there after :data:`POLISH_ITERATIONS`;
    :func:`~stan_dp.adaptation.groups.hyperparameters_at_expected_mode`).

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
    # scale's tail share, at least 10 %), for a coordinate the program does not call a group's
    # element.  An element was rowless too, before: a 20-row group intercept whose clipped
    # curvature read within noise of 0 (0.59 against 2.2) was sent to its prior's conditional
    # mode, the hierarchical location, and ended 4.3 sds off (six intercepts under
    # mu ~ normal(m0, 100), 1,000 rows, epsilon = 16; tests/test_rowless_hyperparameters.py).
    # A floor on the prior's curvature (3 noise sds of a release in the final frame) left mu 16
    # sds off in a settled NumPy run: none is set.
    rowless = np.zeros(prior_diag.size, dtype=bool) if rowless is None else np.asarray(rowless)
    prior_holds = (prior_diag > HELD_NOISE_SDS * noise) | (rowless & (prior_diag > 0.0))
    held = (np.abs(np.diag(mean_hess)) < HELD_NOISE_SDS * noise) & prior_holds & np.isfinite(prior_diag)
    if only is not None:
        held &= np.asarray(only, dtype=bool)
    if not held.any() or held.all():
        return unchanged
    theta = pooled.mode.copy()
    value, grad = prior_gradient(density, theta)
    if not np.isfinite(value):
        return unchanged
    scale = np.sqrt(np.diag(pooled.curvature)[held]) ** -1.0   # the held coordinates' sds
    if only is not None:
        scale = np.maximum(scale, prior_diag[held] ** -0.5)
    converged = False
    for _ in range(POLISH_ITERATIONS):
        lam, q = _absolute_eigen(prior_theta(theta)[np.ix_(held, held)])
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
    if not np.all(np.isfinite(p_full)):
        return unchanged
    # the held block's inverse as the steps above took it: at the conditional mode the prior's
    # curvature along a held coordinate can vanish (a plain solve raised LinAlgError there: a
    # bounded slope's search with its transform's curvature masked)
    lam, q = _absolute_eigen(p_full[np.ix_(held, held)])
    link = np.eye(d)
    link[np.ix_(held, held)] = 0.0
    link[np.ix_(held, ~held)] = -((q / lam) @ q.T) @ p_full[np.ix_(held, ~held)]
    noise_cov = link @ pooled.noise_cov @ link.T
    if _splits(pooled.projected):
        curvature, _ = _split_curvature(mean_hess, p_full, frame, pooled.tau, pooled.projected)
    else:
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


AMPLIFICATION_MAX = 4.0
"""A pooled round's curvature enters the pool's mean only if its noise, mapped into the current
frame, is at most this many times that of the round least amplified (:func:`curvature_weights`)."""


def curvature_weights(pool: list[dict[str, Any]], frame: np.ndarray) -> tuple[np.ndarray, float]:
    """Weights of the rounds' released curvatures in the pool's mean, and that mean's noise sd on
    the scale of ``frame`` (post-processing).

    Round ``k`` released its curvature in its own frame ``A_k`` with isotropic noise ``E_k``
    (entry sd ``s_k``).  In ``theta`` space that is ``A_k^-T E_k A_k^-1``, and along a direction
    ``v`` its noise has sd ``s_k (v' P_k v)``, ``P_k = (A_k A_k')^-1``, exactly (``u = A_k^-1 v``:
    ``u' E_k u`` has sd ``s_k |u|^2``).  Against the current frame ``F`` (``P_F``, where the
    floor ``tau`` is set) the round's noise is at most ``a_k = max_v (v' P_k v) / (v' P_F v)``
    times its own, the top generalised eigenvalue.  The directions compared are those of the
    coordinates the rows depend on (the rounds' ``data_coordinates``, ``P`` restricted to them):
    the others' data curvature is noise alone and the exact prior holds them.

    A round whose ``a_k`` is beyond :data:`AMPLIFICATION_MAX` times the least one's (its noise
    variance 16 times, worth a sixteenth of a round) is left out of the mean; the others are
    averaged with equal weights and the noise sd of one frame, ``sqrt(mean s_k^2 / K)``, as
    before (within the factor, that sd may understate a round's noise along its worst direction
    up to 4 times).  Why: a round made in a frame much narrower than the current one along some
    direction (a ridge the rounds were still widening) carries a noise there that is larger by
    the square of the ratio, and the plain mean with one frame's noise sd passed such a pool as
    resolved along the ridge.  A regression with a predictor ``year`` around 1976 (sd 3.7) at
    1,000 rows, epsilon = 16, pooled 25 rounds whose frame along the (intercept, year) ridge grew
    110-fold over them; it reported a covariance 12 times too narrow there, a settled search and
    a noise of 0.5 posterior sds while it was 4 sds off (its mode 3.9-4.2 sds off over three
    noise seeds; now 0.5-0.7).  Inverse-variance weights by ``a_k`` (no cutoff) did as well there
    but cost the well-behaved cells, whose pooled frames drift by less (geometric mean of the
    worst errors 1.074 over 190 changed runs of eight cells); a cutoff at 2 cost 1.057; at 4,
    0.965 over 81 changed runs (docs/adaptation.md §3).
    """
    mask = np.asarray(pool[0]["data_coordinates"], dtype=bool)
    if not mask.any():   # no coordinate's scale was found: compare every direction
        mask = np.ones_like(mask)

    # v = E w (E the masked coordinates' columns): v' P v = |A^-1 E w|^2.  With F^-1 E = Q R,
    # w = R^-1 z turns the ratio into |A_k^-1 E R^-1 z|^2 / |z|^2, whose top is the largest
    # singular value squared; solved from the frames, never from P (ill-conditioned in theta space
    # where the frames span many decades: _gradient_noise_root)
    columns = np.eye(frame.shape[0])[:, mask]
    _, r_current = np.linalg.qr(np.linalg.solve(frame, columns))

    def ratio(a: np.ndarray) -> float:
        m = linalg.solve_triangular(r_current.T, np.linalg.solve(a, columns).T, lower=True).T
        return float(np.linalg.norm(m, 2) ** 2)

    amplification = np.array([ratio(r["frame"]) for r in pool])
    kept = amplification <= AMPLIFICATION_MAX * amplification.min()
    weight = kept / kept.sum()
    return weight, math.sqrt(float(np.sum(weight * np.array([r["sd_h"] for r in pool]) ** 2)) / kept.sum())


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
    least_curvature: float = math.nan
    """The smallest eigenvalue of the pooled curvature (released data part plus exact prior, in the
    pooling frame, signed: before :func:`_shrunk_eigen` takes absolute values) over :attr:`tau`.
    At a maximum of the posterior it is positive; below ``-1`` the log density curves *upward*
    along some direction beyond the release's noise: the rounds pooled about a saddle point or a
    funnel's neck, not a mode (:data:`stan_dp.adaptation.result.SADDLE_LIMIT`)."""
    upward: np.ndarray | None = None
    """The eigenvector of :attr:`least_curvature` mapped to ``theta`` space (``A q``; unit length in
    the pooling frame), or ``None``."""
    prior_curvature: np.ndarray | None = None
    """Mean of the pooled rounds' exact prior curvatures, weighted as :attr:`data_curvature`
    (theta space), or ``None``."""
    projected: np.ndarray | None = None
    """A group's location and scale that no row depends on (the rounds' ``"projected"``): their
    data parts are 0 in :attr:`data_curvature` (the rounds' releases projected off them,
    :func:`~stan_dp.adaptation.newton._without_rowless`) and the noise floor leaves them
    (:func:`_split_curvature`)."""

    @property
    def entry_sd(self) -> float:
        """Noise sd of one entry of :attr:`data_curvature` in the pooling frame (``tau`` is
        ``NOISE_SPECTRAL_FACTOR * entry_sd * sqrt(2 d)``)."""
        return self.tau / (NOISE_SPECTRAL_FACTOR * math.sqrt(2.0 * self.mode.size))


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


def trimmed_pool(pool: list[dict[str, Any]], pooled: _Pooled, frame: np.ndarray,
                 reach: float) -> tuple[list[dict[str, Any]], _Pooled, bool]:
    """The rounds of ``pool`` its pooled quadratic model is trusted at, and their pooled estimate.

    Parameters
    ----------
    pool : list of dict
        The near rounds pooled so far, the one just made last (at the search's current point).
    pooled : _Pooled
        Their pooled estimate (:func:`_pooled_estimate`).
    frame : ndarray
        The current frame.
    reach : float
        :func:`model_reach`: how far (posterior sds, pooled metric) from the pooled mode a round's
        point may be for the quadratic model to be trusted there.

    Returns
    -------
    pool, pooled, extrapolated
        * Some rounds beyond ``reach``: those within it, pooled, where the others are beyond
          ``reach`` of that narrower pool too (:func:`_drop_consistent`); else ``pool`` as it was.
        * Every round of two or more beyond ``reach`` and beyond twice its own one-step
          estimate's noise distance (:func:`_reach`, as :func:`_final_rounds` admits rounds): the
          round just made alone, with its own one-step estimate.  The pooled mode then lies where
          the pooled model is trusted at none of the points it was fitted at, and the release's
          noise does not explain the distance: an extrapolation, by a mean curvature flatter than
          the rounds' own along a direction the release cannot resolve, or changing fast there
          (a funnel's neck).  (Where one round's noise is several posterior sds per coordinate,
          every round is beyond the model's reach by noise alone, and pooling them is what
          averages that noise: a D = 10 logistic regression at 1,000 rows, epsilon = 1, whose
          final pool fell from at least 5 of 8 rounds to 1 in one of 24 seeds with ``reach``
          alone; ``tests/test_final_pool.py``.)
          In ``radon-slopes`` (3,000 rows, epsilon = 16) a pool of 8 rounds, every one of them
          24-31 sds from its pooled mode, sent the search 12 posterior sds down ``log sigma_a``;
          the next pools were 10^6 sds from their rounds and the run ended 5*10^5 sds off (with
          the scale fed to it by :func:`~stan_dp.adaptation.groups.hyperparameter_scale`;
          docs/adaptation.md §3, "A pool trusted at none of its rounds").  The round just made
          is the one at the search's current point, where its own quadratic model is local.
          ``extrapolated`` is True in this case only.
        * Otherwise ``pool`` and ``pooled`` as they were.

    Post-processing of the rounds' releases.
    """
    distances = [_distance(r["theta"], pooled) for r in pool]
    kept = [r for r, far in zip(pool, distances) if far <= reach]
    if not kept and len(pool) > 1 and all(far > _reach(r, pooled) for r, far in zip(pool, distances)):
        last = pool[-1:]
        return last, _pooled_estimate(last, frame), True
    if kept and len(kept) < len(pool):
        narrower = _pooled_estimate(kept, frame)
        # A round leaves only if it is far from what is left as well: the round just made sits at
        # the previous pooled mode, so dropping it for being far from the pool it joined, and
        # returning to that mode, repeats itself round after round (seen: 20 rounds at one point
        # 11 sds off; _drop_consistent).
        if _drop_consistent(pool, kept, narrower, reach):
            return kept, narrower, False
    return pool, pooled, False


def model_reach(d: int) -> float:
    """``3 sqrt(d) + 3``: how far (posterior sds, in the pooled metric) a round's point may be from
    the pooled mode for its quadratic model to be trusted there."""
    return 3.0 * math.sqrt(d) + 3.0


NOISE_REACH = 2.0
""":func:`_reach` admits a round whose point is within this many times its one-step estimate's
noise distance (:func:`_noise_distance`) of the search's estimate: an isotropic ``d``-dimensional
Gaussian stays within twice the root of its expected squared norm with probability
``P(chi2_d <= 4 d)``, 0.98 at ``d = 2``, 0.993 at ``d = 3`` and 0.997 at ``d = 4`` (0.95 where one
direction carries all the noise)."""
HAUSMAN_QUANTILE = 0.99
""":func:`_final_rounds` keeps the search's own pool where Hausman's statistic is beyond this
quantile of its chi-squared law."""


def _noise_distance(round_: dict[str, Any], pooled: _Pooled) -> float:
    """Root of the expected squared distance (pooled metric) of a round's one-step estimate from
    the mode by its release's noise alone: ``e = theta + H^-1 g`` has noise covariance
    ``H^-1 S H^-1`` (``S = s^2 (A A')^-1`` the released gradient's, ``A`` the round's frame and
    ``s`` its noise sd), so ``E |e - mode|_H^2 = trace(S H^-1) = s^2 trace((A' H A)^-1)``, taken in
    the round's frame, where the pooled curvature is about the identity (in ``theta`` space both
    matrices spanned 14 decades in ``radon``: _gradient_noise_root)."""
    frame = round_["frame"]
    in_frame = frame.T @ pooled.curvature @ frame
    spread = float(np.trace(np.linalg.pinv(0.5 * (in_frame + in_frame.T))))
    return float(round_["grad_sd"]) * math.sqrt(max(spread, 0.0))


def _reach(round_: dict[str, Any], pooled: _Pooled) -> float:
    """``max(model_reach(d), NOISE_REACH * noise distance)``: how far a round's point may be from
    the search's estimate for :func:`_final_rounds` to admit it — the quadratic model's reach, or,
    where one round's noise is larger, as far as that noise puts a point (a search whose pool
    keeps one round evaluates each round at the previous round's one-step estimate)."""
    return max(model_reach(pooled.mode.size), NOISE_REACH * _noise_distance(round_, pooled))


def _hausman(a_mode: np.ndarray, a_cov: np.ndarray, b_mode: np.ndarray,
             b_cov: np.ndarray) -> tuple[float, int]:
    """Hausman's statistic for estimate ``a`` against the efficient ``b`` and its degrees of freedom.

    Where both estimate the same mode and ``b`` is the efficient (precision-weighted) pool of a
    superset of ``a``'s independent rounds, ``a - b`` is uncorrelated with ``b``, so its covariance
    is ``V_a - V_b`` (Hausman 1978, Lemma 2.1) and ``(a - b)' (V_a - V_b)^+ (a - b)`` is
    chi-squared with the rank of ``V_a - V_b`` degrees of freedom.  Directions where ``V_a - V_b``
    is not positive (the pools' curvatures differ a little) are left out: the test then has fewer
    degrees of freedom, not a noise-free direction.
    """
    v = a_cov - b_cov
    lam, q = np.linalg.eigh(0.5 * (v + v.T))
    positive = lam > 1e-12 * max(float(np.max(np.abs(lam))), 1e-300)
    z = (q.T @ (a_mode - b_mode))[positive] / np.sqrt(lam[positive])
    return float(z @ z), int(positive.sum())


def _final_rounds(pool: list[dict[str, Any]], streak: list[dict[str, Any]],
                  frame: np.ndarray) -> list[dict[str, Any]]:
    """The rounds the final estimate pools: the search's pool, or more of the near rounds where it
    kept few of them and they agree with it (post-processing).

    ``pool`` is the search's pool at the end, ``streak`` every near round since the last round that
    was not near (a superset of ``pool``: rounds leave the pool during the search when their point
    is beyond :func:`model_reach` of the pooled mode).

    Where one round's noise is several posterior sds per coordinate, every round's point is beyond
    the model's reach of the mode by noise alone, rounds leave the pool as fast as they join it,
    and the search's estimate carries the noise of one round: a D = 10 logistic regression at 1,000
    rows, epsilon = 1 (one-step noise 4.9 posterior sds per coordinate, a noise distance of 16
    against a reach of 12.9) pooled one round of eight in 15 of 24 runs, at most four in any.  So
    where the pool holds at most half of the streak, the streak's rounds within :func:`_reach` of
    the search's estimate (the model's reach, or twice their noise distance) are pooled and
    replace ``pool``, unless Hausman's test (:func:`_hausman`) says the search's estimate is
    farther from theirs than its own noise explains, or their one-step estimates disagree among
    themselves beyond their noise (:func:`_rounds_agree`): either says they are far for another
    reason than noise.

    The gate and the distance from the search's estimate keep out rounds that are far for
    another reason than noise, whose one-step estimates lag behind the mode; the test alone
    (no gate, distances from the pool of the whole streak) could not see them, since a pool of
    one round has a wide noise (24 runs per model, 1,000 rows, epsilon = 1, against NUTS,
    geometric mean of the worst errors' ratios): a search that crept along a ridge, its frame too
    narrow there and the curvature floored (gamma GLM 1.09, censored Weibull 1.07; in one gamma
    run the streak's rounds were 5-15 sds behind and pooling them took it from 6.0 to 10.9 sds
    off), and rounds still converging from a far start beside a pool of five to seven (``wells``
    1.15, and 1.19 measured from the search's estimate without the gate: one early round of eight
    moved the estimate by 1.4 sds).  With both, ``wells`` is as before and the gamma GLM and the
    Weibull within their noise (0.99 and 1.02, p = 0.72 and 0.17; docs/adaptation.md §3,
    "Pooling").
    """
    if len(streak) < 2 or 2 * len(pool) > len(streak):
        return pool
    own = _pooled_estimate(pool, frame)
    if not (np.all(np.isfinite(own.curvature)) and np.all(np.isfinite(own.noise_cov))
            and all(np.all(np.isfinite(r["frame"])) and math.isfinite(r["grad_sd"]) for r in streak)):
        return pool   # a search gone to infinity: nothing to judge the rounds by
    ids = {id(r) for r in pool}
    admitted = [r for r in streak if id(r) in ids or _distance(r["theta"], own) <= _reach(r, own)]
    if len(admitted) <= len(pool):
        return pool
    # both fixed-effect pools: the lemma holds for them under the null; rounds that disagree widen
    # a random-effects pool past the search's own, which would leave the test nothing to test
    wide = _pooled_estimate(admitted, frame)
    if not (np.all(np.isfinite(wide.mode)) and np.all(np.isfinite(wide.noise_cov))):
        return pool
    statistic, dof = _hausman(own.mode, own.noise_cov, wide.mode, wide.noise_cov)
    if not (dof > 0 and statistic <= float(stats.chi2.ppf(HAUSMAN_QUANTILE, dof))):
        return pool
    # the premise: rounds far by their noise alone, whose one-step estimates then differ by it
    return admitted if _rounds_agree(admitted, frame) else pool


def _rounds_agree(rounds: list[dict[str, Any]], frame: np.ndarray) -> bool:
    """Whether the one-step estimates of ``rounds`` differ by their noise alone: the dispersion
    ``Q`` of their fixed-effect pool (:func:`_pooled_estimate`) within its
    :data:`DISPERSION_QUANTILE` quantile, the test that turns the final pooling to random effects.

    Hausman's test compares the search's estimate with the wider pool's; it cannot see that the
    wider pool's rounds disagree among themselves where the search's own estimate is noisy (a pool
    of a few rounds in an unresolved frame).  Rounds whose one-step estimates disagree beyond
    their noise are far for another reason than noise: where the pooled curvature is unresolved
    along a ridge (floored, several times too small there) a one-step estimate overshoots by a
    multiple of its point's distance, so rounds still converging from afar scatter along the ridge.
    A normal regression on a predictor around 170 (``tests/stan/scale_flat.stan``, 2,000 rows,
    epsilon = 1) pooled ten such rounds, their one-step estimates from 143 sds on one side to 33 on
    the other (``Q / dof`` = 3.1), and ended 29-32 sds off, where the search's own pool of five and
    its last point were 3.5-4.3 off (``tests/test_final_pool.py``).
    """
    pooled = _pooled_estimate(rounds, frame, random_effects=True)
    dof = frame.shape[0] * (len(rounds) - 1)
    return bool(pooled.dispersion * dof <= float(stats.chi2.ppf(DISPERSION_QUANTILE, dof)))   # NaN: no


DISPERSION_QUANTILE = 0.99
"""The final pooling (:func:`_pooled_estimate` with ``random_effects``) turns to random effects
where the rounds' disagreement ``Q`` exceeds this quantile of its chi-squared law under the noise
alone (so that 1 % of runs whose rounds differ by their noise alone are pooled that way too)."""


def _gradient_noise_root(round_: dict[str, Any], frame: np.ndarray) -> np.ndarray:
    """``R = F^-1 A / s``: ``R R'`` is a round's released-gradient precision in the units
    ``u = F^-1 theta`` of ``frame`` (``F``).

    The round released its gradient in its own frame ``A`` (``round_["frame"]``) with isotropic
    noise sd ``s`` (``round_["grad_sd"]``): in ``theta`` space the noise has precision
    ``A A' / s^2``, and the gradient in ``u`` (``F' g``) has ``(F^-1 A)(F^-1 A)' / s^2``.  Solved
    from ``A``, never formed in ``theta`` space: where the frames span many decades (``radon``'s
    county axes, a count search's floor) ``A A'`` and the pooled precision ``H A A' H`` had
    condition numbers near 1e14, their pseudo-inverse lost every digit along the weak directions,
    and a pool in the ``radon-slopes`` battery (1,000 rows, epsilon = 16, data set 1, noise seed
    11) reported noise variances 470 times too small on two coordinates and a negative one on a
    third; in ``u`` the same precision has a condition number of 1.3-20.
    """
    return np.linalg.solve(frame, round_["frame"]) / float(round_["grad_sd"])


def _pooled_estimate(pool: list[dict[str, Any]], frame: np.ndarray,
                     random_effects: bool = False) -> _Pooled:
    """Pool near rounds: mean released curvature, then precision-weighted one-step estimates.

    The curvature is the mean of the rounds' released (symmetric, unprojected)
    curvatures mapped to ``theta`` space (of the rounds :func:`curvature_weights`
    keeps: those whose noise in the current frame is not far beyond the others'),
    made positive definite once, in the current frame, against the noise of that
    mean (so the projection's upward bias is that of the pooled noise, not of one
    round's).  Each round gives
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
    weights, sd_h = curvature_weights(pool, frame)
    mean_hess = np.einsum("k,kij->ij", weights, np.array([r["hess"] for r in pool]))
    mean_prior = np.einsum("k,kij->ij", weights, np.array([r["prior_hess"] for r in pool]))
    tau = NOISE_SPECTRAL_FACTOR * sd_h * math.sqrt(2.0 * d)
    data_f, prior_f = frame.T @ mean_hess @ frame, frame.T @ mean_prior @ frame   # frame units
    lam_step, lam, q = _step_eigen(data_f, prior_f, tau)   # the one-step estimates divide by lam_step
    least_curvature, upward = _least_curvature(data_f, prior_f, tau)
    inv_frame = np.linalg.inv(frame)
    projected = pool[0].get("projected")
    if _splits(projected):
        # the floor only where the release's noise is: along the projected ones the prior is exact
        curvature, lam_rows = _split_curvature(mean_hess, mean_prior, frame, tau, projected)
        resolved = bool(np.all(lam_rows > 1.0001 * min(1.0, tau)))
    else:
        curvature = inv_frame.T @ ((q * lam) @ q.T) @ inv_frame
        curvature = 0.5 * (curvature + curvature.T)
        resolved = bool(np.all(lam > 1.0001 * min(1.0, tau)))
    # the one-step estimates, their weights and their sum in the frame's units u = A^-1 theta
    # (_gradient_noise_root); H^-1 = Q diag(1/lam_step) Q' there (uncapped: Newton's estimates)
    curvature_f = (q * lam) @ q.T
    h_inv_f = (q / lam_step) @ q.T
    estimates = [np.linalg.solve(frame, r["theta"]) + h_inv_f @ (frame.T @ r["grad"]) for r in pool]
    precision = np.zeros((d, d))
    weighted = np.zeros(d)
    for r, estimate in zip(pool, estimates):
        root = curvature_f @ _gradient_noise_root(r, frame)
        p = root @ root.T
        precision += p
        weighted += p @ estimate
    cov_f = np.linalg.pinv(precision)
    noise_cov = frame @ cov_f @ frame.T
    mode = frame @ (cov_f @ weighted)
    diag_sd = np.sqrt(np.sum([(w * r["hess_diag_sd"]) ** 2 for w, r in zip(weights, pool)], axis=0))
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
        steps = np.array([inv_root @ (frame @ estimate - mode) for estimate in estimates])
        covs = [np.linalg.pinv(g @ g.T) for g in (_gradient_noise_root(r, root) for r in pool)]
        dof = d * (len(pool) - 1)
        q_fixed = _dispersion_q(steps, covs, 0.0)[0]
        dispersion = q_fixed / dof
        if q_fixed > stats.chi2.ppf(DISPERSION_QUANTILE, dof):
            heterogeneity, shift, cov_z = _random_effects(steps, covs, dof)
            mode = mode + root @ shift
            noise_cov = root @ cov_z @ root.T
    return _Pooled(mode, 0.5 * (noise_cov + noise_cov.T), curvature, next_frame, resolved, mean_hess, tau,
                   diag_sd, dispersion, heterogeneity, least_curvature, frame @ upward, mean_prior, projected)


def _least_curvature(data: np.ndarray, prior: np.ndarray, tau: float) -> tuple[float, np.ndarray]:
    """Smallest eigenvalue of ``data + prior`` (frame units, signed) over the noise's spectral norm
    ``tau`` (:attr:`_Pooled.least_curvature`), and its eigenvector (frame units); NaN and zeros
    where it cannot be computed.

    ``data`` is the released (noisy) curvature and ``prior`` the exact prior's, both negative
    Hessians in the same frame.  A symmetric noise matrix moves every eigenvalue by at most its
    spectral norm (Weyl), which ``tau`` bounds with a margin (:data:`NOISE_SPECTRAL_FACTOR`), so a
    value below ``-1`` means the noiseless curvature has a negative eigenvalue: the log density is
    convex along that direction.  Post-processing of released values.
    """
    total = 0.5 * (data + data.T) + 0.5 * (prior + prior.T)
    if not (np.all(np.isfinite(total)) and np.isfinite(tau) and tau > 0.0):
        return math.nan, np.zeros(total.shape[0])
    lam, q = np.linalg.eigh(total)
    return float(lam[0] / tau), q[:, 0]


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
    while True:
        q_high, mode, cov = _dispersion_q(steps, covs, high)
        if q_high <= dof:
            break
        if high >= MAX_HETEROGENEITY:
            return float(high), mode, cov
        high *= 2.0
    c = optimize.brentq(lambda x: _dispersion_q(steps, covs, x)[0] - dof, 0.0, high,
                        xtol=1e-9 * high, rtol=1e-9)
    _, mode, cov = _dispersion_q(steps, covs, c)
    return float(c), mode, cov
