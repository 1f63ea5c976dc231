"""The exact-prior step of the private mode search (``pooling._exact_prior_mode``).

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
from scipy import optimize

import densities
from conftest import neg_hessian
from stan_dp.adaptation import pooling
from stan_dp.adaptation.forecast import exceed_probability, pld_mean_budget
from stan_dp.adaptation.newton import private_mode
from stan_dp.auto import EXCEED_PROBABILITY, FORECAST_LIMIT, PRIOR_SHARE_LIMIT

N = 3000


def _model(data_seed: int) -> densities.VaryingIntercept:
    rng = np.random.default_rng(data_seed)
    groups = rng.integers(0, 5, size=N)
    effects = np.array([7.0, 9.0, 10.0, 11.5, 13.0])
    return densities.VaryingIntercept(effects[groups] + 1.5 * rng.normal(size=N), groups, 5)


def _conditional_prior_mode(model, theta: np.ndarray) -> np.ndarray:
    """Maximum of the exact log prior over (mu, log tau) with the rest fixed (scipy, independent)."""
    def neg(x):
        t = theta.copy()
        t[:2] = x
        value, grad = model.log_prior_grad(t)
        return -value, -grad[:2]

    fit = optimize.minimize(neg, theta[:2], jac=True, method="BFGS", options={"gtol": 1e-12})
    out = theta.copy()
    out[:2] = fit.x
    return out


def _pooled_near_the_mode(model, noise_sd_mu_tau: float | None = None):
    """A pooled estimate at the exact joint mode with mu and log tau moved 2 sds away (what the
    search left them at before the step); ``noise_sd_mu_tau``: the pooled data curvature's
    diagonal noise sd there (default: as if every round ran in the final frame)."""
    mode, cov = model.exact()
    sd = np.sqrt(np.diag(cov))
    pooled_mode = mode.copy()
    pooled_mode[:2] += 2.0 * sd[:2]
    data_curvature = neg_hessian(lambda t: model.row_log_lik_grad(t)[1].sum(axis=0), mode)
    assert np.all(np.abs(data_curvature[:2]) < 1e-6)          # no row touches mu or log tau
    curvature = data_curvature + neg_hessian(lambda t: model.log_prior_grad(t)[1], pooled_mode)
    lam, q = np.linalg.eigh(curvature)
    frame = (q / np.sqrt(lam)) @ q.T
    noise_cov = 0.04 * cov                                    # a released noise of 0.2 sds
    diag_sd = pooling.curvature_diagonal_sd(0.01, np.linalg.inv(frame))
    if noise_sd_mu_tau is not None:
        diag_sd[:2] = noise_sd_mu_tau
    pooled = pooling._Pooled(pooled_mode, noise_cov, curvature, frame, True, data_curvature,
                            tau=0.1, data_curvature_diag_sd=diag_sd)
    return pooled, frame, mode, sd


def test_the_step_puts_the_prior_held_mean_and_scale_at_their_exact_conditional_mode():
    """A pooled estimate at the exact joint mode with mu and log tau moved 2 sds away (what the
    search left them at before the step): the step brings them back to the joint mode, leaves the
    rest alone, and propagates the others' noise to them by the implicit-function map."""
    model = _model(0)
    pooled, frame, mode, sd = _pooled_near_the_mode(model)
    pooled_mode, noise_cov = pooled.mode, pooled.noise_cov
    theta, new_noise, new_curvature = pooling._exact_prior_mode(model, pooled, frame, 1e-3)

    # mu and log tau: the joint mode's (no row touches them, so there they maximise the prior
    # given the effects), and the exact prior is stationary in them
    assert np.all(np.abs(theta[:2] - mode[:2]) / sd[:2] < 1e-3), (theta - mode) / sd
    assert np.all(np.abs(model.log_prior_grad(theta)[1][:2] * sd[:2]) < 1e-6)
    assert np.array_equal(theta[2:], pooled_mode[2:])          # the rest stays where it was
    # noise: L Sigma L' with L the Jacobian of the conditional-mode map (finite differences
    # of an independent optimiser), the identity on the rest
    link = np.eye(model.dim)
    link[:2] = 0.0
    for j in range(2, model.dim):
        e = np.zeros(model.dim)
        e[j] = 1e-4 * sd[j]
        up, down = _conditional_prior_mode(model, theta + e), _conditional_prior_mode(model, theta - e)
        link[:2, j] = (up[:2] - down[:2]) / (2 * e[j])
    expected = link @ noise_cov @ link.T
    np.testing.assert_allclose(new_noise, expected, rtol=2e-3, atol=1e-9 * np.max(np.abs(expected)))
    # the curvature of mu and log tau is the prior's at the new point
    prior_here = neg_hessian(lambda t: model.log_prior_grad(t)[1], theta)
    np.testing.assert_allclose(new_curvature[:2, :2], prior_here[:2, :2], rtol=1e-3,
                               atol=1e-4 * np.max(np.abs(prior_here[:2, :2])))


def test_rowless_coordinates_are_held_even_where_the_pooled_noise_hides_the_prior():
    """Early rounds in a narrow frame leave the pooled data curvature of a hierarchical scale
    with a noise sd above the prior's curvature (Stan varying intercept: 1.85 and 101 against
    ~2).  From the released curvature alone the prior is then not seen to dominate and the
    coordinates stay where the noisy one-step estimates left them; that the rows do not touch
    them at all (the initial scale's count at its floor) settles it."""
    model = _model(0)
    pooled, frame, mode, sd = _pooled_near_the_mode(model, noise_sd_mu_tau=100.0)
    prior_diag = np.diag(neg_hessian(lambda t: model.log_prior_grad(t)[1], pooled.mode))
    assert np.all(prior_diag[:2] < pooling.HELD_NOISE_SDS * 100.0)
    theta, _, _ = pooling._exact_prior_mode(model, pooled, frame, 1e-3)
    assert np.array_equal(theta, pooled.mode)                  # not seen as held
    rowless = np.zeros(model.dim, dtype=bool)
    rowless[:2] = True
    theta, _, _ = pooling._exact_prior_mode(model, pooled, frame, 1e-3, rowless=rowless)
    assert np.all(np.abs(theta[:2] - mode[:2]) / sd[:2] < 1e-3), (theta - mode) / sd
    assert np.array_equal(theta[2:], pooled.mode[2:])


def test_pooled_curvature_noise_follows_each_rounds_frame():
    """The diagonal noise sd of the pooled data curvature (theta space), rounds released in
    different frames, against a simulation of the release's noise (diagonal sd s, off-diagonal
    s / sqrt(2), mirrored; ``releases.clipped_matrix_sum``) mapped by each round's frame and
    averaged with the pool's weights.
    20,000 draws: the sd's Monte Carlo error is 0.5 %; tolerance 3 %."""
    rng = np.random.default_rng(3)
    d, reps = 4, 20_000
    # not symmetric: a transposed map (rows of A^-1 for its columns) gives other sds
    frames = [np.diag([0.1, 1.0, 2.0, 0.5]) + np.triu(np.full((4, 4), 0.3), 1),
              np.diag([1.0, 1.0, 0.3, 0.5]) + np.tril(np.full((4, 4), 0.2), -1)]
    sds = [0.5, 0.8]
    pool = []
    for a, s in zip(frames, sds):
        inv = np.linalg.inv(a)
        pool.append({"theta": np.zeros(d), "grad": np.zeros(d), "grad_sd": 1.0,
                     "hess": np.eye(d), "prior_hess": np.zeros((d, d)), "sd_h": s, "frame": a,
                     "data_coordinates": np.ones(d, dtype=bool),
                     "hess_diag_sd": pooling.curvature_diagonal_sd(s, inv)})
    pooled = pooling._pooled_estimate(pool, frames[-1])
    weights, _ = pooling.curvature_weights(pool, frames[-1])   # tests/test_curvature_weights.py
    iu = np.triu_indices(d)
    noises = []
    for a, s in zip(frames, sds):
        inv = np.linalg.inv(a)
        upper = rng.normal(size=(reps, iu[0].size)) * np.where(iu[0] == iu[1], s, s / np.sqrt(2))
        e = np.zeros((reps, d, d))
        e[:, iu[0], iu[1]] = upper
        e = e + np.triu(e, 1).transpose(0, 2, 1)
        noises.append(np.einsum("ki,rkl,lj->rij", inv, e, inv)[:, range(d), range(d)])
    simulated = np.einsum("k,kri->ri", weights, np.array(noises)).std(axis=0)
    np.testing.assert_allclose(pooled.data_curvature_diag_sd, simulated, rtol=0.03)
    # the first round's frame is 10 times narrower along the first coordinate: the plain mean
    # carried its noise there (as the pool did before it weighed the rounds), and the final frame's
    # entry sd alone understated that 10-fold
    plain = np.mean(noises, axis=0).std(axis=0)
    assert plain[0] > 5 * simulated[0]
    entry_sd = np.sqrt(np.mean(np.square(sds)) / len(sds))   # as if all in the last frame
    naive = pooling.curvature_diagonal_sd(entry_sd, np.linalg.inv(frames[-1]))
    assert naive[0] < 0.1 * plain[0]


def test_every_run_on_the_varying_intercept_is_warned_or_accurate():
    """End to end (n = 3,000, epsilon = 4, 8 noise seeds): the search on this model is erratic —
    whether it settles, and whether the exact-prior step finds mu and log tau held, depends on
    the noise draws (a known limit, docs/adaptation.md §7) — but no run is silently wrong: each
    one either warns by the rule ``stan_dp.sample`` applies (unsettled, or the released noise
    gives some coordinate over a 10 % chance of missing 0.5 sd) or is within 0.5 sd everywhere.
    Every run that settles has mu and log tau at their exact conditional mode, within 0.5 sd of
    the joint mode (measured 0.00-0.04; before each round's frame entered the held test, seed 4
    settled with log tau 2.6 sds off, 6 of its claimed noise sds)."""
    model = _model(0)
    mode, cov = model.exact()
    sd = np.sqrt(np.diag(cov))
    settled = 0
    for seed in range(8):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = private_mode(model, n_public=N, pld_mean=pld_mean_budget(4.0, 1e-5),
                                  relation="replace_one", rng_noise=np.random.default_rng(seed),
                                  init=np.zeros(model.dim))
        error = np.abs(result.mode - mode) / sd
        post_sd = np.sqrt(np.diag(result.covariance))
        claimed = np.sqrt(np.maximum(np.diag(result.noise_covariance), 0.0)) / post_sd
        warns = (not result.settled or result.prior_share > PRIOR_SHARE_LIMIT
                 or exceed_probability(claimed, FORECAST_LIMIT) > EXCEED_PROBABILITY)
        assert warns or np.all(error < FORECAST_LIMIT), (seed, error)
        if result.settled:
            assert np.all(error[:2] < 0.5), (seed, error[:2])
            settled += 1
    assert settled >= 3
