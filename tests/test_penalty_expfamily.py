"""Tests of the exponential-family penalty sampler (Yıldırım, Algorithm 3, eq. (8))."""

from __future__ import annotations

import densities
import numpy as np
import pytest
from test_penalty import check_moments, run_kernel

from stan_dp.accounting import Budget, PrivacyBudgetError, Release
from stan_dp.samplers import expfamily as E
from stan_dp.samplers.proposals import make_proposal


def run_exp_kernel(model, kernel, prop, draws, init, seed=0, burn=200):
    return run_kernel(model, kernel, prop, draws, init, seed=seed, burn=burn, init_state=E.init)


@pytest.fixture(scope="module")
def normal_mean_ef():
    return densities.NormalMeanExpFamily(np.random.default_rng(1).normal(1.0, 1.0, 50))


def test_natural_parameters_and_affinity(normal_mean_ef):
    offset, phi = E.natural_parameters(normal_mean_ef, np.array([0.7]))
    assert offset == pytest.approx(-0.5 * 50 * 0.49)
    np.testing.assert_allclose(phi, [0.7])
    E.check_affine(normal_mean_ef)
    E.check_affine(densities.NormalMeanScaleExpFamily(np.ones(5)))
    with pytest.raises(ValueError, match="not affine"):
        E.check_affine(densities.NotAffine(np.ones(5)))


@pytest.mark.parametrize("stat_sd", [1.0, 7.0])
def test_exact_with_noisy_statistics(normal_mean_ef, stat_sd):
    prop = make_proposal("gaussian", 0.25, 1)
    s = E.clamped_stat_sum(normal_mean_ef, 1e6)
    kernel = E.build_kernel(normal_mean_ef, prop, stat_sum=s, stat_sd=stat_sd)
    x, infos = run_exp_kernel(normal_mean_ef, kernel, prop, 5000, [1.0], seed=31)
    typical = np.median([i.noise_sd for i in infos])
    assert typical > (1.0 if stat_sd > 5 else 0.1)  # heavy noise case really is heavy
    check_moments(x[..., 0], *normal_mean_ef.posterior())


def test_penalty_term_matters_for_expfamily(normal_mean_ef):
    prop = make_proposal("gaussian", 0.25, 1)
    s = E.clamped_stat_sum(normal_mean_ef, 1e6)
    kernel = E.build_kernel(normal_mean_ef, prop, stat_sum=s, stat_sd=7.0, correction=False)
    x, _ = run_exp_kernel(normal_mean_ef, kernel, prop, 5000, [1.0], seed=31)
    assert x[..., 0].std() / normal_mean_ef.posterior()[1] - 1 > 0.12


def test_two_statistics_against_quadrature():
    model = densities.NormalMeanScaleExpFamily(np.random.default_rng(3).normal(0.5, 1.5, 40))
    ref = model.reference()
    prop = make_proposal("component", [0.45, 0.25], 2)
    kernel = E.build_kernel(model, prop, stat_sum=E.clamped_stat_sum(model, 1e6), stat_sd=3.0)
    x, _ = run_exp_kernel(model, kernel, prop, 6000, [0.5, 0.4], seed=32)
    for j, name in enumerate(("mu", "tau")):
        check_moments(x[..., j], *ref[name])


def test_noise_sd_follows_equation_8(normal_mean_ef):
    prop = make_proposal("gaussian", 0.3, 1)
    kernel = E.build_kernel(normal_mean_ef, prop, stat_sum=np.array([40.0]), stat_sd=2.0,
                            temperature=0.5)
    rp, rn = np.random.default_rng(0), np.random.default_rng(1)
    state = E.init(normal_mean_ef, np.array([1.0]))
    for _ in range(100):
        new, info = kernel(rp, rn, state)
        if info.is_accepted:  # phi(mu) = mu / sigma^2 with sigma = 1
            dphi = new.position[0] - state.position[0]
            assert info.noise_sd == pytest.approx(0.5 * abs(dphi) * 2.0)
        state = new


@pytest.mark.parametrize("n", [100, 10_000])
def test_cost_does_not_grow_with_n(n):
    """The data is read once per run; each iteration costs stat_dim + 1 likelihood calls."""
    model = densities.NormalMeanExpFamily(np.random.default_rng(2).normal(0, 1, n))
    idata = E.penalty_expfamily(model, epsilon=5.0, delta=1e-5, iterations=200, clip=3.0,
                                step_size=0.05, chains=2, seed=1, progress=False)
    assert model.stat_calls == 1
    setup = 5 * (1 + 1 + 3)  # check_affine: 5 points x (2 natural-parameter calls + 3 checks)
    inits = 2 * 2
    assert model.lik_calls == setup + inits + 2 * 200 * 2
    assert idata.attrs["sampler"] == "penalty_expfamily"


def test_end_to_end_accounting_and_clamping():
    y = np.random.default_rng(4).normal(0, 1, 500)
    model = densities.NormalMeanExpFamily(y)
    idata = E.penalty_expfamily(model, epsilon=3.0, delta=1e-6, iterations=300, clip=2.0,
                                step_size=0.05, chains=2, warmup=50, seed=3, progress=False)
    z = idata.attrs["noise_multiplier"]
    spent = Budget(3.0, 1e-6).epsilon_spent([Release(z)], 350, chains=2)
    assert idata.attrs["epsilon_spent"] == pytest.approx(spent)
    assert idata.attrs["epsilon_spent"] <= 3.0 + 1e-9
    assert set(idata.sample_stats.data_vars) == {"acceptance_rate", "is_accepted", "noise_sd", "step_size"}
    assert "warmup_posterior" in idata.groups()
    # clamping: each row's statistic projected onto [-clip, clip]
    assert E.clamped_stat_sum(model, 2.0)[0] == pytest.approx(np.clip(y, -2, 2).sum())


def test_refusals_before_data_is_touched():
    inner = densities.NormalMeanExpFamily(np.zeros(10))
    model = densities.Untouchable(inner)
    ok = dict(epsilon=1.0, delta=1e-5, iterations=10, clip=1.0, step_size=0.1, progress=False)
    with pytest.raises(ValueError, match="not affine"):
        E.penalty_expfamily(densities.Untouchable(densities.NotAffine(np.zeros(10))), **ok)
    with pytest.raises(ValueError, match="clip"):
        E.penalty_expfamily(model, **{**ok, "clip": 0.0})
    with pytest.raises(TypeError, match="ExpFamilyDensity"):
        E.penalty_expfamily(densities.NormalMean(np.zeros(3)), **ok)
    with pytest.raises(PrivacyBudgetError, match="do not fit"):
        E.penalty_expfamily(model, **{**ok, "noise": 20.0, "iterations": 10_000})
    with pytest.raises(PrivacyBudgetError):
        E.penalty_expfamily(model, **{**ok, "noise": 0.01})
    with pytest.raises(densities.DataTouched):  # the valid run does reach the data
        E.penalty_expfamily(model, **ok)


# ------------------------------------------------- add/remove (issue 14, item 1) --
def test_add_remove_is_refused_before_data_is_touched():
    """``a(theta) = n c(theta)`` uses the row count un-noised: add/remove is refused."""
    model = densities.Untouchable(densities.NormalMeanExpFamily(np.zeros(10)))
    with pytest.raises(ValueError, match=r"add_remove.*row count n.*replace_one.*n is public"):
        E.penalty_expfamily(model, epsilon=1.0, delta=1e-5, iterations=10, clip=1.0,
                            step_size=0.1, progress=False, relation="add_remove")


def _lambda_hats(monkeypatch, model, stat_sd, draws=4000, mu=5.0, step=0.3):
    """``lambda_hat`` of one release, captured inside the package's kernel.

    The proposal stream is reseeded for every draw, so every draw proposes the
    same ``theta'`` from ``theta = mu``; only the privacy noise varies.
    """
    seen = []

    def spy(lam_hat, variance, correction=True):
        seen.append(lam_hat)
        return -np.inf

    monkeypatch.setattr(E, "log_acceptance", spy)
    prop = make_proposal("gaussian", step, 1)
    kernel = E.build_kernel(model, prop, stat_sum=E.clamped_stat_sum(model, 3.0), stat_sd=stat_sd)
    state = E.init(model, np.array([mu]))
    noise = np.random.default_rng(5)
    for _ in range(draws):
        kernel(np.random.default_rng(11), noise, state)
    return np.asarray(seen)


def test_one_release_leaks_the_count_under_add_remove(monkeypatch):
    """Why add/remove is refused, measured on the kernel (normal mean at mu = 5, B = 3, z = 2).

    Replace-one neighbours (same n, noise sd ``z 2B |dphi|``) shift
    ``lambda_hat`` by at most ``1/z`` noise sd, as the accountant assumes.
    Add/remove neighbours (n and n + 1) with the noise sd that add/remove
    calibration used (``z B |dphi|``) shift it by ``|s - mu_bar| / (z B)``:
    the added row's ``c(theta') - c(theta)`` is not covered by the noise on S.
    """
    clip, z = 3.0, 2.0
    y = np.random.default_rng(8).normal(5.0, 1.0, 200)
    y[-1] = clip                                                      # s = +B ...
    base = densities.NormalMeanExpFamily(y)
    replaced = densities.NormalMeanExpFamily(np.r_[y[:-1], -clip])   # ... replaced by -B: 2B
    added = densities.NormalMeanExpFamily(np.r_[y, 0.0])              # one more row, s = 0

    def shift_over_sd(a, b, stat_sd):
        la = _lambda_hats(monkeypatch, a, stat_sd)
        lb = _lambda_hats(monkeypatch, b, stat_sd)
        return abs(la.mean() - lb.mean()) / np.sqrt(0.5 * (la.var() + lb.var()))

    replace_one = shift_over_sd(base, replaced, z * 2 * clip)
    add_remove = shift_over_sd(base, added, z * 1 * clip)
    assert replace_one == pytest.approx(1 / z, abs=0.05)        # as claimed
    assert add_remove > 1 / z + 0.2                              # the leak (0.8 measured)
