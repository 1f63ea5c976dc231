"""Kernel-level tests of the penalty algorithm (exactness, penalty term, clipping, owners).

Statistical tolerances: means within 4 Monte Carlo standard errors (MCSE from
ArviZ's bulk ESS over 4 chains), sds within 10 % (the relative error of an sd
estimate is about 1/sqrt(2 ESS), below 2 % for the ESS used here; 10 % is the
issue's tolerance and still fails the uncorrected chain, which is ~20 % off).
"""

from __future__ import annotations

import warnings

import densities
import numpy as np
import pytest

from stan_dp.samplers import penalty as P
from stan_dp.samplers.proposals import make_proposal

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

CHAINS = 4


def run_kernel(model, kernel, proposal, draws, init, seed=0, burn=200, init_state=P.init):
    """Run CHAINS chains of ``kernel``; return positions (chains, draws, dim) and infos.

    ``init_state(model, position, aux)`` builds the first state (the penalty
    sampler's by default; the exponential-family tests pass theirs).
    """
    out = np.empty((CHAINS, draws, model.dim))
    infos = []
    for c in range(CHAINS):
        rp = np.random.default_rng([seed, c, 0])
        rn = np.random.default_rng([seed, c, 1])
        state = init_state(model, np.asarray(init, float), proposal.init_aux(rp))
        for i in range(burn + draws):
            state, info = kernel(rp, rn, state)
            if i >= burn:
                out[c, i - burn] = state.position
                infos.append(info)
    return out, infos


def check_moments(x, mean, sd, *, k_mcse=4.0, sd_tol=0.10, min_ess=400):
    """Assert mean within k MCSEs and sd within sd_tol of the truth (x: chains x draws)."""
    ess = float(az.ess(x))
    assert ess > min_ess, f"ESS {ess:.0f} too small for the test to be meaningful"
    mcse = x.std() / np.sqrt(ess)
    assert abs(x.mean() - mean) < k_mcse * mcse, (x.mean(), mean, mcse)
    assert abs(x.std() / sd - 1) < sd_tol, (x.std(), sd)


@pytest.fixture(scope="module")
def normal_mean():
    return densities.NormalMean(np.random.default_rng(1).normal(1.0, 1.0, 50))


@pytest.mark.parametrize("noise_sd", [0.3, 1.5])
def test_exact_without_clipping_at_light_and_heavy_noise(normal_mean, noise_sd):
    prop = make_proposal("gaussian", 0.25, 1)
    kernel = P.build_kernel(normal_mean, prop, clip=1e6, noise_multiplier=0.0, noise_sd=noise_sd)
    x, infos = run_kernel(normal_mean, kernel, prop, 5000, [1.0], seed=11)
    assert all(i.clip_fraction == 0 for i in infos)
    assert all(i.noise_sd == noise_sd for i in infos)
    mean, sd = normal_mean.posterior()
    check_moments(x[..., 0], mean, sd)


def test_penalty_term_matters(normal_mean):
    """Same heavy noise, penalty dropped: the chain is visibly too wide."""
    prop = make_proposal("gaussian", 0.25, 1)
    kernel = P.build_kernel(normal_mean, prop, clip=1e6, noise_multiplier=0.0, noise_sd=1.5,
                            correction=False)
    x, _ = run_kernel(normal_mean, kernel, prop, 5000, [1.0], seed=11)
    _, sd = normal_mean.posterior()
    assert x[..., 0].std() / sd - 1 > 0.12


def test_log_acceptance():
    assert P.log_acceptance(1.0, 4.0) == -1.0
    assert P.log_acceptance(5.0, 4.0) == 0.0
    assert P.log_acceptance(-1.0, 4.0, correction=False) == -1.0
    assert P.log_acceptance(np.nan, 1.0) == -np.inf


def test_tempered_posterior_is_exact(normal_mean):
    prop = make_proposal("gaussian", 0.4, 1)
    kernel = P.build_kernel(normal_mean, prop, clip=1e6, noise_multiplier=0.0, noise_sd=1.0,
                            temperature=0.4)
    x, _ = run_kernel(normal_mean, kernel, prop, 5000, [1.0], seed=12)
    mean, sd = normal_mean.posterior(temperature=0.4)
    check_moments(x[..., 0], mean, sd)


@pytest.fixture(scope="module")
def mean_scale():
    model = densities.NormalMeanScale(np.random.default_rng(3).normal(0.5, 1.5, 40))
    return model, model.reference()


@pytest.mark.parametrize("kind", ["gaussian", "component", "guided"])
def test_each_proposal_is_exact_on_two_parameter_model(mean_scale, kind):
    model, ref = mean_scale
    steps = [0.3, 0.15] if kind == "gaussian" else [0.45, 0.25]
    prop = make_proposal(kind, steps, 2)
    kernel = P.build_kernel(model, prop, clip=1e6, noise_multiplier=0.0, noise_sd=1.0)
    x, infos = run_kernel(model, kernel, prop, 6000, [0.5, 0.4], seed=21)
    assert all(i.clip_fraction == 0 for i in infos)
    for j, name in enumerate(("mu", "tau")):
        check_moments(x[..., j], *ref[name])


def test_noise_sd_is_multiplier_times_sensitivity(normal_mean):
    """sigma = z * 2 * T * L * |dtheta| for every move (replace-one)."""
    prop = make_proposal("component", 0.3, 1)
    z, clip, temp = 0.7, 2.0, 0.5
    kernel = P.build_kernel(normal_mean, prop, clip=clip, noise_multiplier=z, temperature=temp)
    rp, rn = np.random.default_rng(0), np.random.default_rng(1)
    state = P.init(normal_mean, np.array([1.0]))
    checked = 0
    for _ in range(300):
        new, info = kernel(rp, rn, state)
        if info.is_accepted:
            move = abs(new.position[0] - state.position[0])
            assert info.noise_sd == pytest.approx(z * 2 * temp * clip * move)
            checked += 1
        state = new
    assert checked > 10
    kernel_ar = P.build_kernel(normal_mean, prop, clip=clip, noise_multiplier=z, relation="add_remove")
    state = P.init(normal_mean, np.array([1.0]))
    for _ in range(50):
        new, info = kernel_ar(rp, rn, state)
        if info.is_accepted:
            assert info.noise_sd == pytest.approx(z * clip * abs(new.position[0] - state.position[0]))
        state = new


def test_clipping_shows_up_in_clip_fraction(normal_mean):
    prop = make_proposal("gaussian", 0.25, 1)
    kernel = P.build_kernel(normal_mean, prop, clip=0.3, noise_multiplier=0.0, noise_sd=0.5)
    _, infos = run_kernel(normal_mean, kernel, prop, 500, [1.0], burn=0)
    frac = np.mean([i.clip_fraction for i in infos])
    assert 0.05 < frac < 1.0


def test_multi_owner_is_exact_and_penalises_the_sum_of_variances(normal_mean):
    owners = np.repeat(["a", "b", "c"], [10, 15, 25])
    prop = make_proposal("gaussian", 0.25, 1)
    kernel = P.build_kernel(normal_mean, prop, clip=1e6, noise_multiplier=0.0, noise_sd=0.8,
                            owners=owners)
    x, infos = run_kernel(normal_mean, kernel, prop, 5000, [1.0], seed=13)
    assert all(i.noise_sd == pytest.approx(np.sqrt(3) * 0.8) for i in infos)
    check_moments(x[..., 0], *normal_mean.posterior())


def test_multi_owner_releases_one_noise_per_owner(normal_mean):
    """With K owners the kernel draws K noises per iteration from the noise stream."""
    owners = np.arange(50) % 4
    prop = make_proposal("gaussian", 0.25, 1)
    kernel = P.build_kernel(normal_mean, prop, clip=1.0, noise_multiplier=1.0, owners=owners)
    rn = np.random.default_rng(5)
    kernel(np.random.default_rng(4), rn, P.init(normal_mean, np.array([1.0])))
    ref = np.random.default_rng(5)
    ref.standard_normal(4)
    assert rn.random() == ref.random()
    with pytest.raises(ValueError, match="owners"):
        P.build_kernel(normal_mean, prop, clip=1.0, noise_multiplier=1.0, owners=[0, 1])


class _NaNRows(densities.NormalMean):
    """Rows return NaN / -inf in parts of the space: chains must not crash."""

    def row_log_lik(self, theta, rows=None):
        vals = super().row_log_lik(theta, rows)
        if theta[0] > 1.3:
            vals = vals.copy()
            vals[:3] = np.nan
            vals[3:5] = -np.inf
        return vals


def test_nonfinite_rows_never_crash_and_are_handled_by_the_mechanism():
    model = _NaNRows(np.random.default_rng(1).normal(1.0, 1.0, 50))
    prop = make_proposal("gaussian", 0.3, 1)
    kernel = P.build_kernel(model, prop, clip=50.0, noise_multiplier=0.0, noise_sd=0.5)
    x, infos = run_kernel(model, kernel, prop, 2000, [1.0], burn=0)
    assert np.all(np.isfinite(x))
    assert any(i.clip_fraction > 0 for i in infos)


def test_nonfinite_prior_rejects_without_touching_data():
    class Bounded(densities.NormalMean):
        def log_prior(self, theta):
            return -np.inf if theta[0] > 1.0 else super().log_prior(theta)

    model = Bounded(np.zeros(10))
    prop = make_proposal("component", 5.0, 1)
    kernel = P.build_kernel(model, prop, clip=10.0, noise_multiplier=1.0)
    state = P.init(model, np.array([0.9]))
    rp, rn = np.random.default_rng(0), np.random.default_rng(1)
    for _ in range(200):
        before = model.row_calls
        state, info = kernel(rp, rn, state)
        assert state.position[0] <= 1.0
        if info.acceptance_rate == 0.0 and not info.is_accepted and model.row_calls == before:
            break
    else:
        pytest.fail("never proposed outside the prior support")


def test_kernel_refuses_bad_clip(normal_mean):
    prop = make_proposal("gaussian", 0.1, 1)
    for bad in (0.0, -1.0, np.inf):
        with pytest.raises(ValueError, match="clip"):
            P.build_kernel(normal_mean, prop, clip=bad, noise_multiplier=1.0)


def _sign_change_rate(model, kind, seed=5):
    prop = make_proposal(kind, [0.1, 0.05], 2)
    kernel = P.build_kernel(model, prop, clip=1e6, noise_multiplier=0.0, noise_sd=0.3)
    rp, rn = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    state = P.init(model, np.array([0.5, 0.4]), prop.init_aux(rp))
    signs = []
    for _ in range(4000):
        new, info = kernel(rp, rn, state)
        if info.is_accepted and new.position[0] != state.position[0]:
            signs.append(np.sign(new.position[0] - state.position[0]))
        state = new
    signs = np.array(signs)
    return np.mean(signs[1:] != signs[:-1])


def test_guided_walk_is_persistent(mean_scale):
    """Directions persist: consecutive accepted moves of a coordinate change sign only after an
    odd number of rejects (rate (1-a)/(2-a), small at high acceptance a), against ~1/2 for the
    plain component walk."""
    model, _ = mean_scale
    assert _sign_change_rate(model, "guided") < 0.3
    assert _sign_change_rate(model, "component") > 0.4
