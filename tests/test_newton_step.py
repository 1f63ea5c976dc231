"""A Newton step divides by the curvature, not by the cap a frame puts on it (``STEP_CURVATURE_TOP``).

``_shrunk_eigen`` caps eigenvalues at ``CURVATURE_CAP`` (1e8, frame units) so that one round
narrows the frame at most 1e4-fold.  Divided by the capped eigenvalue, a step along a curvature
beyond the cap is longer than Newton's by their ratio: far from a prior's mode (a scale parameter
whose half-normal prior's curvature grows like ``sigma^2``) that was 1e5 units or more.
"""

from __future__ import annotations

import math

import numpy as np

from stan_dp.adaptation import AdaptationSettings, curvature, newton
from stan_dp.adaptation.curvature import CURVATURE_CAP, _shrunk_eigen
from stan_dp.adaptation.forecast import pld_mean_budget

LOG_2PI = math.log(2.0 * math.pi)


class HalfNormalScale:
    """``y_i ~ N(mu, sigma)``, ``mu`` flat, ``sigma ~ N+(0, 100)``; unconstrained ``(mu, log sigma)``."""

    def __init__(self, y: np.ndarray) -> None:
        self.y = np.asarray(y, float)
        self.n_rows, self.dim, self.param_names = int(self.y.size), 2, ["mu", "sigma"]

    def log_prior_grad(self, th: np.ndarray) -> tuple[float, np.ndarray]:
        s2 = np.exp(2.0 * th[1])
        return float(-0.5 * s2 / 1e4 + th[1]), np.array([0.0, -s2 / 1e4 + 1.0])

    def log_prior(self, th: np.ndarray) -> float:
        return self.log_prior_grad(th)[0]

    def row_log_lik_grad(self, th: np.ndarray, rows=None):
        y = self.y if rows is None else self.y[np.asarray(rows)]
        with np.errstate(over="ignore", invalid="ignore"):
            z = (y - th[0]) * np.exp(-th[1])
            return -0.5 * z * z - th[1] - 0.5 * LOG_2PI, np.stack([z * np.exp(-th[1]), z * z - 1.0], axis=1)

    def row_log_lik(self, th: np.ndarray, rows=None) -> np.ndarray:
        return self.row_log_lik_grad(th, rows)[0]

    def constrain(self, th: np.ndarray) -> dict[str, np.ndarray]:
        return {"mu": np.asarray(th[0]), "sigma": np.asarray(np.exp(th[1]))}


def test_shrunk_eigen_caps_at_its_top_only():
    prior = np.diag([1e15, 2.0])
    lam, _ = _shrunk_eigen(np.zeros((2, 2)), prior, tau=0.1)
    np.testing.assert_allclose(np.sort(lam), [2.0, CURVATURE_CAP])
    lam, _ = _shrunk_eigen(np.zeros((2, 2)), prior, tau=0.1, top=math.inf)
    np.testing.assert_allclose(np.sort(lam), [2.0, 1e15])


def _log_sigma_moves(seed: int) -> list[float]:
    """The first rounds' moves of ``log sigma`` from a start at ``sigma = e^20`` (1,000 rows, epsilon = 4),
    the first step's trust region lifted: it shortens the whole move (``mu``'s step from 0 is
    beyond it), which is not what is tested here."""
    model = HalfNormalScale(np.random.default_rng(0).normal(3.0, 2.0, 1000))
    trace: list[dict] = []
    newton.private_mode(model, n_public=1000, pld_mean=pld_mean_budget(4.0, 1e-5), relation="replace_one",
                        rng_noise=np.random.default_rng(seed), init=np.array([0.0, 20.0]),
                        settings=AdaptationSettings(far_rounds=0, first_radius=math.inf), trace=trace)
    return [float(t["step"][1]) for t in trace if "eig" in t][:2]


def test_a_step_along_a_curvature_beyond_the_cap_is_newtons(monkeypatch):
    # At sigma = e^20 the rows are flat (their gradient along log sigma is about -1 each) and the
    # prior's is -(sigma^2 / 1e4 - 1) ~ -2.4e13 with a curvature of 2 sigma^2 / 1e4 ~ 4.7e13 (the
    # frame's scale along log sigma is 1: no row measures it): Newton's step is -0.5, each round.
    for seed in range(3):
        moves = _log_sigma_moves(seed)
        np.testing.assert_allclose(moves, [-0.5, -0.5], atol=1e-3)
    # divided by the cap instead, the first move is sigma^2 / 1e4 / 1e8 ~ 2.4e5 the wrong way past
    # the mode, where sigma is 0 and the rows are infinite
    monkeypatch.setattr(curvature, "STEP_CURVATURE_TOP", CURVATURE_CAP)
    capped = _log_sigma_moves(0)
    np.testing.assert_allclose(capped[0], -math.exp(40.0) / 1e4 / CURVATURE_CAP, rtol=1e-3)
