"""The secure noise path (issue 14, item 3): exact samplers, the grid, its accounting, the streams.

Distribution tests draw from a *seeded* ``random.Random`` source: the samplers
are exact whatever the bits, so this checks the algorithms deterministically
(no flakes); the OS source is only checked to be the production default.
Goodness of fit: Pearson chi-square against the exact pmf (tails lumped so
every expected count is >= 20), rejected at p < 1e-3; with 60 000 draws a
variance 3 % off, or the continuous Gaussian rounded to the integers at small
sigma, is rejected (checked below), so the tests have teeth.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import densities
import numpy as np
import pytest
from scipy import special, stats

import stan_dp
from stan_dp.accounting.gaussian import delta_for_pld_mean
from stan_dp.augmentation.noise import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace
from stan_dp.mechanisms import chain_streams, gaussian_release
from stan_dp.samplers import minibatch as mb
from stan_dp.secure_noise import (
    GRID_BITS,
    SecureNoise,
    _round_to_grid,
    bernoulli_exp,
    default_grid_exponent,
    discrete_gaussian,
    discrete_laplace,
    grid_delta_bound,
    laplace_grid_scale,
    rounding_tv_bound,
)

DRAWS = 60_000
ALPHA = 1e-3


def dgauss_pmf(z: np.ndarray, sigma2: float) -> np.ndarray:
    """Exact discrete Gaussian pmf (normalised over a range far into the tails)."""
    span = int(40 * math.sqrt(sigma2)) + 40
    grid = np.arange(-span, span + 1)
    norm = np.exp(-grid.astype(float) ** 2 / (2 * sigma2)).sum()
    return np.exp(-np.asarray(z, float) ** 2 / (2 * sigma2)) / norm


def dlaplace_pmf(z: np.ndarray, scale: float) -> np.ndarray:
    """Exact discrete Laplace pmf: (1 - q)/(1 + q) q^|z|, q = exp(-1/scale)."""
    q = math.exp(-1.0 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(np.asarray(z, float))


def chi2_pvalue(samples: np.ndarray, pmf) -> float:
    """Pearson chi-square p-value with a central window of bins and both tails lumped."""
    samples = np.asarray(samples, dtype=np.int64)
    n = samples.size
    k = 0
    while n * pmf(np.array([k + 1]))[0] >= 20:
        k += 1
    inner = np.arange(-k, k + 1)
    p_inner = pmf(inner)
    p_tail = (1.0 - p_inner.sum()) / 2  # symmetric
    observed = np.array([np.count_nonzero(samples < -k)]
                        + [np.count_nonzero(samples == z) for z in inner]
                        + [np.count_nonzero(samples > k)])
    expected = n * np.concatenate([[p_tail], p_inner, [p_tail]])
    return float(stats.chisquare(observed, expected).pvalue)


# --- exact samplers --------------------------------------------------------

@pytest.mark.parametrize("num, den", [(0, 1), (3, 10), (1, 1), (17, 10), (5, 2)])
def test_bernoulli_exp_has_probability_exp_minus_gamma(num, den):
    src = random.Random(1000 + num)
    hits = sum(bernoulli_exp(num, den, src) for _ in range(40_000))
    p = math.exp(-num / den)
    if num == 0:
        assert hits == 40_000
    else:
        assert stats.binomtest(hits, 40_000, p).pvalue > ALPHA


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(9, 4), Fraction(7), Fraction(1000, 3)])
def test_discrete_gaussian_matches_its_pmf(sigma2):
    src = random.Random(int(sigma2 * 12))
    x = np.array([discrete_gaussian(sigma2.numerator, sigma2.denominator, src) for _ in range(DRAWS)])
    assert chi2_pvalue(x, lambda z: dgauss_pmf(z, float(sigma2))) > ALPHA
    # exact tail mass P(|Z| >= 2 sigma), a binomial test
    cut = math.ceil(2 * math.sqrt(sigma2))
    span = np.arange(-cut + 1, cut)
    tail = 1.0 - dgauss_pmf(span, float(sigma2)).sum()
    assert stats.binomtest(int(np.count_nonzero(np.abs(x) >= cut)), DRAWS, tail).pvalue > ALPHA


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3, 2), Fraction(5), Fraction(40, 3)])
def test_discrete_laplace_matches_its_pmf(scale):
    src = random.Random(int(scale * 6))
    x = np.array([discrete_laplace(scale.numerator, scale.denominator, src) for _ in range(DRAWS)])
    assert chi2_pvalue(x, lambda z: dlaplace_pmf(z, float(scale))) > ALPHA
    q = math.exp(-1.0 / float(scale))
    # exact tail P(|Z| >= k) = 2 q^k / (1 + q)
    k = max(1, round(2 * float(scale)))
    assert stats.binomtest(int(np.count_nonzero(np.abs(x) >= k)), DRAWS, 2 * q**k / (1 + q)).pvalue > ALPHA


def test_the_goodness_of_fit_test_has_power():
    """A 3 % variance error and a rounded continuous Gaussian are both rejected."""
    src = random.Random(5)
    x = np.array([discrete_gaussian(9, 4, src) for _ in range(DRAWS)])
    assert chi2_pvalue(x, lambda z: dgauss_pmf(z, 2.25 * 1.03 ** 2)) < ALPHA
    rounded = np.rint(np.random.default_rng(5).normal(0.0, 0.5, DRAWS))
    assert chi2_pvalue(rounded, lambda z: dgauss_pmf(z, 0.25)) < ALPHA


def test_samplers_refuse_bad_parameters():
    src = random.Random(0)
    for bad in [(0, 1), (-1, 2), (1, 0)]:
        with pytest.raises(ValueError):
            discrete_gaussian(*bad, src)
        with pytest.raises(ValueError):
            discrete_laplace(*bad, src)
    with pytest.raises(ValueError):
        bernoulli_exp(-1, 1, src)


def test_uniform_draws_are_exact_and_batches_uniform():
    noise = SecureNoise(random.Random(3))
    u = np.array([noise.random() for _ in range(20_000)])
    assert np.all((u >= 0) & (u < 1)) and np.all(u * 2.0**53 == np.floor(u * 2.0**53))
    assert stats.kstest(u, "uniform").pvalue > ALPHA
    # every 2-subset (and, through the complement, 3-subset) of 5 rows equally likely (10 subsets)
    for size in (2, 3):
        counts: dict[tuple[int, ...], int] = {}
        for _ in range(20_000):
            b = noise.sample_without_replacement(5, size)
            assert b.dtype == np.int64 and np.all(np.diff(b) > 0) and b.size == size
            counts[tuple(b)] = counts.get(tuple(b), 0) + 1
        assert len(counts) == 10
        assert stats.chisquare(list(counts.values())).pvalue > ALPHA
    ints = noise.uniform_integers(6, 60_000)
    assert stats.chisquare(np.bincount(ints, minlength=6)).pvalue > ALPHA
    assert noise.sample_without_replacement(4, 4).tolist() == [0, 1, 2, 3]
    big = mb.draw_batch(noise, 10**6, 500)
    assert big.size == 500 and np.unique(big).size == 500 and big.max() < 10**6
    with pytest.raises(ValueError):
        noise.sample_without_replacement(3, 4)


def test_barker_correction_draws_from_the_secure_stream_follow_the_weights():
    from stan_dp.samplers.barker_correction import correction_distribution

    dist = correction_distribution()
    noise = SecureNoise(random.Random(9))
    draws = np.array([dist.sample(noise) for _ in range(DRAWS)])
    index = np.searchsorted(dist.atoms, draws)
    assert np.all(dist.atoms[index] == draws)
    big = dist.weights * DRAWS >= 20  # lump the light atoms
    observed = np.append(np.bincount(index, minlength=dist.atoms.size)[big],
                         np.count_nonzero(~big[index]))
    expected = np.append(dist.weights[big], dist.weights[~big].sum()) * DRAWS
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > ALPHA


# --- the grid --------------------------------------------------------------

@pytest.mark.parametrize("sd", [1e-300, 3e-7, 0.3, 1.0, 1.7, 2.0, 12345.678, 1e250])
def test_default_grid_is_a_power_of_two_between_sd_2_to_minus_53_and_minus_52(sd):
    e = default_grid_exponent(sd)
    assert Fraction(2) ** (e + GRID_BITS) <= Fraction(sd) < Fraction(2) ** (e + GRID_BITS + 1)


def test_rounding_to_the_grid_is_exact():
    rng = np.random.default_rng(0)
    for x in np.concatenate([rng.normal(0, 1e3, 200), [0.5, -0.5, 1.5, 2.5, 1e300, -3e-310]]):
        for e in (-60, -3, 0, 4):
            exact = Fraction(float(x)) / Fraction(2) ** e
            m = _round_to_grid(float(x), e)
            assert abs(exact - m) <= Fraction(1, 2)
            assert m == math.floor(exact + Fraction(1, 2))
    # the sensitivity claim: |round(a) - round(b)| <= |a - b| + 1 grid unit
    a, b = rng.normal(0, 10, 500), rng.normal(0, 10, 500)
    for x, y in zip(a, b):
        assert abs(_round_to_grid(x, -2) - _round_to_grid(y, -2)) <= abs(x - y) * 4 + 1


def test_secure_gaussian_release_is_grid_rounding_plus_discrete_gaussian():
    """On a coarse grid (bits=2) the release is gamma (round(v/gamma) + N_Z(0, (sd/gamma)^2)), exactly."""
    noise = SecureNoise(random.Random(11), bits=2)
    sd, value = 1.3, 0.7361
    e = default_grid_exponent(sd, 2)  # gamma = 2^-2, sigma = 5.2 grid units
    gamma = 2.0 ** e
    out = noise.gaussian_release(np.full(DRAWS, value), sd)
    z = out / gamma
    assert np.all(z == np.rint(z))  # on the grid
    centre = _round_to_grid(value, e)
    assert chi2_pvalue(np.rint(z).astype(np.int64) - centre, lambda k: dgauss_pmf(k, (sd / gamma) ** 2)) > ALPHA
    # scalars stay scalars, sd = 0 is the identity, non-finite values pass through
    assert isinstance(noise.gaussian_release(0.5, sd), float)
    assert noise.gaussian_release(0.5, 0.0) == 0.5
    assert np.isnan(noise.gaussian_release(np.array([np.nan]), sd)[0])
    # a tiny sd means a tiny grid and integers far beyond the float range: still correct
    for tiny in (1e-300, 3e-320):
        out = SecureNoise(random.Random(2)).gaussian_release(np.array([1.0, -2.5e300, 0.0]), tiny)
        assert np.all(np.abs(out - [1.0, -2.5e300, 0.0]) <= 40 * tiny + np.spacing(np.abs([1.0, 2.5e300, 0.0])))
    with pytest.raises(ValueError, match="too coarse"):
        noise.gaussian_release(0.5, sd, grid_exponent=e + 1)


def test_secure_release_ignores_the_low_order_bits_of_the_value():
    """The output is a function of round(v/gamma) and the noise only: no bits of v below the grid leak."""
    v = 0.123456789
    e = default_grid_exponent(1.0)
    lo = v - 2.0 ** e * 0.25
    hi = v + 2.0 ** e * 0.25
    assert _round_to_grid(lo, e) == _round_to_grid(v, e) == _round_to_grid(hi, e)
    outs = [SecureNoise(random.Random(4)).gaussian_release(x, 1.0) for x in (lo, v, hi)]
    assert outs[0] == outs[1] == outs[2]


def test_rounding_tv_bound_dominates_the_exact_total_variation():
    for sigma in (1.0, 1.5, 2.0, 4.0, 8.0):
        z = np.arange(-int(40 * sigma), int(40 * sigma) + 1)
        disc = dgauss_pmf(z, sigma**2)
        rounded = special.ndtr((z + 0.5) / sigma) - special.ndtr((z - 0.5) / sigma)
        tv = 0.5 * np.abs(disc - rounded).sum()
        assert tv <= rounding_tv_bound(sigma)
        assert rounding_tv_bound(sigma) < 30 * tv  # and is not vacuous
    with pytest.raises(ValueError):
        rounding_tv_bound(0.5)


def test_grid_delta_bound_closed_form_and_the_derivative_it_relies_on():
    n, eps = 10**8, 2.0
    expected = (math.sqrt(n) * 2.0**-52 / math.sqrt(2 * math.pi)
                + (1 + math.exp(eps)) * n * rounding_tv_bound(2.0**52))
    assert grid_delta_bound(n, eps) == pytest.approx(expected, rel=1e-15)
    assert grid_delta_bound(n, eps) < 1e-11
    assert grid_delta_bound(0, eps) == 0.0
    # d delta / d mu_GDP = phi(eps/mu - mu/2) <= 1/sqrt(2 pi), mu_GDP = sqrt(2 M) (M: the PLD mean)
    for eps_, mu in [(0.5, 0.3), (1.0, 1.0), (3.0, 2.0), (8.0, 3.5)]:
        h = 1e-4 * mu
        d1 = delta_for_pld_mean(eps_, (mu + h) ** 2 / 2)
        d0 = delta_for_pld_mean(eps_, mu**2 / 2)
        slope = (d1 - d0) / h
        assert slope == pytest.approx(stats.norm.pdf(eps_ / mu - mu / 2), rel=1e-3)
        assert slope <= 1 / math.sqrt(2 * math.pi)


def test_laplace_grid_scale_keeps_epsilon_exact():
    for eps, sens, dim in [(1.0, 2.0, 1), (0.37, 1.0, 5), (3.0, 10.0, 100)]:
        e = default_grid_exponent(sens / eps)
        t = laplace_grid_scale(eps, sens, dim, e)
        gamma = Fraction(2) ** e
        # l1 sensitivity of the rounded query is at most sens/gamma + dim grid units
        assert (Fraction(sens) / gamma + dim) / t == Fraction(eps)
        # ... at the price of a noise scale larger by the factor 1 + d gamma / sens <= 1 + d 2^-52 / eps
        assert t * gamma / (Fraction(sens) / Fraction(eps)) - 1 == dim * gamma / Fraction(sens)
        assert dim * gamma / Fraction(sens) <= dim * Fraction(2) ** -GRID_BITS / Fraction(eps)


def test_secure_laplace_release_is_rounding_plus_discrete_laplace():
    noise = SecureNoise(random.Random(8), bits=3)
    eps, sens = 0.8, 1.0
    e = default_grid_exponent(sens / eps, 3)
    out = noise.laplace_release(np.full(DRAWS, 0.3), eps, sens)
    z = out / 2.0**e
    assert np.all(z == np.rint(z))
    # dim = DRAWS here: the scale covers a rounding slack of one grid unit per coordinate
    scale = float(laplace_grid_scale(eps, sens, DRAWS, e))
    assert chi2_pvalue(np.rint(z).astype(np.int64) - _round_to_grid(0.3, e),
                       lambda k: dlaplace_pmf(k, scale)) > ALPHA


@pytest.mark.parametrize("mech", [Laplace(1.0, 2.0), DiscreteLaplace(1.0, 2), Gaussian(1.5, 1.0),
                                  DiscreteGaussian(1.5, 1.0)])
def test_augmentation_releases_default_to_the_secure_path(mech, monkeypatch):
    # a numpy generator is the simulation path, unchanged
    a = mech.release([3.0, 4.0], np.random.default_rng(0))
    np.testing.assert_array_equal(a, np.array([3.0, 4.0]) + mech._noise((2,), np.random.default_rng(0)))
    # no generator: SecureNoise from the OS; integer outputs for the discrete ones
    calls = []
    real = SecureNoise.__init__

    def spy(self, *args, **kwargs):
        calls.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(SecureNoise, "__init__", spy)
    x = np.array([mech.release([3.0, 4.0]) for _ in range(3000)])
    assert len(calls) == 3000
    assert abs(x.mean() - 3.5) < 5 * x.std() / math.sqrt(x.size)
    if mech.integer:
        assert np.all(x == np.rint(x))
        with pytest.raises(ValueError, match="integer"):
            mech.release([0.5], SecureNoise())
    if isinstance(mech, DiscreteGaussian):
        assert chi2_pvalue((x - [3.0, 4.0]).ravel().astype(np.int64), lambda k: dgauss_pmf(k, 2.25)) > ALPHA


# --- streams and runs ------------------------------------------------------

def test_unseeded_streams_are_secure_and_fresh():
    streams = chain_streams(None, 3)
    assert all(isinstance(s.noise, SecureNoise) for s in streams)
    assert all(isinstance(s.proposal, np.random.Generator) for s in streams)
    assert isinstance(SecureNoise()._source, random.SystemRandom)
    a = gaussian_release(chain_streams(None, 1)[0].noise, np.zeros(4), 1.0)
    b = gaussian_release(chain_streams(None, 1)[0].noise, np.zeros(4), 1.0)
    assert not np.array_equal(a, b)


def test_seeded_streams_are_numpy_and_bit_reproducible_as_before():
    for seed, entropy in ((7, 7), (np.random.SeedSequence(99), 99)):
        streams = chain_streams(seed, 2)
        root = np.random.SeedSequence(entropy)
        for stream, child in zip(streams, root.spawn(2)):
            prop, noise = child.spawn(2)
            ref = np.random.Generator(np.random.PCG64(noise))
            assert isinstance(stream.noise, np.random.Generator)
            x = gaussian_release(stream.noise, np.arange(3.0), 2.0)
            np.testing.assert_array_equal(x, np.arange(3.0) + 2.0 * ref.standard_normal(3))
            assert gaussian_release(stream.noise, 1.0, 0.5) == 1.0 + 0.5 * float(ref.standard_normal())
            np.testing.assert_array_equal(mb.draw_batch(stream.noise, 100, 5),
                                          np.sort(ref.choice(100, 5, replace=False)))


@pytest.mark.filterwarnings("ignore:bulk ESS", "ignore:the chains disagree")  # short runs, on purpose
def test_unseeded_runs_end_to_end():
    model = densities.NormalMean(np.random.default_rng(1).normal(1.0, 1.0, 200))
    kw = dict(epsilon=5.0, delta=1e-5, iterations=300, clip=3.0, step_size=0.15, chains=2,
              init=[1.0], progress=False)
    fit = stan_dp.penalty(model, **kw)
    again = stan_dp.penalty(model, **kw)
    assert fit.posterior.attrs["seeded"] in (False, 0)
    assert not np.array_equal(fit.posterior["mu"].values, again.posterior["mu"].values)
    mean, sd = model.posterior()
    assert abs(float(fit.posterior["mu"].mean()) - mean) < 5 * sd
    seeded = [stan_dp.penalty(model, seed=3, **kw).posterior["mu"].values for _ in range(2)]
    np.testing.assert_array_equal(*seeded)
    # a minibatch sampler: secure batches, discrete test noise on a fixed grid, V_corr
    big = densities.NormalMean(np.random.default_rng(2).normal(1.0, 1.0, 20_000))
    fit_b = stan_dp.barker(big, epsilon=2.0, delta=1e-5, batch_size=500, iterations=100, n0=200,
                           step_size=0.01, chains=1, init=[1.0], progress=False)
    assert fit_b.posterior.attrs["seeded"] in (False, 0)
    assert np.all(np.isfinite(fit_b.posterior["mu"].values))
    assert 0 < float(fit_b.sample_stats["is_accepted"].mean()) < 1
