"""Exact Gaussian composition: closed form vs dp-accounting, inverses, speed."""

from __future__ import annotations

import math
import random

import dp_accounting as dpa
import mpmath
import pytest

from stan_dp.accounting import (
    Budget,
    Release,
    calibrate_gaussian_noise,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_max_count,
    gaussian_pld_mean,
    max_gaussian_pld_mean,
)


def _pld_epsilon(pairs, delta, relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, interval=1e-4):
    acc = dpa.pld.PLDAccountant(relation, value_discretization_interval=interval)
    for z, c in pairs:
        acc.compose(dpa.GaussianDpEvent(z), c)
    return acc.get_epsilon(delta)


def _delta_mp(eps, mu, dps=50):
    """seed 003, Theorem 4(3) at ``dps`` digits: Phi(a) - e^eps Phi(b)."""
    with mpmath.workdps(dps):
        e, m = mpmath.mpf(eps), mpmath.mpf(mu)
        s = mpmath.sqrt(2 * m)
        return mpmath.ncdf((m - e) / s) - mpmath.exp(e) * mpmath.ncdf((-m - e) / s)


def _delta_by_hand(eps, mu):
    # seed 003, Theorem 4(3), with n*mu replaced by the total PLD mean M = mu
    s = 2.0 * math.sqrt(mu)
    return 0.5 * (math.erfc((eps - mu) / s) - math.exp(eps) * math.erfc((eps + mu) / s))


@pytest.mark.parametrize(
    "z,count,delta",
    [(1.0, 1, 1e-5), (10.0, 100, 1e-5), (50.0, 1000, 1e-6), (3.0, 7, 1e-3)],
)
def test_closed_form_matches_dp_accounting_pld(z, count, delta):
    exact = gaussian_epsilon(z, count, delta)
    pld = _pld_epsilon([(z, count)], delta)
    # PLD discretisation is pessimistic: never below the exact value.
    assert exact <= pld * (1 + 1e-12)
    assert abs(pld - exact) / exact < 1e-4


def test_heterogeneous_mix_matches_dp_accounting_pld():
    zs, cs = [10.0, 3.0, 25.0], [30, 7, 400]
    exact = gaussian_epsilon(zs, cs, 1e-5)
    pld = _pld_epsilon(list(zip(zs, cs)), 1e-5)
    assert abs(pld - exact) / exact < 1e-4


def test_replace_one_convention_of_pld_accountant():
    # dp-accounting's PLD under REPLACE_ONE assumes sensitivity 2 (in units of its
    # noise multiplier); our multiplier z is relative to the true sensitivity,
    # so its noise multiplier 2 z is ours z.
    z = 1.5
    exact = gaussian_epsilon(z, 3, 1e-5)
    pld = _pld_epsilon([(2 * z, 3)], 1e-5, relation=dpa.NeighboringRelation.REPLACE_ONE)
    assert abs(pld - exact) / exact < 1e-4


def test_matches_analytic_gaussian_of_dp_accounting():
    # k releases at z are one release at z / sqrt(k) (PLD means add up).
    for z, k in [(1.0, 1), (20.0, 400), (5.0, 3)]:
        ref = dpa.get_epsilon_gaussian(z / math.sqrt(k), 1e-6)
        assert gaussian_epsilon(z, k, 1e-6) == pytest.approx(ref, rel=1e-9)


def test_epsilon_solves_the_erfc_formula_by_hand():
    z, k, delta = 7.0, 40, 1e-5
    mu = k / (2 * z * z)
    eps = gaussian_epsilon(z, k, delta)
    assert _delta_mp(eps, mu) <= delta
    assert _delta_by_hand(eps, mu) == pytest.approx(delta, rel=1e-9)
    assert _delta_by_hand(eps * (1 - 1e-7), mu) > delta
    assert gaussian_delta(z, k, eps) == pytest.approx(_delta_by_hand(eps, mu), rel=1e-10)


def test_pld_mean_and_heterogeneous_reduction():
    assert gaussian_pld_mean([2.0, 4.0], [3, 5]) == pytest.approx(3 / 8 + 5 / 32)
    # a mix equals a single mechanism with the same total M
    z_eff = 1.0 / math.sqrt(3 / 4 + 5 / 16)
    assert gaussian_epsilon([2.0, 4.0], [3, 5], 1e-5) == pytest.approx(
        gaussian_epsilon(z_eff, 1, 1e-5), rel=1e-12
    )
    # scalar broadcasting
    assert gaussian_epsilon(2.0, [3, 5], 1e-5) == pytest.approx(gaussian_epsilon(2.0, 8, 1e-5))


def test_zero_releases_cost_nothing():
    assert gaussian_epsilon(1.0, 0, 1e-5) == 0.0
    assert gaussian_epsilon([1.0, 2.0], [0, 0], 1e-5) == 0.0


def test_monotonicity():
    eps_by_noise = [gaussian_epsilon(z, 100, 1e-5) for z in (5.0, 10.0, 20.0, 40.0)]
    assert all(a > b for a, b in zip(eps_by_noise, eps_by_noise[1:]))
    eps_by_count = [gaussian_epsilon(10.0, k, 1e-5) for k in (1, 10, 100, 1000)]
    assert all(a < b for a, b in zip(eps_by_count, eps_by_count[1:]))
    eps_by_delta = [gaussian_epsilon(10.0, 100, d) for d in (1e-8, 1e-6, 1e-4)]
    assert all(a > b for a, b in zip(eps_by_delta, eps_by_delta[1:]))


@pytest.mark.parametrize("z,eps,delta", [(10.0, 1.0, 1e-5), (100.0, 0.5, 1e-6), (3.0, 5.0, 1e-5), (1000.0, 2.0, 1e-9)])
def test_max_count_is_exact_inverse(z, eps, delta):
    k = gaussian_max_count(z, eps, delta)
    assert k >= 1
    assert gaussian_epsilon(z, k, delta) <= eps
    assert gaussian_epsilon(z, k + 1, delta) > eps
    # M* is the budget in PLD-mean units
    assert k / (2 * z * z) <= max_gaussian_pld_mean(eps, delta) < (k + 1) / (2 * z * z)


def test_max_count_zero_when_nothing_fits():
    assert gaussian_max_count(0.1, 0.5, 1e-5) == 0


@pytest.mark.parametrize("count,eps,delta", [(1, 1.0, 1e-5), (1000, 1.0, 1e-5), (10**6, 2.0, 1e-6), (37, 0.1, 1e-3)])
def test_calibration_is_exact_inverse(count, eps, delta):
    z = calibrate_gaussian_noise(count, eps, delta)
    assert gaussian_epsilon(z, count, delta) <= eps
    assert gaussian_epsilon(z * (1 - 1e-9), count, delta) > eps
    assert gaussian_max_count(z, eps, delta) == count


def test_single_release_calibration_matches_dp_accounting():
    z = calibrate_gaussian_noise(1, 1.0, 1e-5)
    assert z == pytest.approx(dpa.get_sigma_gaussian(1.0, 1e-5), rel=1e-6)


def test_million_releases():
    # (speed is measured in benchmarks/accounting.py, not asserted here)
    e = gaussian_epsilon([30.0, 50.0], [10**6, 10**7], 1e-5)
    k = gaussian_max_count(5000.0, 1.0, 1e-5)
    z = calibrate_gaussian_noise(10**6, 1.0, 1e-5)
    assert e > 0 and k > 10**6 and z > 0
    assert gaussian_epsilon(5000.0, k, 1e-5) <= 1.0 < gaussian_epsilon(5000.0, k + 1, 1e-5)


def test_max_count_is_exact_inverse_randomised():
    # D3: the documented contract, largest k with gaussian_epsilon(z, k, delta) <= eps,
    # checked at budgets placed exactly at (and just below) gaussian_epsilon(z, K, delta).
    rng = random.Random(1)
    for _ in range(250):
        z, delta, big_k = 10 ** rng.uniform(0, 3), 10 ** rng.uniform(-10, -3), rng.randint(1, 10**6)
        e0 = gaussian_epsilon(z, big_k, delta)
        for eps in (e0, math.nextafter(e0, 0.0), math.nextafter(math.nextafter(e0, 0.0), 0.0)):
            k = gaussian_max_count(z, eps, delta)
            assert gaussian_epsilon(z, k, delta) <= eps
            assert gaussian_epsilon(z, k + 1, delta) > eps
            if eps == e0:
                assert k >= big_k


_EXTREME = [(z, d) for z in (1e2, 1e4, 1e5, 1e6, 1e7) for d in (1e-3, 1e-9, 1e-12, 1e-15)]


@pytest.mark.parametrize("z,delta", _EXTREME)
def test_epsilon_never_optimistic_at_extremes(z, delta):
    # D4: large z / tiny M, where Phi(a)(1 - e^x) cancels.  50-digit reference.
    mu = 1 / (2 * z * z)
    eps = gaussian_epsilon(z, 1, delta)
    assert _delta_mp(eps, mu) <= delta
    if eps > 0:
        # and tight: a slightly smaller epsilon violates delta
        assert _delta_mp(eps * (1 - 1e-12), mu) > delta
    else:
        assert _delta_mp(0.0, mu) <= delta
    # the delta the module reports is never below the exact value
    e = eps if eps > 0 else 1e-3 / z
    assert gaussian_delta(z, 1, e) >= _delta_mp(e, mu)


@pytest.mark.parametrize(
    "count,eps,delta",
    [(1, 0.01, 1e-12), (1, 0.001, 1e-9), (1, 1e-4, 1e-12), (10, 0.01, 1e-10), (1, 1e-5, 1e-15)],
)
def test_calibration_never_optimistic_at_extremes(count, eps, delta):
    z = calibrate_gaussian_noise(count, eps, delta)
    assert _delta_mp(eps, count / (2 * z * z)) <= delta
    assert _delta_mp(eps, count / (2 * (z * (1 - 1e-9)) ** 2)) > delta
    m = max_gaussian_pld_mean(eps, delta)
    assert _delta_mp(eps, m) <= delta
    assert _delta_mp(eps, m * (1 + 1e-9)) > delta
    # the Budget wrapper agrees
    assert Budget(eps, delta).calibrate([Release(1.0)], count) == z


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: gaussian_epsilon(-1.0, 1, 1e-5), "noise_multiplier"),
        (lambda: gaussian_epsilon(0.0, 1, 1e-5), "noise_multiplier"),
        (lambda: gaussian_epsilon(float("nan"), 1, 1e-5), "noise_multiplier"),
        (lambda: gaussian_epsilon(1.0, -1, 1e-5), "count"),
        (lambda: gaussian_epsilon(1.0, 1.5, 1e-5), "count"),
        (lambda: gaussian_epsilon(1.0, float("nan"), 1e-5), "count"),
        (lambda: gaussian_epsilon(1.0, 1, 0.0), "delta"),
        (lambda: gaussian_epsilon(1.0, 1, 1.0), "delta"),
        (lambda: gaussian_epsilon(1.0, 1, float("nan")), "delta"),
        (lambda: gaussian_epsilon([1.0, 2.0], [1, 2, 3], 1e-5), "same length"),
        (lambda: gaussian_max_count(1.0, 0.0, 1e-5), "epsilon"),
        (lambda: gaussian_max_count(1.0, -1.0, 1e-5), "epsilon"),
        (lambda: gaussian_max_count(1.0, float("nan"), 1e-5), "epsilon"),
        (lambda: gaussian_max_count(1.0, float("inf"), 1e-5), "epsilon"),
        (lambda: gaussian_max_count(-2.0, 1.0, 1e-5), "noise_multiplier"),
        (lambda: gaussian_max_count(1.0, 1.0, 2.0), "delta"),
        (lambda: calibrate_gaussian_noise(0, 1.0, 1e-5), "count"),
        (lambda: calibrate_gaussian_noise(-3, 1.0, 1e-5), "count"),
        (lambda: calibrate_gaussian_noise(10, 1.0, -1e-5), "delta"),
        (lambda: calibrate_gaussian_noise(10, float("nan"), 1e-5), "epsilon"),
    ],
)
def test_invalid_inputs(call, name):
    with pytest.raises(ValueError, match=name):
        call()
