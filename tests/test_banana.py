"""The exact banana posterior (seed 003, Theorem 5) against the Stan model."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import bundled
from stan_dp import RowModel
from stan_dp.banana import banana_data, banana_log_density, banana_posterior, banana_posterior_params


@pytest.fixture(scope="module")
def banana(compiled):
    data = banana_data(60, d=3, seed=11, theta=np.array([0.4, -1.0, 0.7]))
    return RowModel(compiled(bundled("banana")), data), data


def _tempered_log_density(model, data, theta, temperature):
    return model.log_prior(theta) + temperature * model.row_log_lik(theta).sum()


@pytest.mark.parametrize("temperature", [1.0, 0.05])
def test_closed_form_matches_stan_up_to_a_constant(banana, temperature):
    """Theorem 5: log p_T(θ | x) from Stan minus the Ban log density is constant in θ."""
    model, data = banana
    post = banana_posterior_params(data, temperature)
    rng = np.random.default_rng(0)
    points = post.mu + rng.normal(size=(8, 3)) * np.sqrt(post.var) * 3
    diffs = [_tempered_log_density(model, data, th, temperature) - banana_log_density(th, post)[0]
             for th in points]
    assert np.ptp(diffs) < 1e-8 * max(1.0, np.abs(diffs).max())


def test_exact_draws_satisfy_stein_identities_of_the_stan_density(banana):
    """E[∇ log p] = 0 and E[θ ∇ log p^T] = -I under the target, with ∇ from Stan.

    Independent of how the sampler was derived: the gradient comes from the
    compiled model.  Tolerance: 6 Monte Carlo standard errors of each average
    over 4000 independent draws.
    """
    model, data = banana
    idata = banana_posterior(data, draws=2000, chains=2, seed=5)
    theta = idata.posterior["theta"].values.reshape(-1, 3)
    grads = np.array([model.log_prior_grad(t)[1] + model.row_log_lik_grad(t)[1].sum(0) for t in theta])
    m = len(theta)
    mean_grad = grads.mean(0)
    assert np.all(np.abs(mean_grad) < 6 * grads.std(0) / np.sqrt(m))
    centred = theta - theta.mean(0)
    outer = centred[:, :, None] * grads[:, None, :]
    se = outer.std(0) / np.sqrt(m)
    assert np.all(np.abs(outer.mean(0) + np.eye(3)) < 6 * se + 1e-12)


def test_tempering_widens_the_posterior(banana):
    _, data = banana
    cold, hot = banana_posterior_params(data, 1.0), banana_posterior_params(data, 0.1)
    assert np.all(hot.var > cold.var)
    n, tau0 = data["N"], 1 / data["sigma0"] ** 2
    np.testing.assert_allclose(1 / hot.var, 0.1 * n / data["sigma"] ** 2 + tau0)


def test_output_shape_and_refusals(banana):
    _, data = banana
    idata = banana_posterior(data, draws=7, chains=3, seed=1)
    assert idata.posterior["theta"].shape == (3, 7, 3)
    assert idata.posterior.attrs["sampler"] == "exact-banana"
    with pytest.raises(ValueError, match="temperature"):
        banana_posterior(data, temperature=0.0)
    with pytest.raises(ValueError, match="draws"):
        banana_posterior(data, draws=0)
    with pytest.raises(ValueError, match="d must be"):
        banana_data(10, d=1)
