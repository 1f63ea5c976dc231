"""The subsampled penalty sampler (seed 003, Section 4.1, Lemma 1, Theorem 9) on NumPy densities.

Statistical tolerances: means within 4 Monte Carlo standard errors (MCSE from
ArviZ's bulk ESS over 4 chains), sds within 10 % (the sd estimate's relative
error is about 1/sqrt(2 ESS) < 3 % here).  At ``b = n`` the kernel is the
exact penalty algorithm, so these tolerances are purely Monte Carlo.  At
``b < n`` the penalty correction for the subsampling error relies on the CLT
(approximate); for the normal-mean model the ratios are affine in ``y``, so the
batch sum is very close to Gaussian and the same tolerances apply (measured
errors: < 1 MCSE, sd within 2 %).
"""

from __future__ import annotations

import math

import densities
import numpy as np
import pytest
from test_penalty import check_moments

import stan_dp
from stan_dp.accounting import Budget, PrivacyBudgetError, Release
from stan_dp.accounting.bounds import subsampled_penalty_rdp_epsilon, subsampled_penalty_sensitivity_terms
from stan_dp.inference import PrivacyWarning
from stan_dp.samplers import minibatch as mb
from stan_dp.samplers import subsampled as S
from stan_dp.samplers.proposals import make_proposal

CHAINS = 4


def run_minibatch_kernel(model, kernel, proposal, draws, init, seed, burn=300):
    """Run CHAINS chains of a minibatch kernel; positions (chains, draws) of coordinate 0, infos."""
    out = np.empty((CHAINS, draws))
    infos = []
    for c in range(CHAINS):
        rp, rn = np.random.default_rng([seed, c, 0]), np.random.default_rng([seed, c, 1])
        state = mb.init(model, np.asarray(init, float), proposal.init_aux(rp))
        for i in range(burn + draws):
            state, info = kernel(rp, rn, state)
            if i >= burn:
                out[c, i - burn] = state.position[0]
                infos.append(info)
    return out, infos


class RowCounter(densities.NormalMean):
    """Records the size of every row request; ``rows=None`` (all rows) is a failure."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests: list[int] = []

    def row_log_lik(self, theta, rows=None):
        assert rows is not None, "a minibatch sampler asked for all rows"
        self.requests.append(len(rows))
        return super().row_log_lik(theta, rows)


@pytest.fixture(scope="module")
def normal_1000():
    return densities.NormalMean(np.random.default_rng(1).normal(1.0, 1.0, 1000))


@pytest.mark.parametrize("batch_size", [1000, 100])
def test_targets_the_tempered_posterior(normal_1000, batch_size):
    """b = n: exact (it is the penalty algorithm); b = n/10: CLT-approximate, see module doc."""
    temperature = 0.05
    mean, sd = normal_1000.posterior(temperature)
    prop = make_proposal("gaussian", 2 * sd, 1)
    kernel = S.build_kernel(normal_1000, prop, batch_size=batch_size, clip=6.0, noise_multiplier=0.5,
                            temperature=temperature)
    x, infos = run_minibatch_kernel(normal_1000, kernel, prop, 2500, [mean], seed=3)
    assert max(i.clip_fraction for i in infos) == 0.0  # clipping never bound: no clip bias
    if batch_size == normal_1000.n_rows:
        assert max(i.batch_variance for i in infos) == 0.0  # finite-population correction
    else:
        assert np.mean([i.noise_sd for i in infos]) > 0.3  # the noise is not negligible
    check_moments(x, mean, sd, min_ess=300)


def test_batch_of_all_rows_is_the_penalty_release(normal_1000):
    """At b = n the released mean is T * sum clip(r_j) and the sensitivity the penalty's 2 T L h."""
    a1, a2 = S.sensitivity_coefficients(1000, 1000, 0.3, 2.5)
    assert (a1, a2) == (pytest.approx(2 * 0.3 * 2.5), 0.0)
    x = np.random.default_rng(0).uniform(-1, 1, 1000)
    est, var = mb.batch_estimate(x, 1000)
    assert est == pytest.approx(x.sum()) and var == 0.0


def test_sensitivity_bounds_the_released_quantity_under_replace_one():
    """Brute force: lambda* - sigma_b^2/2 changes by at most c(h) when one batch row is replaced."""
    rng = np.random.default_rng(5)
    n, b, temperature, clip, h = 5000, 20, 0.02, 3.0, 0.7
    a1, a2 = S.sensitivity_coefficients(n, b, temperature, clip)
    c = a1 * h + a2 * h * h
    d_lambda, d_sigma = subsampled_penalty_sensitivity_terms(n, b, temperature, clip, h)
    assert c == pytest.approx(d_lambda + (1 - b / n) * d_sigma)
    bound = clip * h

    def released(r):
        est, var = mb.batch_estimate(temperature * r, n)
        return est - 0.5 * var

    worst = 0.0
    for _ in range(4000):
        r = rng.choice([-bound, bound, 0.0], size=b) if rng.random() < 0.5 else rng.uniform(-bound, bound, b)
        r2 = r.copy()
        r2[rng.integers(b)] = rng.choice([-bound, bound]) if rng.random() < 0.5 else rng.uniform(-bound, bound)
        worst = max(worst, abs(released(r) - released(r2)))
    # all other rows at +bound, the replaced one from -bound to +bound: the lambda part is attained
    r = np.full(b, bound)
    r2 = r.copy()
    r2[0] = -bound
    worst = max(worst, abs(released(r) - released(r2)))
    assert d_lambda <= worst <= c


def test_only_batch_rows_are_evaluated():
    model = RowCounter(np.random.default_rng(2).normal(size=5000))
    fit = stan_dp.subsampled_penalty(model, epsilon=1e4, delta=1e-5, batch_size=40, iterations=30,
                                     noise=1.0, clip=5.0, step_size=0.01, chains=1, seed=1,
                                     progress=False)
    assert fit.posterior["mu"].shape == (1, 30)
    assert len(model.requests) == 60 and set(model.requests) == {40}  # theta and theta' per iteration


def test_accounting_matches_the_accounting_module_and_theorem9():
    model = densities.NormalMean(np.random.default_rng(3).normal(size=4000))
    fit = stan_dp.subsampled_penalty(model, epsilon=2.0, delta=1e-5, batch_size=100, iterations=300,
                                     clip=3.0, step_size=0.02, n0=50, chains=2, warmup=100, seed=9,
                                     progress=False)
    attrs = fit.posterior.attrs
    z = attrs["noise_multiplier"]
    plan = [Release(z, batch_size=100, n=4000)]
    expected = Budget(2.0, 1e-5).epsilon_spent(plan, iterations=400, chains=2)
    assert attrs["epsilon_spent"] == pytest.approx(expected, rel=1e-12)
    assert attrs["epsilon_spent"] <= 2.0 and attrs["epsilon_spent"] == pytest.approx(2.0, rel=1e-4)
    assert attrs["accountant"] == "rdp-sampled-without-replacement"
    assert (attrs["batch_size"], attrs["n_rows"], attrs["temperature"]) == (100, 4000, 50 / 4000)
    # The seed's closed form (Thm 9 RDP, tau = z^2, converted by Thm 1) is an upper bound.
    seed_eps = min(subsampled_penalty_rdp_epsilon(a, z * z, 100, 4000, k=800) - math.log(1e-5) / (a - 1)
                   for a in range(2, 65))
    assert attrs["epsilon_spent"] <= seed_eps
    for name in ("clip_fraction", "batch_variance", "lp"):
        assert name not in fit.sample_stats
    assert set(fit.sample_stats.data_vars) == set(S.RELEASED_STATS)


def test_reproducible_with_a_seed_and_nonprivate_stats_only_on_opt_in():
    model = densities.NormalMean(np.random.default_rng(4).normal(size=500))
    kw = dict(epsilon=5.0, delta=1e-5, batch_size=50, iterations=50, clip=3.0, step_size=0.05,
              n0=20, chains=2, progress=False)
    a = stan_dp.subsampled_penalty(model, seed=11, **kw)
    b = stan_dp.subsampled_penalty(model, seed=11, **kw)
    c = stan_dp.subsampled_penalty(model, seed=12, **kw)
    np.testing.assert_array_equal(a.posterior["mu"].values, b.posterior["mu"].values)
    assert not np.array_equal(a.posterior["mu"].values, c.posterior["mu"].values)
    with pytest.warns(PrivacyWarning):
        d = stan_dp.subsampled_penalty(model, seed=11, release_nonprivate=("batch_variance",), **kw)
    assert "batch_variance" in d.sample_stats and d.posterior.attrs["nonprivate_outputs"] == "batch_variance"
    np.testing.assert_array_equal(a.posterior["mu"].values, d.posterior["mu"].values)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(batch_size=101), ValueError, "batch_size must be <="),
    (dict(batch_size=1), ValueError, "batch_size must be >= 2"),
    (dict(batch_size=10.0), ValueError, "batch_size must be an integer"),
    (dict(n0=10, temperature=0.5), ValueError, "not both"),
    (dict(n0=200), ValueError, "n0 must be <="),
    (dict(temperature=-1.0), ValueError, "temperature"),
    (dict(clip=0.0), ValueError, "clip"),
    (dict(epsilon=0.0), ValueError, "epsilon"),
    (dict(delta=1.0), ValueError, "delta"),
    (dict(iterations=10**6, noise=20.0), PrivacyBudgetError, "do not fit"),
    (dict(release_nonprivate=("lp",)), ValueError, "cannot release"),
])
def test_refusals_before_the_data_is_touched(kwargs, exc, match):
    model = densities.Untouchable(densities.NormalMean(np.zeros(100)))
    args = dict(epsilon=1.0, delta=1e-5, batch_size=10, iterations=10, clip=1.0, step_size=0.1,
                progress=False)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        stan_dp.subsampled_penalty(model, **args)
