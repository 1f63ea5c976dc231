"""The exact-prior step of the private mode search (``newton._exact_prior_mode``).

A varying-intercept model's mean and scale are held by the prior: no row
touches them, so the released data gradient there is pure noise, and the
pooled one-step estimates (which average the prior's curvature over the
rounds' points) left them 1.4-6.9 posterior sds from the exact joint mode
in these runs.  After the step they sit at their exact conditional mode
given the group effects; checked against the exact joint mode (Newton's
method on the full NumPy posterior) and against the stationarity of the
exact log prior.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import densities
from stan_dp.adaptation.forecast import pld_mean_budget
from stan_dp.adaptation.newton import private_mode

N = 3000


def _model(data_seed: int) -> densities.VaryingIntercept:
    rng = np.random.default_rng(data_seed)
    groups = rng.integers(0, 5, size=N)
    effects = np.array([7.0, 9.0, 10.0, 11.5, 13.0])
    return densities.VaryingIntercept(effects[groups] + 1.5 * rng.normal(size=N), groups, 5)


@pytest.mark.parametrize("data_seed,seed", [(0, 0), (0, 1), (1, 0)])
def test_the_prior_held_mean_and_scale_sit_at_the_exact_mode(data_seed, seed):
    model = _model(data_seed)
    mode, cov = model.exact()
    sd = np.sqrt(np.diag(cov))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = private_mode(model, n_public=N, pld_mean=pld_mean_budget(4.0, 1e-5),
                              relation="replace_one", rng_noise=np.random.default_rng(seed),
                              init=np.zeros(model.dim))
    assert result.settled
    error = (result.mode - mode) / sd
    # mu and log tau: within 0.2 sd (before this step: 1.4-6.9 sd in these three runs)
    assert np.all(np.abs(error[:2]) < 0.2), error
    # the exact log prior is stationary in them (they are its conditional maximum)
    _, grad = model.log_prior_grad(result.mode)
    assert np.all(np.abs(grad[:2] * sd[:2]) < 1e-3), grad[:2] * sd[:2]
    # their claimed noise is what reaches them from the group effects: small, not zero
    claimed = np.sqrt(np.diag(result.noise_covariance))[:2] / sd[:2]
    assert np.all((claimed > 1e-3) & (claimed < 0.2)), claimed
