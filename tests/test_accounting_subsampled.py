"""Subsampled Gaussian (without replacement, replace-one) through dp-accounting's RDP."""

from __future__ import annotations

import math
import time

import dp_accounting as dpa
import numpy as np
import pytest

from stan_dp.accounting import (
    RDP_ORDERS,
    calibrate_subsampled_gaussian_noise,
    gaussian_epsilon,
    subsampled_gaussian_epsilon,
    subsampled_gaussian_max_count,
    subsampled_gaussian_rdp,
)
from stan_dp.accounting.rdp import dp_accounting_sampled_wor_rdp


def _conversion_by_hand(orders, rdp, delta):
    # Canonne-Kamath-Steinke (2020) Prop. 12, the conversion dp-accounting uses:
    # eps = min_a  rdp(a) + log(1 - 1/a) - (log delta + log a) / (a - 1)
    return min(r + math.log(1 - 1 / a) - (math.log(delta) + math.log(a)) / (a - 1) for a, r in zip(orders, rdp))


def test_b_equals_n_is_plain_gaussian_rdp():
    # Pins dp-accounting's REPLACE_ONE convention for sampling without
    # replacement: at b = n the noise multiplier is read relative to the full
    # (replace-one) sensitivity, i.e. RDP alpha / (2 z^2), exactly ours.
    z, n = 1.7, 500
    raw = dp_accounting_sampled_wor_rdp(z, n, n)
    expected = np.array(RDP_ORDERS) / (2 * z * z)
    np.testing.assert_allclose(raw, expected, rtol=1e-12)
    count, delta = 25, 1e-5
    eps = subsampled_gaussian_epsilon(z, count, delta, batch_size=n, n=n)
    assert eps == pytest.approx(_conversion_by_hand(RDP_ORDERS, count * expected, delta), rel=1e-12)
    # and RDP is (correctly) looser than the exact PLD value for the same releases
    assert eps >= gaussian_epsilon(z, count, delta)


def test_order_two_equals_seed_formula_and_higher_orders_are_below_it():
    # seed 003, Thm 9 (WBK19 Thm 9) with eps'(a) = a / (2 z^2):
    # eps(2) = ln(1 + q^2 * min(4 (e^{eps'(2)} - 1), 2 e^{eps'(2)}))
    z, b, n = 2.0, 50, 1000
    q = b / n
    e2 = 2 / (2 * z * z)
    by_hand_2 = math.log(1 + q * q * min(4 * (math.exp(e2) - 1), 2 * math.exp(e2)))
    r2 = subsampled_gaussian_rdp(z, 1, batch_size=b, n=n, orders=[2])[0]
    assert r2 == pytest.approx(by_hand_2, rel=1e-12)
    # alpha = 3: (1/2) ln(1 + 3 q^2 min(...) + 2 q^3 e^{2 eps'(3)}), an upper bound
    e3 = 3 / (2 * z * z)
    by_hand_3 = 0.5 * math.log(
        1 + 3 * q * q * min(4 * (math.exp(e2) - 1), 2 * math.exp(e2)) + 2 * q**3 * math.exp(2 * e3)
    )
    r3 = subsampled_gaussian_rdp(z, 1, batch_size=b, n=n, orders=[3])[0]
    assert r3 <= by_hand_3 * (1 + 1e-12)
    assert r3 > 0.5 * by_hand_3


def test_amplification_helps_and_is_monotone():
    z, count, delta, n = 2.0, 1000, 1e-5, 10_000
    eps_b = [subsampled_gaussian_epsilon(z, count, delta, batch_size=b, n=n) for b in (10, 100, 1000, n)]
    assert all(a < c for a, c in zip(eps_b, eps_b[1:]))
    eps_z = [subsampled_gaussian_epsilon(s, count, delta, batch_size=100, n=n) for s in (1.0, 2.0, 4.0)]
    assert all(a > c for a, c in zip(eps_z, eps_z[1:]))
    eps_k = [subsampled_gaussian_epsilon(z, k, delta, batch_size=100, n=n) for k in (10, 100, 1000)]
    assert all(a < c for a, c in zip(eps_k, eps_k[1:]))


def test_cap_by_unamplified_gaussian_near_full_batch():
    # the WBK bound alone is loose near b = n; the cap keeps b = n-1 no worse than b = n
    z, n = 1.0, 200
    near = subsampled_gaussian_rdp(z, 1, batch_size=n - 1, n=n)
    assert np.all(near <= np.array(RDP_ORDERS) / (2 * z * z) + 1e-15)


def test_matches_rdp_accountant_composition():
    z, b, n, count, delta = 1.3, 64, 6400, 5000, 1e-6
    acc = dpa.rdp.RdpAccountant(orders=list(RDP_ORDERS), neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SampledWithoutReplacementDpEvent(n, b, dpa.GaussianDpEvent(z)), count)
    ours = subsampled_gaussian_epsilon(z, count, delta, batch_size=b, n=n)
    assert ours <= acc.get_epsilon(delta) * (1 + 1e-12)
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=1e-9)  # the cap is inactive here


def test_max_count_and_calibration_are_inverse():
    z, eps, delta, b, n = 1.5, 1.0, 1e-5, 100, 20_000
    k = subsampled_gaussian_max_count(z, eps, delta, batch_size=b, n=n)
    assert k > 1
    assert subsampled_gaussian_epsilon(z, k, delta, batch_size=b, n=n) <= eps
    assert subsampled_gaussian_epsilon(z, k + 1, delta, batch_size=b, n=n) > eps
    s = calibrate_subsampled_gaussian_noise(k, eps, delta, batch_size=b, n=n)
    assert s <= z
    assert subsampled_gaussian_epsilon(s, k, delta, batch_size=b, n=n) <= eps
    assert subsampled_gaussian_epsilon(s * (1 - 1e-5), k, delta, batch_size=b, n=n) > eps


def test_million_releases_fast():
    t0 = time.perf_counter()
    e = subsampled_gaussian_epsilon(1.1, 10**6, 1e-5, batch_size=100, n=100_000)
    k = subsampled_gaussian_max_count(1.1, 5.0, 1e-5, batch_size=100, n=100_000)
    s = calibrate_subsampled_gaussian_noise(10**6, 1.0, 1e-5, batch_size=100, n=100_000)
    assert time.perf_counter() - t0 < 1.0
    assert e > 0 and k > 0 and s > 0


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(batch_size=0, n=10), "batch_size"),
        (dict(batch_size=11, n=10), "batch_size"),
        (dict(batch_size=5, n=0), "n"),
        (dict(batch_size=2.5, n=10), "batch_size"),
        (dict(batch_size=5, n=10, relation="add_remove"), "replace-one"),
        (dict(batch_size=5, n=10, relation="swap"), "relation"),
    ],
)
def test_invalid_batch_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        subsampled_gaussian_epsilon(1.0, 10, 1e-5, **kwargs)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: subsampled_gaussian_epsilon(-1.0, 10, 1e-5, batch_size=5, n=10), "noise_multiplier"),
        (lambda: subsampled_gaussian_epsilon(1.0, -10, 1e-5, batch_size=5, n=10), "count"),
        (lambda: subsampled_gaussian_epsilon(1.0, 10, 0.0, batch_size=5, n=10), "delta"),
        (lambda: subsampled_gaussian_max_count(1.0, 0.0, 1e-5, batch_size=5, n=10), "epsilon"),
        (lambda: subsampled_gaussian_max_count(1.0, 1.0, float("nan"), batch_size=5, n=10), "delta"),
        (lambda: calibrate_subsampled_gaussian_noise(0, 1.0, 1e-5, batch_size=5, n=10), "count"),
        (lambda: calibrate_subsampled_gaussian_noise(5, -1.0, 1e-5, batch_size=5, n=10), "epsilon"),
    ],
)
def test_invalid_inputs(call, name):
    with pytest.raises(ValueError, match=name):
        call()
