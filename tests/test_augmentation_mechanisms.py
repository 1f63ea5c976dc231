"""Unit tests of the data-augmentation building blocks that need no Stan model:
noise densities, releases, clamping, the record-additivity check and the
plain-Python record sweep (Ju, Awan, Gong, Rao 2022, Algorithm 1, step 2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from stan_dp.augmentation import (
    Clamp,
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    new_privacy,
)
from stan_dp.samplers.augmentation import sweep_records_reference


def test_log_density_ratios_match_scipy():
    rng = np.random.default_rng(0)
    s_dp, s1, s2 = rng.normal(size=(3, 4)) * 3
    lap = Laplace(epsilon=0.5, sensitivity=2.0)
    assert lap.scale == 4.0 and lap.epsilon == 0.5
    want = stats.laplace.logpdf(s_dp - s1, scale=4).sum() - stats.laplace.logpdf(s_dp - s2, scale=4).sum()
    assert lap.log_density(s_dp, s1) - lap.log_density(s_dp, s2) == pytest.approx(want, rel=1e-12)
    gau = Gaussian(sd=1.7)
    want = stats.norm.logpdf(s_dp - s1, scale=1.7).sum() - stats.norm.logpdf(s_dp - s2, scale=1.7).sum()
    assert gau.log_density(s_dp, s1) - gau.log_density(s_dp, s2) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("mech, pmf", [
    (DiscreteLaplace(epsilon=0.7, sensitivity=1),
     lambda z: np.exp(-0.7 * np.abs(z)) * math.tanh(0.35)),
    (DiscreteGaussian(sd=1.3),
     lambda z: np.exp(-z ** 2 / (2 * 1.3 ** 2)) / np.sum(np.exp(-np.arange(-60, 61) ** 2 / (2 * 1.3 ** 2)))),
])
def test_discrete_releases_follow_their_pmf(mech, pmf):
    # 200,000 draws: each cell frequency has sd <= sqrt(p/200000) <= 0.0012;
    # 5 sd tolerance per cell.
    rng = np.random.default_rng(1)
    z = mech.release(np.zeros(200_000), rng)
    assert np.all(z == np.round(z))
    for v in range(-4, 5):
        p = float(pmf(np.array(v)))
        assert abs(np.mean(z == v) - p) < 5 * math.sqrt(p * (1 - p) / z.size)


@pytest.mark.parametrize("make", [
    lambda e: Laplace(epsilon=e, sensitivity=1.0),
    lambda e: DiscreteLaplace(epsilon=e, sensitivity=1),
])
@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf")])
def test_nonpositive_epsilon_is_refused(make, eps):
    with pytest.raises(ValueError, match="epsilon"):
        make(eps)


def test_other_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="sd"):
        Gaussian(sd=0)
    with pytest.raises(ValueError, match="integer"):
        DiscreteLaplace(epsilon=1.0, sensitivity=1.5)
    with pytest.raises(ValueError, match="lo < hi"):
        Clamp({"y": (1.0, -1.0)})
    with pytest.raises(ValueError, match="mechanism"):
        new_privacy(lambda r: r["y"], mechanism="laplace")


def test_clamp_truncates_and_rescales_to_unit_interval():
    clamp = Clamp({"x": ([0.0, -2.0], [4.0, 2.0]), "y": (-3.0, 1.0)})
    out = clamp({"x": np.array([[0.0, 3.0], [2.0, -1.0], [9.0, -9.0]]),
                 "y": np.array([-3.0, -1.0, 5.0]), "z": np.array([7, 8, 9])})
    np.testing.assert_allclose(out["x"], [[-1.0, 1.0], [0.0, -0.5], [1.0, -1.0]])
    np.testing.assert_allclose(out["y"], [-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(out["z"], [7, 8, 9])


def test_additivity_check_accepts_record_wise_and_refuses_aggregates():
    rng = np.random.default_rng(2)
    records = {"y": rng.normal(size=40)}
    ok = new_privacy(lambda r: np.stack([r["y"], r["y"] ** 2], axis=1), Gaussian(sd=1.0))
    assert ok.check_statistic(records, rng) == 2
    centred = new_privacy(lambda r: (r["y"] - r["y"].mean())[:, None], Gaussian(sd=1.0))
    with pytest.raises(ValueError, match="not record-additive"):
        centred.check_statistic(records, rng)
    ranks = new_privacy(lambda r: np.argsort(np.argsort(r["y"]))[:, None], Gaussian(sd=1.0))
    with pytest.raises(ValueError, match="not record-additive"):
        ranks.check_statistic(records, rng)
    non_integer = new_privacy(lambda r: r["y"][:, None], DiscreteLaplace(epsilon=1.0, sensitivity=1))
    with pytest.raises(ValueError, match="integer"):
        non_integer.check_statistic(records, rng)
    too_sensitive = new_privacy(lambda r: r["y"][:, None], Laplace(epsilon=1.0, sensitivity=0.01))
    with pytest.warns(UserWarning, match="sensitivity"):
        too_sensitive.check_statistic(records, rng)


@pytest.mark.parametrize("mech", [Laplace(epsilon=1.0, sensitivity=2.0), Gaussian(sd=1.5)])
def test_reference_sweep_decides_with_the_exact_density_ratio(mech):
    # Oracle: the acceptance test written with the mechanism's own log density
    # on explicitly recomputed sums.
    rng = np.random.default_rng(3)
    n, k = 300, 3
    old = rng.uniform(-1, 1, size=(n, k))
    new = rng.uniform(-1, 1, size=(n, k))
    s_dp = old.sum(axis=0) + rng.normal(size=k) * 2
    log_u = np.log(rng.random(n))
    w = np.full(k, mech.weight)
    accepted, s_inc, min_lr = sweep_records_reference(mech.kind, w, s_dp, new - old, log_u, old.sum(axis=0))
    current = old.copy()
    lrs = []
    for i in range(n):
        prop = current.copy()
        prop[i] = new[i]
        lr = float(mech.log_density(s_dp, prop.sum(axis=0)) - mech.log_density(s_dp, current.sum(axis=0)))
        lrs.append(lr)
        assert accepted[i] == (log_u[i] < lr)
        if accepted[i]:
            current = prop
    np.testing.assert_allclose(s_inc, current.sum(axis=0), rtol=0, atol=1e-10)
    assert min_lr == pytest.approx(min(0.0, min(lrs)), abs=1e-10)
    assert 0 < accepted.sum() < n
