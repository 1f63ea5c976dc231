"""A Stan program in terms of summed statistics, wired into the exp-family penalty sampler.

Yıldırım (seed 000), Section 3.3, Algorithm 3 and eq. (8); the model wrapper is
:class:`stan_dp.expfamily_model.StanExpFamilyModel`.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import bundled, stan_test_model
from scipy import stats
from test_penalty import check_moments

from stan_dp.expfamily_model import ExpFamilyModelError, StanExpFamilyModel
from stan_dp.samplers import expfamily as E
from stan_dp.samplers.proposals import make_proposal

PRIOR = {"mu_loc": 0.0, "mu_scale": 10.0, "sigma_scale": 5.0}
CLAMP = 6.0
BOUND = CLAMP * np.sqrt(1 + CLAMP**2)


def per_row(row):
    y = float(np.clip(row["y"], -CLAMP, CLAMP))
    return np.array([y, y * y])


def vectorized(rows):
    y = np.clip(rows["y"], -CLAMP, CLAMP)
    return np.column_stack([y, y * y])


def normal_data(n, seed=5, mu=0.5, sd=1.3):
    y = np.random.default_rng(seed).normal(mu, sd, n)
    assert np.abs(y).max() < CLAMP   # clamping does not bind: the target is the plain posterior
    return {"N": n, "y": y, **PRIOR}


@pytest.fixture(scope="module")
def normal_lib(compiled):
    return compiled(bundled("normal_suffstats"))


@pytest.fixture(scope="module")
def small(normal_lib):
    return StanExpFamilyModel(normal_lib, normal_data(200), statistic=per_row)


def exact_log_lik(y, theta):
    return float(stats.norm.logpdf(y, theta[0], np.exp(theta[1])).sum())


def quadrature(y, grid=601):
    """Posterior mean and sd of mu and sigma by quadrature over (mu, log sigma)."""
    n, m, s = y.size, y.mean(), y.std()
    mu = m + s / np.sqrt(n) * np.linspace(-9, 9, grid)
    tau = np.log(s) + np.sqrt(0.5 / n) * np.linspace(-9, 9, grid)
    M, T = np.meshgrid(mu, tau, indexing="ij")
    sig = np.exp(T)
    s1, s2 = y.sum(), (y**2).sum()
    logp = (-n * T - (s2 - 2 * M * s1 + n * M**2) / (2 * sig**2)
            + stats.norm.logpdf(M, 0, 10) + stats.norm.logpdf(sig, 0, 5) + T)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    out = {}
    for name, x in (("mu", M), ("sigma", sig)):
        mean = (w * x).sum()
        out[name] = (mean, np.sqrt((w * (x - mean) ** 2).sum()))
    return out


# --------------------------------------------------------------- densities --
def test_log_lik_stats_is_the_normal_log_likelihood(small):
    y = normal_data(200)["y"]
    s = small.row_stats()
    np.testing.assert_allclose(s, np.column_stack([y, y**2]))   # no clamping at this bound
    total = s.sum(axis=0)
    assert small.stat_dim == 2 and small.dim == 2 and small.n_rows == 200
    assert small.param_names == ["mu", "sigma"] and small.row_vars == ("y",)
    for theta in ([0.3, np.log(1.2)], [-1.0, 0.5], [2.0, -1.5]):
        theta = np.array(theta)
        assert small.log_lik_stats(theta, total) == pytest.approx(exact_log_lik(y, theta), rel=1e-10)
        sigma = np.exp(theta[1])
        prior = (stats.norm.logpdf(theta[0], 0, 10) + stats.norm.logpdf(sigma, 0, 5) + theta[1])
        assert small.log_prior(theta) == pytest.approx(prior, rel=1e-12)
        offset, phi = small.natural_parameters(theta)
        np.testing.assert_allclose(phi, [theta[0] / sigma**2, -0.5 / sigma**2], rtol=1e-10)
        c = -theta[1] - 0.5 * np.log(2 * np.pi) - theta[0] ** 2 / (2 * sigma**2)
        assert offset == pytest.approx(200 * c, rel=1e-10)
    theta = np.array([0.3, np.log(1.2)])
    assert small.constrain(theta)["sigma"] == pytest.approx(1.2)
    assert small.constrain(theta)["mu"].shape == ()
    np.testing.assert_allclose(small.unconstrain({"mu": 0.3, "sigma": 1.2}), theta)
    E.check_affine(small)          # the sampler's own check passes too


def test_vectorized_statistic_and_natural_parameters_stay_accurate_at_large_n(normal_lib):
    n = 1_000_000
    data = {"N": n, "y": np.random.default_rng(0).normal(size=n), **PRIOR}
    model = StanExpFamilyModel(normal_lib, data, statistic=vectorized, vectorized=True)
    assert model.row_stats().shape == (n, 2)
    # n c(θ) ~ 1e8 here; without rescaling the unit statistic, φ would lose ~8 digits.
    theta = np.array([2.0, -2.0])
    _, phi = model.natural_parameters(theta)
    sigma2 = np.exp(-4.0)
    np.testing.assert_allclose(phi, [2.0 / sigma2, -0.5 / sigma2], rtol=1e-12)


# ---------------------------------------------------------------- refusals --
def test_non_affine_model_is_refused(compiled):
    lib = compiled(stan_test_model("expfamily_not_affine"))
    data = {"N": 20, "y": np.ones(20)}
    with pytest.raises(ExpFamilyModelError, match="not affine in 'S'"):
        StanExpFamilyModel(lib, data, statistic=lambda r: np.array([r["y"]]))


def test_model_declaring_the_rows_is_refused(compiled):
    lib = compiled(stan_test_model("expfamily_declares_rows"))
    data = {"N": 20, "y": np.ones(20)}
    with pytest.raises(ExpFamilyModelError, match="declares the row variable 'y'"):
        StanExpFamilyModel(lib, data, statistic=lambda r: np.array([r["y"]]))


def test_bad_data_and_statistics_are_refused(normal_lib):
    data = normal_data(30)
    with pytest.raises(ExpFamilyModelError, match="remove 'S'"):
        StanExpFamilyModel(normal_lib, {**data, "S": [1.0, 2.0]}, statistic=per_row)
    with pytest.raises(ExpFamilyModelError, match="row-count variable .N. is not in the data"):
        StanExpFamilyModel(normal_lib, {k: v for k, v in data.items() if k != "N"}, statistic=per_row)
    with pytest.raises(ExpFamilyModelError, match="row variables not in the data"):
        StanExpFamilyModel(normal_lib, data, statistic=per_row, row_vars=["z"])
    with pytest.raises(ExpFamilyModelError, match="rejected the public data"):
        StanExpFamilyModel(normal_lib, {k: v for k, v in data.items() if k != "mu_scale"},
                           statistic=per_row)
    with pytest.raises(TypeError, match="callable"):
        StanExpFamilyModel(normal_lib, data, statistic=None)
    wrong = StanExpFamilyModel(normal_lib, data, statistic=lambda r: np.array([r["y"]]))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        wrong.row_stats()
    nan = StanExpFamilyModel(normal_lib, data, statistic=lambda r: np.array([np.nan, 1.0]))
    with pytest.raises(ValueError, match="non-finite values"):
        nan.row_stats()
    vec = StanExpFamilyModel(normal_lib, data, statistic=lambda rows: rows["y"], vectorized=True)
    with pytest.raises(ValueError, match=r"must return shape \(30, 2\)"):
        vec.row_stats()
    with pytest.raises(ValueError, match=r"theta must have shape \(2,\)"):
        wrong.log_prior(np.zeros(3))
    with pytest.raises(ValueError, match=r"stats must have shape \(2,\)"):
        wrong.log_lik_stats(np.zeros(2), np.zeros(3))


# ----------------------------------------------------------------- privacy --
def test_confidential_rows_never_reach_stan(normal_lib, monkeypatch):
    import bridgestan

    sentinel = 4.2424242424242
    data = normal_data(40)
    data["y"] = data["y"].copy()
    data["y"][7] = sentinel
    seen: list[str] = []
    original = bridgestan.StanModel

    def recording(lib, data_json=None, *args, **kwargs):
        seen.append(data_json)
        return original(lib, data_json, *args, **kwargs)

    monkeypatch.setattr(bridgestan, "StanModel", recording)
    model = StanExpFamilyModel(normal_lib, data, statistic=per_row)
    model.log_lik_stats(np.zeros(2), np.ones(2))
    E.penalty_expfamily(model, epsilon=5.0, delta=1e-6, iterations=20, clip=BOUND,
                        step_size=0.1, chains=1, seed=1, progress=False)
    assert len(seen) >= 2 + model.stat_dim      # prior, S = 0, S = t e_k (+ checks)
    for text in seen:
        payload = json.loads(text)
        assert "y" not in payload
        assert set(payload) == {"N", "S", "mu_loc", "mu_scale", "sigma_scale"}
        assert str(sentinel)[:8] not in text
        assert payload["N"] in (0, 40)
    assert "y" not in model.public_data
    assert model.n_row_passes == 1                # the sampler read the rows once


# -------------------------------------------------------------------- cost --
def test_cost_per_iteration_does_not_depend_on_n(normal_lib):
    counts = {}
    for n in (50, 5000):
        model = StanExpFamilyModel(normal_lib, normal_data(n, seed=n), statistic=vectorized,
                                   vectorized=True)
        prop = make_proposal("component", [0.05, 0.05], 2)
        kernel = E.build_kernel(model, prop, stat_sum=E.clamped_stat_sum(model, BOUND), stat_sd=1.0)
        rp, rn = np.random.default_rng(0), np.random.default_rng(1)
        state = E.init(model, np.array([0.5, 0.2]), prop.init_aux(rp))
        before = model.n_evaluations
        for _ in range(300):
            state, _ = kernel(rp, rn, state)
        counts[n] = model.n_evaluations - before
        assert model.n_row_passes == 1
    # K + 2 = 4 Stan evaluations per iteration (prior, S = 0, S = t e_1, S = t e_2), any n.
    assert counts == {50: 300 * 4, 5000: 300 * 4}


# ----------------------------------------------------------- statistics --
def test_private_posterior_matches_exact_posterior_with_light_noise(normal_lib):
    """Light noise (z = 0.05, sd of S ≈ 3.7): exact target, so moments within MC error.

    ``check_moments`` asserts the means within 4 MCSE (MCSE = sd / sqrt(ESS),
    ESS from arviz, required > 400) and the sds within 10%.  Runs in ~10 s.
    """
    data = normal_data(200, seed=11)
    model = StanExpFamilyModel(normal_lib, data, statistic=per_row)
    ref = quadrature(data["y"])
    idata = E.penalty_expfamily(
        model, epsilon=1e7, delta=1e-6, iterations=3000, noise=0.05, warmup=200, chains=4,
        clip=BOUND, step_size=[0.15, 0.08], proposal="gaussian", init=[0.5, 0.25],
        seed=2024, progress=False,
    )
    assert idata.attrs["sampler"] == "penalty_expfamily"
    assert idata.attrs["stat_dim"] == 2
    assert float(np.median(idata.sample_stats["noise_sd"])) > 0.05   # the noise is really there
    assert not hasattr(idata, "observed_data")
    for name in ("mu", "sigma"):
        check_moments(idata.posterior[name].values, *ref[name])
