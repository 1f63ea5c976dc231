"""DP HMC on NumPy densities: exactness, reversibility, accounting, refusals, reproducibility.

Statistical tolerances as in test_penalty.py: means within 4 Monte Carlo
standard errors (bulk ESS over 4 chains), sds within 10 % (relative error of
an sd estimate ~1/sqrt(2 ESS) < 3 % at ESS > 400).
"""

from __future__ import annotations

import densities
import numpy as np
import pytest

import stan_dp
from stan_dp.accounting import Budget, PrivacyBudgetError, Release, gaussian_epsilon
from stan_dp.accounting.bounds import zcdp_hmc_max_iterations
from stan_dp.density import prior_gradient
from stan_dp.samplers import hmc as H
from test_penalty import CHAINS, check_moments


@pytest.fixture(scope="module")
def normal_mean():
    return densities.NormalMean(np.random.default_rng(1).normal(1.0, 1.0, 50))


def run_hmc_kernel(model, kernel, draws, init, seed=0, burn=200, step=0.1):
    out = np.empty((CHAINS, draws, model.dim))
    infos = []
    for c in range(CHAINS):
        rp, rn = np.random.default_rng([seed, c, 0]), np.random.default_rng([seed, c, 1])
        state = H.init(np.asarray(init, float), step_size=step)
        for i in range(burn + draws):
            state, info = kernel(rp, rn, state)
            if i >= burn:
                out[c, i - burn] = state.position
                infos.append(info)
    return out, infos


@pytest.mark.parametrize("grad_clip", [1e6, 0.3])
def test_exact_with_light_ratio_noise_and_noisy_gradients(normal_mean, grad_clip):
    """No ratio clipping: the chain is exact whatever the gradient noise, and even when the
    *gradient* clipping binds (grad_clip=0.3 clips most rows), see the module docstring."""
    kernel = H.build_kernel(normal_mean, clip=1e6, grad_clip=grad_clip, noise_multiplier=0.0,
                            grad_noise_multiplier=0.0, n_leapfrog=3, noise_sd=0.3, grad_noise_sd=4.0)
    x, infos = run_hmc_kernel(normal_mean, kernel, 2500, [1.0], seed=3, step=0.08)
    assert all(i.clip_fraction == 0 for i in infos)
    if grad_clip < 1:
        assert np.mean([i.grad_clip_fraction for i in infos]) > 0.5
    check_moments(x[..., 0], *normal_mean.posterior())


def test_tempered_and_two_dimensional_posteriors_are_exact():
    model = densities.NormalMeanScale(np.random.default_rng(3).normal(0.5, 1.5, 40))
    ref = model.reference(temperature=0.5)
    kernel = H.build_kernel(model, clip=1e6, grad_clip=1e6, noise_multiplier=0.0,
                            grad_noise_multiplier=0.0, n_leapfrog=4, temperature=0.5,
                            noise_sd=0.3, grad_noise_sd=2.0)
    x, _ = run_hmc_kernel(model, kernel, 2500, [0.5, 0.4], seed=4, step=0.15)
    for j, name in enumerate(("mu", "tau")):
        check_moments(x[..., j], *ref[name])


def test_noisy_leapfrog_composed_with_momentum_flip_is_an_involution():
    """Theorem 10 with the noise realisation fixed: the noise at a point is a fixed function of
    the point, so the reverse trajectory meets the same noises in reverse order."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=3) * 5, rng.normal(size=(3, 3)) * 40

    class G:
        def __init__(self, theta):
            g = -theta * np.array([1.0, 4.0, 9.0]) + np.tanh(theta @ b)   # a non-linear "clipped" part
            self.grad = g + a * np.sin(37.0 * theta + 1.0)                   # + position-fixed noise

    theta0, p0 = rng.normal(size=3), rng.normal(size=3)
    inv_mass = np.array([1.0, 0.5, 2.0])
    kw = dict(step_size=0.07, inv_mass=inv_mass, n_steps=7)
    theta1, p1, last, steps = H.leapfrog(G, theta0, p0, G(theta0).grad, **kw)
    assert steps == 7 and not np.allclose(theta1, theta0)
    theta2, p2, back, _ = H.leapfrog(G, theta1, -p1, last.grad, **kw)
    np.testing.assert_allclose(theta2, theta0, atol=1e-10)
    np.testing.assert_allclose(-p2, p0, atol=1e-10)
    np.testing.assert_allclose(back.grad, G(theta0).grad, atol=1e-10)


def test_gradient_release_reuse_after_reject_and_accept(normal_mean):
    """Exactly L gradient releases per iteration (plus one at the start), none repeated:
    the kernel draws L * dim + 1 normals from the noise stream per iteration."""
    kernel = H.build_kernel(normal_mean, clip=5.0, grad_clip=2.0, noise_multiplier=2.0,
                            grad_noise_multiplier=3.0, n_leapfrog=4)
    rp, rn = np.random.default_rng(1), np.random.default_rng(2)
    state = H.init(np.array([1.0]), step_size=0.05)
    state, _ = kernel(rp, rn, state)                     # first call: 1 + 4 gradients, 1 ratio
    reference = np.random.default_rng(2)
    reference.standard_normal(1 + 4 + 1)
    assert rn.random() == reference.random()
    seen = {"acc": 0, "rej": 0}
    for _ in range(60):
        grad_before, pos_before = state.grad.copy(), state.position.copy()
        state_new, info = kernel(rp, rn, state)
        if info.is_accepted:
            seen["acc"] += 1
            assert not np.array_equal(state_new.grad, grad_before)
        else:
            seen["rej"] += 1
            assert np.array_equal(state_new.grad, grad_before)   # reused, not re-released
            assert np.array_equal(state_new.position, pos_before)
        state = state_new
    assert seen["acc"] > 0 and seen["rej"] > 0


def test_noise_sds_are_multipliers_times_sensitivities(normal_mean):
    z_l, z_g, clip, b_g, temp = 0.7, 1.3, 2.0, 0.5, 0.5
    kernel = H.build_kernel(normal_mean, clip=clip, grad_clip=b_g, noise_multiplier=z_l,
                            grad_noise_multiplier=z_g, n_leapfrog=2, temperature=temp)
    rp, rn = np.random.default_rng(0), np.random.default_rng(1)
    state = H.init(np.array([1.0]), step_size=0.05)
    checked = 0
    for _ in range(100):
        new, info = kernel(rp, rn, state)
        assert info.grad_noise_sd == pytest.approx(z_g * 2 * temp * b_g)
        if info.is_accepted:
            move = abs(new.position[0] - state.position[0])
            assert info.noise_sd == pytest.approx(z_l * 2 * temp * clip * move)
            checked += 1
        state = new
    assert checked > 5
    kernel = H.build_kernel(normal_mean, clip=clip, grad_clip=b_g, noise_multiplier=z_l,
                            grad_noise_multiplier=z_g, n_leapfrog=2, relation="add_remove")
    _, info = kernel(rp, rn, H.init(np.array([1.0]), step_size=0.05))
    assert info.grad_noise_sd == pytest.approx(z_g * b_g)


def test_prior_gradient_fallback_matches_analytic(normal_mean):
    theta = np.array([0.7])
    _, fd = prior_gradient(normal_mean, theta)
    np.testing.assert_allclose(fd, [-(0.7 - normal_mean.m0) / normal_mean.s0**2], rtol=1e-6)


def _fit(model, **kw):
    args = dict(epsilon=1.0, delta=1e-5, iterations=20, warmup=10, chains=2, seed=5, progress=False)
    args.update(kw)
    return stan_dp.hmc(model, **args)


def test_accounting_attrs_equal_the_accounting_module(normal_mean):
    fit = _fit(normal_mean, n_leapfrog=3)
    a = fit.posterior.attrs
    z_l, z_g, L, total = a["noise_multiplier"], a["grad_noise_multiplier"], a["n_leapfrog"], 30
    z_s, K = a["search_noise_multiplier"], a["search_releases"]
    assert L == 3 and a["iterations"] == 20 and K == H.DEFAULT_SEARCH_RELEASES
    budget = Budget(1.0, 1e-5)
    plan = [Release(z_l), Release(z_g, count=L)]
    expected = budget.epsilon_spent(plan, total, chains=2, once=[Release(z_s, count=K)])
    assert a["epsilon_spent"] == pytest.approx(expected, rel=1e-12)
    # independently: PLD N(M, 2M) with M = k/(2 z_l^2) + k L/(2 z_g^2) + K/(2 z_s^2) per chain
    direct = gaussian_epsilon([z_l, z_g, z_s], [2 * total, 2 * total * L, 2 * K], 1e-5)
    assert a["epsilon_spent"] == pytest.approx(direct, rel=1e-9)
    # the mode search gets SEARCH_SHARE of sum 1/z^2
    info = np.array([total / z_l**2, total * L / z_g**2, K / z_s**2])
    assert info[2] / info.sum() == pytest.approx(H.SEARCH_SHARE, rel=1e-9)
    assert a["epsilon_spent"] == pytest.approx(1.0, rel=1e-6)          # calibrated: all spent
    assert a["accountant"] == "gaussian-pld-exact"
    # the zCDP rule of Sec. 5.2 (z = tau sqrt(n)) is looser: it allows fewer iterations
    n = normal_mean.n_rows
    k_zcdp = zcdp_hmc_max_iterations(1.0, 1e-5, z_l / np.sqrt(n), z_g / np.sqrt(n), n, L)
    k_exact = budget.max_iterations(plan, chains=1, once=[Release(z_s, count=K)])
    assert 0 < k_zcdp < k_exact


def test_both_noises_given_fix_the_iterations(normal_mean):
    fit = _fit(normal_mean, iterations=None, noise=40.0, grad_noise=60.0, warmup=5, step_size=0.1)
    a = fit.posterior.attrs
    assert a["search_releases"] == 0                     # step size given: no warm-up search
    budget = Budget(1.0, 1e-5)
    plan = [Release(40.0), Release(60.0, count=H.DEFAULT_N_LEAPFROG)]
    k = budget.max_iterations(plan, chains=2, once=[Release(60.0)])
    assert a["iterations"] == k - 5 and a["grad_noise_multiplier"] == pytest.approx(60.0)
    assert a["epsilon_spent"] <= 1.0


def test_output_contract_and_reproducibility(normal_mean):
    fit = _fit(normal_mean)
    again = _fit(normal_mean)
    other = _fit(normal_mean, seed=6)
    np.testing.assert_array_equal(fit.posterior["mu"].values, again.posterior["mu"].values)
    assert not np.array_equal(fit.posterior["mu"].values, other.posterior["mu"].values)
    stats = set(fit.sample_stats.data_vars)
    assert stats == set(H.RELEASED_STATS)
    assert "clip_fraction" not in stats and "observed_data" not in fit.groups()
    a = fit.posterior.attrs
    for key in ("grad_noise_multiplier", "n_leapfrog", "grad_clip", "clip", "seeded"):
        assert key in a
    assert a["grad_clip"] == pytest.approx(1.0) and a["clip"] == pytest.approx(1.0)  # dim = 1
    assert fit.posterior["mu"].shape == (2, 20)
    with pytest.warns(stan_dp.inference.PrivacyWarning):
        leaky = _fit(normal_mean, release_clip_fraction=True)
    assert {"clip_fraction", "grad_clip_fraction"} <= set(leaky.sample_stats.data_vars)


@pytest.mark.parametrize("kw, match", [
    (dict(grad_noise=0.0), "grad_noise"),
    (dict(grad_noise=-1.0), "grad_noise"),
    (dict(clip=0.0), "clip"),
    (dict(grad_clip=np.inf), "grad_clip"),
    (dict(step_size=-0.1), "step_size"),
    (dict(n_leapfrog=0), "n_leapfrog"),
    (dict(n_leapfrog=2.5), "n_leapfrog"),
    (dict(temperature=0.0), "temperature"),
    (dict(chains=0), "chains"),
    (dict(warmup=-1), "warmup"),
    (dict(epsilon=0.0), "epsilon"),
    (dict(init=[0.0, 1.0]), "init"),
    (dict(relation="neighbours"), "relation"),
])
def test_refusals_before_touching_data(normal_mean, kw, match):
    with pytest.raises(ValueError, match=match):
        _fit(densities.Untouchable(normal_mean), **kw)


def test_budget_refusals_before_touching_data(normal_mean):
    model = densities.Untouchable(normal_mean)
    with pytest.raises(PrivacyBudgetError):
        _fit(model, iterations=10_000, noise=1.0, grad_noise=1.0)
    with pytest.raises(PrivacyBudgetError):
        _fit(model, iterations=None, noise=0.1, grad_noise=0.1)


def test_model_without_row_gradients_is_refused(normal_mean):
    class NoGrad:
        n_rows, dim, param_names = 5, 1, ["mu"]

        def log_prior(self, theta):
            return 0.0

        def row_log_lik(self, theta, rows=None):
            raise AssertionError

        def constrain(self, theta):
            return {"mu": theta[0]}

    with pytest.raises(TypeError, match="row_log_lik_grad"):
        _fit(NoGrad())


def test_defaults_depend_only_on_n_and_dim():
    d = H.default_settings(10_000, 11)
    b_g = np.sqrt(11 + np.log(10_000) - 5)  # sqrt(dim + ln n - 5) = 3.90
    assert d.clip == pytest.approx(b_g) and d.grad_clip == pytest.approx(b_g)
    assert d.n_leapfrog == 3 and d.step_size == pytest.approx(0.01)
    assert d.grad_noise_ratio == pytest.approx(0.6 * np.sqrt(3))
    # the gradient bound is sqrt(dim) up to n = e^5 and then grows like sqrt(ln n)
    assert H.default_grad_clip(100, 4) == pytest.approx(2.0)
    assert H.default_grad_clip(148, 4) == pytest.approx(2.0)
    assert H.default_grad_clip(100_000, 4) == pytest.approx(np.sqrt(4 + np.log(1e5) - 5))
    given = H.default_settings(10_000, 11, clip=1.5, grad_clip=2.0)
    assert (given.clip, given.grad_clip) == (1.5, 2.0)


def test_mode_search_error_is_the_averaged_release_noise(normal_mean):
    """Polyak-Ruppert averaging of the ascent on released gradients: near a mode with curvature
    H the averaged point's error is H^-1 times the mean noise of the m averaged releases, sd
    sigma / (H sqrt(m)), whatever the step (here half the Newton step, so the iterates are an
    AR(1) with coefficient 1/2 and averaging is needed).  300 replications: the sd estimate has
    relative error ~1/sqrt(600) = 4 %, the AR edge effect is ~1/m = 2 %: tolerance 15 %; the
    mean within 4 standard errors.  The search makes exactly K releases (noise-stream count)."""
    mean, post_sd = normal_mean.posterior()
    curvature, sigma, k = post_sd**-2, 20.0, 100
    averaged = k // 2 - 1
    release = H.make_noisy_gradient(normal_mean, grad_clip=1e6, grad_noise_sd=sigma)
    errors = []
    for rep in range(300):
        rng = np.random.default_rng([7, rep])
        position, first = H.mode_search(release, rng, np.array([30.0]), k, 0.5 / curvature)
        reference = np.random.default_rng([7, rep])
        reference.standard_normal(k)
        assert rng.random() == reference.random()
        errors.append(position[0] - mean)
        assert first.grad.shape == (1,)
    errors = np.array(errors)
    expected_sd = sigma / (curvature * np.sqrt(averaged))
    assert np.std(errors) == pytest.approx(expected_sd, rel=0.15)
    assert abs(np.mean(errors)) < 4 * expected_sd / np.sqrt(errors.size)
