"""Shared fixtures: compiled Stan models and data sets.

Compiled libraries go to the per-user cache (``STAN_DP_CACHE`` or
``~/.cache/stan_dp``), so a machine compiles each model once.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "stan_models"
TEST_MODELS = Path(__file__).resolve().parent / "stan"


def bundled(name: str) -> Path:
    """Path of a bundled model."""
    return BUNDLED / f"{name}.stan"


def stan_test_model(name: str) -> Path:
    """Path of a test-only model."""
    return TEST_MODELS / f"{name}.stan"


def traced_adaptation(model, epsilon: float, seed: int, **settings):
    """``stan_dp.sample``'s adaptation of ``model`` (delta 1e-5, replace-one, default settings and
    start; ``settings`` overrides ``AdaptationSettings`` fields, for counterfactuals), its warnings
    silenced: ``(trace, adapted)``, the trace one dict per far or Newton round (far rounds carry
    ``"far": True``)."""
    import warnings

    from stan_dp.adaptation import AdaptationSettings
    from stan_dp.auto import _adapt

    trace: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adapted = _adapt(model, epsilon=epsilon, delta=1e-5, share=1.0, seed=seed, relation="replace_one",
                         public_n=None, start=np.zeros(model.dim), settings=AdaptationSettings(**settings),
                         trace=trace)
    return trace, adapted


def exact_negative_log_density(model, theta: np.ndarray) -> tuple[float, np.ndarray]:
    """The exact negative log density of ``model`` (``row_log_lik_grad`` summed over every row plus
    ``log_prior_grad``) and its gradient (NOT private: a yardstick)."""
    lik, grad = model.row_log_lik_grad(theta)
    prior, prior_grad = model.log_prior_grad(theta)
    return -(float(np.sum(lik)) + prior), -(np.asarray(grad).sum(axis=0) + prior_grad)


def neg_hessian(grad, theta: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """``-d grad / d theta`` of a gradient function ``grad`` by central differences (symmetrised)."""
    d = theta.size
    out = np.empty((d, d))
    for j in range(d):
        e = np.zeros(d)
        e[j] = h
        out[:, j] = -(grad(theta + e) - grad(theta - e)) / (2 * h)
    return 0.5 * (out + out.T)


def exact_neg_hessian(model, theta: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """The exact log density's negative Hessian at ``theta`` (:func:`neg_hessian` of the gradient
    of :func:`exact_negative_log_density`; NOT private)."""
    return neg_hessian(lambda t: -exact_negative_log_density(model, t)[1], np.asarray(theta, dtype=float), h)


def flat_regression_posterior(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact posterior of ``y ~ normal(x beta, sigma)`` with flat priors on ``beta`` and on
    ``sigma > 0``: ``beta`` is a t with ``n - p - 1`` degrees of freedom about least squares, mean
    the least-squares fit and covariance ``RSS / (n - p - 3) (X'X)^-1`` (``sigma^-n exp(-S / 2
    sigma^2)`` integrates over ``sigma`` to ``S^-(n - 1) / 2``).  Returns that mean, covariance and
    the whitening ``W`` with ``W cov W' = I``, all from the design's SVD (no ill-conditioned
    inverse)."""
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    beta = vt.T @ ((u.T @ y) / s)
    rss = float(np.sum((y - x @ beta) ** 2))
    n, p = x.shape
    scale2 = rss / (n - p - 3)
    return beta, (vt.T / s**2) @ vt * scale2, (s[:, None] * vt) / np.sqrt(scale2)


def plain_curvature_weights(pool, frame):
    """``pooling.curvature_weights`` as the pool had it before it weighed the rounds by their noise in
    the current frame: the plain mean, with the noise sd of one frame (for counterfactual tests)."""
    k = len(pool)
    return np.full(k, 1.0 / k), math.sqrt(float(np.mean([r["sd_h"] ** 2 for r in pool])) / k)


@pytest.fixture
def search_result(monkeypatch):
    """A dict whose ``"result"`` is the :class:`~stan_dp.adaptation.result.AdaptationResult` of the
    latest private search ``stan_dp.sample`` ran (its ``auto.private_mode`` wrapped, not changed)."""
    import stan_dp.auto as auto

    captured: dict = {}
    real = auto.private_mode

    def keep(*args, **kwargs):
        captured["result"] = result = real(*args, **kwargs)
        return result

    monkeypatch.setattr(auto, "private_mode", keep)
    return captured


@pytest.fixture(scope="session")
def compiled():
    """Compile (or fetch from the cache) a model by path, once per session."""
    from stan_dp import compile_model

    cache: dict[Path, Path] = {}

    def get(path: Path) -> Path:
        if path not in cache:
            cache[path] = compile_model(path)
        return cache[path]

    return get


def logistic_data(n: int = 200, d: int = 3, seed: int = 1) -> dict:
    """Simulated logistic-regression data for the bundled model."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    beta = np.linspace(-1.0, 1.0, d)
    p = 1.0 / (1.0 + np.exp(-(0.3 + x @ beta)))
    y = (rng.random(n) < p).astype(int)
    return {"N": n, "D": d, "X": x, "y": y, "prior_scale": 2.5}


def linear_data(n: int = 100, d: int = 2, seed: int = 2, unknown_scale: bool = False) -> dict:
    """Simulated linear-regression data for the bundled models."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = 0.5 + x @ np.arange(1, d + 1) + rng.normal(scale=1.5, size=n)
    data = {"N": n, "D": d, "X": x, "y": y, "prior_scale": 5.0}
    if unknown_scale:
        data["sigma_scale"] = 3.0
    else:
        data["sigma"] = 1.5
    return data


def banana_data(n: int = 100, d: int = 3, seed: int = 3) -> dict:
    """Data for the bundled banana model with the thesis's Fig. 2.1 settings."""
    rng = np.random.default_rng(seed)
    sigma = np.ones(d)
    sigma[0], sigma[1] = np.sqrt(20.0), np.sqrt(2.5)
    x = rng.normal(size=(n, d)) * sigma
    return {"N": n, "d": d, "x": x, "a": 20.0, "b": 0.0, "m": 0.0,
            "sigma0": np.sqrt(1000.0), "sigma": sigma}


def mixed_data(n: int = 7, k: int = 3, seed: int = 4) -> dict:
    """Data for tests/stan/rows_mixed.stan."""
    rng = np.random.default_rng(seed)
    return {
        "N": n, "K": k,
        "u": rng.normal(size=(n, 2)),
        "g": rng.integers(1, k + 1, size=n),
        "Z": rng.normal(size=(n, 3)),
        "w": rng.normal(size=k),
    }
