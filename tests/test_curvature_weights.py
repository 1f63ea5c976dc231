"""The pooled curvature's weights and noise level when the rounds were released in different frames.

``pooling.curvature_weights`` (post-processing): round ``k``'s curvature noise ``E_k`` (entry sd
``s_k``, isotropic in its frame ``A_k``) lands in the current frame ``F`` as ``T_k' E_k T_k``,
``T_k = A_k^-1 F``; rounds whose noise there is beyond ``AMPLIFICATION_MAX`` times the least
amplified one's leave the mean.  Checked against a simulation of the releases' noise
(``releases.clipped_matrix_sum``: diagonal sd ``s``, off-diagonal ``s / sqrt(2)``, mirrored).
"""

from __future__ import annotations

import math

import numpy as np

from stan_dp.adaptation import pooling
from stan_dp.adaptation.plan import NOISE_SPECTRAL_FACTOR


def _round(frame: np.ndarray, sd_h: float, data_coordinates: np.ndarray | None = None) -> dict:
    d = frame.shape[0]
    data_coordinates = np.ones(d, dtype=bool) if data_coordinates is None else data_coordinates
    return {"theta": np.zeros(d), "grad": np.zeros(d), "grad_sd": 1.0,
            "hess": np.eye(d), "prior_hess": np.zeros((d, d)), "sd_h": sd_h, "frame": frame,
            "data_coordinates": data_coordinates,
            "hess_diag_sd": pooling.curvature_diagonal_sd(sd_h, np.linalg.inv(frame))}


def _symmetric_noise(rng: np.random.Generator, reps: int, d: int, s: float) -> np.ndarray:
    iu = np.triu_indices(d)
    e = np.zeros((reps, d, d))
    e[:, iu[0], iu[1]] = rng.normal(size=(reps, iu[0].size)) * np.where(iu[0] == iu[1], s, s / math.sqrt(2))
    return e + np.triu(e, 1).transpose(0, 2, 1)


def test_rounds_in_one_frame_get_the_plain_mean_and_its_noise():
    frame = np.array([[2.0, 0.3, 0.0], [0.0, 0.5, 0.1], [0.0, 0.0, 1.5]])
    pool = [_round(frame, 0.2) for _ in range(4)]
    weights, sd = pooling.curvature_weights(pool, frame)
    np.testing.assert_allclose(weights, 0.25)
    assert math.isclose(sd, 0.2 / 2.0, rel_tol=1e-12)
    # unequal noise sds in one frame: the plain mean, whose noise sd is sqrt(mean s^2 / K)
    pool = [_round(frame, 0.2), _round(frame, 0.4)]
    weights, sd = pooling.curvature_weights(pool, frame)
    np.testing.assert_allclose(weights, [0.5, 0.5])
    assert math.isclose(sd, math.sqrt((0.04 + 0.16) / 2 / 2), rel_tol=1e-12)


def test_the_floor_covers_the_noise_of_rounds_made_in_narrower_frames():
    """Four rounds whose frames were 30, 10, 3 and 1 times narrower along a ridge direction than the
    current frame (the rounds were widening it).  In the current frame the pooled noise's spectral
    norm stays below ``tau = NOISE_SPECTRAL_FACTOR * sd * sqrt(2 d)`` in nearly every draw with the
    weights and sd of ``curvature_weights``; the plain mean with one frame's ``s / sqrt(K)`` (the
    rule before) is exceeded in nearly every draw, 10,000 draws each."""
    rng = np.random.default_rng(4)
    d, s, reps = 3, 0.1, 10_000
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    current = q @ np.diag([0.5, 2.0, 1.0])
    ridge = q[:, 1] / np.linalg.norm(q[:, 1])
    frames = [current - (1.0 - 1.0 / r) * np.outer(ridge, ridge) @ current for r in (30.0, 10.0, 3.0, 1.0)]
    pool = [_round(a, s) for a in frames]
    weights, sd = pooling.curvature_weights(pool, current)
    # their noise along the ridge is 900, 100, 9 and 1 times the last one's: only the last is kept
    np.testing.assert_array_equal(weights, [0.0, 0.0, 0.0, 1.0])

    def norms(w):
        total = np.zeros((reps, d, d))
        for wk, a in zip(w, frames):
            t = np.linalg.solve(a, current)
            total += wk * np.einsum("ki,rkl,lj->rij", t, _symmetric_noise(rng, reps, d, s), t)
        return np.linalg.norm(total, ord=2, axis=(1, 2))

    tau = NOISE_SPECTRAL_FACTOR * sd * math.sqrt(2 * d)
    assert np.mean(norms(weights) > tau) < 0.01
    plain_tau = NOISE_SPECTRAL_FACTOR * (s / 2.0) * math.sqrt(2 * d)
    assert np.mean(norms(np.full(4, 0.25)) > plain_tau) > 0.95


def test_a_frame_widening_along_a_coordinate_no_row_depends_on_keeps_the_rounds():
    """A hierarchical mean's frame keeps widening (the exact prior holds it; the rows' curvature
    there is noise alone): rounds made in frames 1.4 to 12 times narrower along it stay in the mean,
    where the same frames along a coordinate the rows depend on leave it."""
    d, s = 3, 0.1
    current = np.diag([1.0, 1.0, 3.0])
    frames = [np.diag([1.0, 1.0, 3.0 / r]) for r in (12.0, 4.0, 1.4, 1.0)]
    depends = np.array([True, True, False])   # the rows depend on the first two coordinates
    weights, sd = pooling.curvature_weights([_round(a, s, depends) for a in frames], current)
    np.testing.assert_allclose(weights, 0.25)
    assert math.isclose(sd, s / 2.0, rel_tol=1e-12)
    weights, _ = pooling.curvature_weights([_round(a, s) for a in frames], current)
    np.testing.assert_array_equal(weights > 0, [False, False, True, True])   # 144, 16, 1.96, 1
