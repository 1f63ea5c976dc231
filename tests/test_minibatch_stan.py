"""The minibatch samplers on a compiled Stan model, end to end, with tempering.

Oracle: the exact tempered posterior of Bayesian linear regression with a
known noise scale (bundled linear_regression.stan, D = 1), which is
conjugate: precision ``T X'X / sigma^2 + I / s0^2``.  Tolerances: means within
4 MCSE (bulk ESS), sds within 10 %.  These are approximate algorithms (the
subsampling error is treated as Gaussian by the CLT; V_corr is approximate;
clipping may bind on far-tail proposals), but for this model the per-row
ratios are smooth in ``y`` and a batch of 200 rows makes the CLT error
negligible next to the Monte Carlo error (the NumPy tests in test_subsampled.py
and test_barker.py measure < 1 MCSE); the budgets are huge on purpose: these
tests are about the target, the accounting is tested elsewhere.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import stan_dp
from conftest import bundled, linear_data
from stan_dp import RowModel
from stan_dp.inference import PrivacyWarning

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

N = 2000


def tempered_posterior(data: dict, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean and sd of (alpha, beta[1]) with the likelihood raised to ``temperature``."""
    design = np.column_stack([np.ones(data["N"]), data["X"]])
    precision = temperature * design.T @ design / data["sigma"] ** 2 + np.eye(2) / data["prior_scale"] ** 2
    cov = np.linalg.inv(precision)
    mean = cov @ (temperature * design.T @ data["y"] / data["sigma"] ** 2)
    return mean, np.sqrt(np.diag(cov))


@pytest.fixture(scope="module")
def linear(compiled):
    data = linear_data(n=N, d=1, seed=21)
    return RowModel(compiled(bundled("linear_regression")), data), data


def check_fit(fit, mean, sd):
    draws = [fit.posterior["alpha"].values, fit.posterior["beta"].values[..., 0]]
    for x, m, s in zip(draws, mean, sd):
        ess = float(az.ess(x))
        assert ess > 300, ess
        assert abs(x.mean() - m) < 4 * x.std() / np.sqrt(ess), (x.mean(), m, x.std() / np.sqrt(ess))
        assert abs(x.std() / s - 1) < 0.1, (x.std(), s)


def test_subsampled_penalty_on_stan_targets_the_tempered_posterior(linear):
    model, data = linear
    n0 = 100
    mean, sd = tempered_posterior(data, n0 / N)
    with pytest.warns(PrivacyWarning):
        fit = stan_dp.subsampled_penalty(
            model, epsilon=1e6, delta=1e-5, batch_size=200, iterations=2000, noise=0.15, clip=8.0,
            step_size=1.5 * sd, proposal="component", n0=n0, chains=4, warmup=200, init=mean,
            seed=5, progress=False, release_nonprivate=("clip_fraction",),
        )
    assert float(fit.sample_stats["clip_fraction"].max()) == 0.0
    assert fit.posterior.attrs["temperature"] == pytest.approx(n0 / N)
    assert float(fit.sample_stats["noise_sd"].mean()) > 0.25  # the correction is exercised
    check_fit(fit, mean, sd)


def test_barker_on_stan_targets_the_tempered_posterior(linear):
    model, data = linear
    n0 = 1
    mean, sd = tempered_posterior(data, n0 / N)
    with pytest.warns(PrivacyWarning):
        fit = stan_dp.barker(
            model, epsilon=1e6, delta=1e-5, batch_size=200, iterations=2000, step_size=1.2 * sd,
            proposal="component", n0=n0, chains=4, warmup=200, init=mean, seed=6, progress=False,
            release_nonprivate=("clip_fraction",),
        )
    # ~0.5 % of batch rows, on far-tail proposals that are rejected anyway: no visible bias
    assert float(fit.sample_stats["clip_fraction"].mean()) < 1e-2
    assert not fit.sample_stats["variance_exceeded"].values.any()
    check_fit(fit, mean, sd)
