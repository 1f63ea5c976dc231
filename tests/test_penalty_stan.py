"""The penalty sampler on compiled Stan models, end to end.

Oracle: the exact Gaussian posterior of Bayesian linear regression with a
known noise scale and normal priors (bundled linear_regression.stan), which
is conjugate.  With a clip bound that never binds the penalty chain targets
that posterior exactly, whatever the noise (Yıldırım, Section 2).
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pytest

import stan_dp
import stan_dp.inference
from conftest import bundled, linear_data
from stan_dp import RowModel
from stan_dp.accounting import Budget, Release


def exact_posterior(data: dict) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of (alpha, beta) under the conjugate normal model."""
    design = np.column_stack([np.ones(data["N"]), data["X"]])
    precision = design.T @ design / data["sigma"] ** 2 + np.eye(design.shape[1]) / data["prior_scale"] ** 2
    cov = np.linalg.inv(precision)
    mean = cov @ design.T @ data["y"] / data["sigma"] ** 2
    return mean, cov


@pytest.fixture(scope="module")
def linear(compiled):
    data = linear_data(n=30, d=2, seed=12)
    return RowModel(compiled(bundled("linear_regression")), data), data


def test_penalty_on_a_stan_model_targets_the_exact_posterior(linear):
    model, data = linear
    mean, cov = exact_posterior(data)
    sd = np.sqrt(np.diag(cov))
    # Per-row gradients stay below clip = 15 on the region the chain visits, so
    # clipping never binds (asserted below); noise sd = 2 * 0.05 * 15 * |move| ~ 0.5.
    # The budget is huge on purpose: this test is about exactness, not privacy.
    with pytest.warns(stan_dp.inference.PrivacyWarning):
        fit = stan_dp.penalty(
            model, epsilon=1e7, delta=1e-5, iterations=6000, noise=0.05, clip=15.0,
            step_size=sd * 1.5, proposal="component", chains=2, warmup=500,
            init=np.zeros(model.dim), seed=2024, progress=False, release_clip_fraction=True,
        )
    assert float(fit.sample_stats["clip_fraction"].max()) == 0.0  # clipping never bound
    assert fit.posterior.attrs["noise_multiplier"] == pytest.approx(0.05)
    draws = np.column_stack([
        fit.posterior["alpha"].values.reshape(-1),
        fit.posterior["beta"].values.reshape(-1, 2),
    ])
    ess = np.array([
        float(az.ess(fit.posterior["alpha"].values)),
        *[float(az.ess(fit.posterior["beta"].values[:, :, k])) for k in range(2)],
    ])
    assert np.all(ess > 400), ess
    mcse = sd / np.sqrt(ess)
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * mcse), (draws.mean(axis=0), mean, mcse)
    np.testing.assert_allclose(draws.std(axis=0), sd, rtol=0.1)


def test_output_contract_on_a_stan_model(linear):
    model, _ = linear
    fit = stan_dp.penalty(
        model, epsilon=1.0, delta=1e-5, iterations=200, clip=2.0, step_size=0.1,
        proposal="gaussian", chains=2, warmup=50, seed=7, progress=False,
    )
    assert set(fit.groups()) >= {"posterior", "sample_stats", "warmup_posterior"}
    assert "observed_data" not in fit.groups()
    assert fit.posterior["beta"].shape == (2, 200, 2)
    assert fit.posterior["alpha"].shape == (2, 200)
    attrs = fit.posterior.attrs
    budget = Budget(1.0, 1e-5)
    expected = budget.epsilon_spent([Release(attrs["noise_multiplier"])], iterations=250, chains=2)
    assert attrs["epsilon_spent"] == pytest.approx(expected, rel=1e-12)
    assert attrs["epsilon_spent"] == pytest.approx(1.0, rel=1e-9)
    assert attrs["n_rows"] == model.n_rows and attrs["seeded"] == 1
    for name in ("lp", "clip_fraction"):
        assert name not in fit.sample_stats  # un-noised data-derived values stay inside
