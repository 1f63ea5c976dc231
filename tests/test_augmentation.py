"""Data-augmentation MCMC on Stan record models (Ju, Awan, Gong, Rao 2022,
Algorithm 1; Propositions 3.1-3.2): exact posteriors, the acceptance bound,
incremental statistics, refusals and reproducibility."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

import stan_dp
from stan_dp.samplers.augmentation import AugmentationState, update_records
from tests.conftest import bundled

N_REC, SIGMA, TAU, MU0 = 40, 1.0, 2.0, 0.5


@pytest.fixture(scope="module")
def normal_model(compiled):
    lib = compiled(bundled("normal_mean_records"))
    data = {"N": N_REC, "y": np.zeros(N_REC), "mu0": MU0, "tau": TAU, "sigma": SIGMA}
    return stan_dp.StanRecordModel(lib, data)


def identity(records):
    return records["y"][:, None]


def conjugate_mu(records, rng):
    """Exact draw from p(mu | y) for the normal-mean record model."""
    prec = 1 / TAU ** 2 + records["y"].size / SIGMA ** 2
    return {"mu": rng.normal((MU0 / TAU ** 2 + records["y"].sum() / SIGMA ** 2) / prec, prec ** -0.5)}


def check_moments(draws, mean, sd, ess):
    # Monte Carlo sd of the mean is sd / sqrt(ESS); of the sample sd about
    # sd / sqrt(2 ESS) for a normal target.  4.5 such sds: a false alarm has
    # probability < 1e-5 per comparison.
    assert abs(draws.mean() - mean) < 4.5 * sd / math.sqrt(ess)
    assert abs(draws.std() - sd) < 4.5 * sd / math.sqrt(2 * ess)


@pytest.mark.parametrize("theta_update", ["hmc", conjugate_mu])
def test_gaussian_noise_on_the_sum_gives_the_exact_normal_posterior(normal_model, theta_update):
    # s_dp = sum(y) + N(0, 4^2), y_i ~ N(mu, 1), mu ~ N(0.5, 2^2):
    # s_dp | mu ~ N(n mu, n + 16), so mu | s_dp is normal in closed form.
    import arviz as az

    sd_noise, s_dp = 4.0, 55.0
    priv = stan_dp.new_privacy(identity, stan_dp.Gaussian(sd=sd_noise))
    fit = stan_dp.augmented_sample(normal_model, priv, [s_dp], iterations=2500, warmup=300,
                                   chains=2, seed=11, theta_update=theta_update, leapfrog=5)
    v = N_REC * SIGMA ** 2 + sd_noise ** 2
    prec = 1 / TAU ** 2 + N_REC ** 2 / v
    mean, sd = (MU0 / TAU ** 2 + N_REC * s_dp / v) / prec, prec ** -0.5
    ess = float(az.ess(fit, var_names=["mu"])["mu"])
    assert ess > 150  # the (theta, x) chain mixes slowly: about 250 of 5000 draws
    check_moments(fit.posterior["mu"].values.ravel(), mean, sd, ess)
    assert fit.posterior["mu"].shape == (2, 2500)
    assert fit.attrs["privacy_budget_spent"] == 0.0
    assert fit.attrs["mechanism"] == "gaussian" and fit.attrs["s_dp"] == [s_dp]


def test_laplace_noise_posterior_matches_quadrature(normal_model):
    # Non-Gaussian mechanism: p(mu | s_dp) ∝ N(mu; mu0, tau²) ∫ N(s; n mu, n) Lap(s_dp - s; b) ds,
    # computed by quadrature on grids.
    import arviz as az

    b, s_dp = 3.0, -20.0
    priv = stan_dp.new_privacy(identity, stan_dp.Laplace(epsilon=1 / b, sensitivity=1.0))
    with pytest.warns(UserWarning, match="sensitivity"):  # unclamped: not private, still a valid model
        fit = stan_dp.augmented_sample(normal_model, priv, [s_dp], iterations=3000, warmup=200,
                                       chains=2, seed=12, theta_update=conjugate_mu)

    grid = np.linspace(-2.0, 1.0, 601)
    s_grid = np.linspace(N_REC * grid[0] - 60, N_REC * grid[-1] + 60, 20001)  # step 0.012, s_dp on the grid's span
    inner = stats.norm.pdf(s_grid[None, :], N_REC * grid[:, None], math.sqrt(N_REC * SIGMA ** 2))
    marginal = integrate.trapezoid(inner * stats.laplace.pdf(s_dp - s_grid, scale=b), s_grid, axis=1)
    dens = stats.norm.pdf(grid, MU0, TAU) * marginal
    dens /= integrate.trapezoid(dens, grid)
    mean = integrate.trapezoid(grid * dens, grid)
    sd = math.sqrt(integrate.trapezoid((grid - mean) ** 2 * dens, grid))
    ess = float(az.ess(fit, var_names=["mu"])["mu"])
    check_moments(fit.posterior["mu"].values.ravel(), mean, sd, ess)


@pytest.mark.parametrize("eps", [0.3, 1.0, 3.0])
def test_record_acceptance_is_at_least_exp_minus_epsilon(normal_model, eps):
    # Proposition 3.1: clamping to [-3, 3] -> [-1, 1] gives l1 sensitivity 2,
    # so the Laplace(2/eps) release is eps-DP and every acceptance >= exp(-eps).
    priv = stan_dp.new_privacy(identity, stan_dp.Laplace(epsilon=eps, sensitivity=2.0),
                               clamp={"y": (-3.0, 3.0)})
    fit = stan_dp.augmented_sample(normal_model, priv, [10.0], iterations=300, warmup=0,
                                   chains=1, seed=13, theta_update=conjugate_mu)
    ss = fit.sample_stats
    assert float(ss.min_record_acceptance.min()) >= math.exp(-eps) * (1 - 1e-12)
    assert float(ss.record_acceptance.mean()) > float(ss.min_record_acceptance.mean())
    assert fit.attrs["epsilon"] == pytest.approx(eps)
    assert fit.attrs["clamp_y"] == [-3.0, 3.0]


def test_incremental_sums_and_native_sweep_match_recomputation(normal_model):
    rng = np.random.default_rng(5)
    priv = stan_dp.new_privacy(lambda r: np.stack([r["y"], r["y"] ** 2], axis=1),
                               stan_dp.Laplace(epsilon=0.5, sensitivity=2.0), clamp={"y": (-2, 2)})
    theta = np.array([0.3])
    stan_rng = normal_model.new_rng(3)
    records = normal_model.generate(theta, stan_rng)
    t = priv.record_stats(records)
    state = AugmentationState(theta, records, t, t.sum(axis=0))
    s_dp = state.s + np.array([3.0, -4.0])
    lib = normal_model.native_library
    for _ in range(20):
        proposals = normal_model.generate(theta, stan_rng)
        log_u = np.log(rng.random(N_REC))
        native, acc_n, lr_n, inc_n = update_records(state, proposals, priv, s_dp, log_u, lib)
        ref, acc_r, lr_r, inc_r = update_records(state, proposals, priv, s_dp, log_u, None)
        np.testing.assert_array_equal(acc_n, acc_r)
        assert lr_n == pytest.approx(lr_r, abs=1e-12)
        recomputed = priv.record_stats(native.records).sum(axis=0)
        np.testing.assert_allclose(inc_n, recomputed, rtol=0, atol=1e-12)
        np.testing.assert_allclose(native.s, recomputed, rtol=0, atol=1e-12)
        state = native
    assert not np.array_equal(state.records["y"], records["y"])


@pytest.mark.filterwarnings("ignore:Loading a shared object")
def test_overlay_density_equals_bridgestan_on_the_same_records(normal_model, compiled):
    import bridgestan
    import stanio

    records = normal_model.generate(np.array([0.7]), normal_model.new_rng(1))
    data = {"N": N_REC, "y": records["y"], "mu0": MU0, "tau": TAU, "sigma": SIGMA}
    ref = bridgestan.StanModel(str(compiled(bundled("normal_mean_records"))), stanio.dump_stan_json(data))
    for theta in ([-1.0], [0.2], [2.5]):
        v, g = normal_model.density(records).log_density_gradient(np.array(theta))
        v_ref, g_ref = ref.log_density_gradient(np.array(theta), propto=True, jacobian=True)
        assert v == pytest.approx(v_ref, rel=1e-12) and g == pytest.approx(g_ref, rel=1e-12)


def test_refusals(normal_model):
    priv = stan_dp.new_privacy(identity, stan_dp.Laplace(epsilon=1.0, sensitivity=2.0), clamp={"y": (-3, 3)})
    with pytest.raises(ValueError, match="s_dp has length 2 but the statistic has 1"):
        stan_dp.augmented_sample(normal_model, priv, [1.0, 2.0], iterations=5, warmup=0)
    with pytest.raises(ValueError, match="one-dimensional"):
        stan_dp.augmented_sample(normal_model, priv, [[1.0]], iterations=5, warmup=0)
    centred = stan_dp.new_privacy(lambda r: (r["y"] - r["y"].mean())[:, None], stan_dp.Gaussian(sd=1.0))
    with pytest.raises(ValueError, match="not record-additive"):
        stan_dp.augmented_sample(normal_model, centred, [1.0], iterations=5, warmup=0)
    with pytest.raises(ValueError, match="epsilon"):
        stan_dp.Laplace(epsilon=0.0, sensitivity=1.0)
    with pytest.raises(ValueError, match="iterations"):
        stan_dp.augmented_sample(normal_model, priv, [1.0], iterations=0)
    with pytest.raises(ValueError, match="theta_update"):
        stan_dp.augmented_sample(normal_model, priv, [1.0], theta_update="gibbs")
    counts = stan_dp.new_privacy(identity, stan_dp.DiscreteLaplace(epsilon=1.0, sensitivity=1))
    with pytest.raises(ValueError, match="integers"):
        stan_dp.augmented_sample(normal_model, counts, [1.5])


def test_generator_must_exist_and_match_the_records(compiled):
    lib = compiled(bundled("normal_mean_records"))
    data = {"N": 5, "y": np.zeros(5), "mu0": 0.0, "tau": 1.0, "sigma": 1.0}
    with pytest.raises(ValueError, match="not found"):
        stan_dp.StanRecordModel(lib, data, generate={"y": "y_fresh"})
    with pytest.raises(ValueError, match="record count"):
        stan_dp.StanRecordModel(lib, {**data, "N": 0, "y": np.zeros(0)})


def test_seeded_runs_are_reproducible(normal_model):
    priv = stan_dp.new_privacy(identity, stan_dp.Gaussian(sd=2.0))
    a, b, c = (stan_dp.augmented_sample(normal_model, priv, [3.0], iterations=50, warmup=20,
                                        chains=2, seed=s) for s in (7, 7, 8))
    np.testing.assert_array_equal(a.posterior["mu"].values, b.posterior["mu"].values)
    np.testing.assert_array_equal(a.sample_stats.record_acceptance.values,
                                  b.sample_stats.record_acceptance.values)
    assert not np.array_equal(a.posterior["mu"].values, c.posterior["mu"].values)
    assert a.attrs["seeded"] == 1


def test_discrete_laplace_on_counts_of_the_loglinear_model(compiled):
    # S-4 with one table (K = 1): Laplace noise on the I x J cell counts,
    # replace-one l1 sensitivity 2; acceptance >= exp(-eps) (Prop. 3.1).
    n, I, J, eps = 60, 2, 3, 1.0
    lib = compiled(bundled("loglinear_records"))
    data = {"N": n, "I": I, "J": J, "K": 1, "a": np.ones(n, dtype=int), "b": np.ones((n, 1), dtype=int),
            "alpha": np.ones(I), "alpha_cond": np.ones(J)}
    model = stan_dp.StanRecordModel(lib, data)

    def cells(r):
        return np.eye(I * J)[(r["a"] - 1) * J + (r["b"][:, 0] - 1)]

    priv = stan_dp.new_privacy(cells, stan_dp.DiscreteLaplace(epsilon=eps, sensitivity=2))
    s_dp = np.array([20, 5, 5, 10, 10, 10])
    fit = stan_dp.augmented_sample(model, priv, s_dp, iterations=300, warmup=100, chains=1, seed=3,
                                   leapfrog=5)
    assert float(fit.sample_stats.min_record_acceptance.min()) >= math.exp(-eps) * (1 - 1e-12)
    assert fit.posterior["p"].shape == (1, 300, I)
    assert fit.posterior["q"].shape == (1, 300, I, 1, J)
    # The released table favours a = 1 (30 of 60 noisy counts vs 30): the
    # posterior mean of p stays a proper simplex.
    np.testing.assert_allclose(fit.posterior["p"].values.sum(axis=-1), 1.0, atol=1e-12)
