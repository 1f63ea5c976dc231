"""Subsampled Gaussian (without replacement, replace-one) through dp-accounting's RDP."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from scipy import special

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


# --------------------------------------------------------------------------
# exact Rényi divergences of a worst-case 1-D pair, by quadrature
# --------------------------------------------------------------------------
def _log_mix(x, comps, sd):
    w = np.array([[c[0]] for c in comps])
    m = np.stack([-0.5 * ((x - c[1]) / sd) ** 2 for c in comps])
    return special.logsumexp(m, axis=0, b=w) - math.log(sd * math.sqrt(2 * math.pi))


def _renyi(p, q, sd, alpha, reach):
    # D_alpha(P || Q) = log(int p^alpha q^(1-alpha)) / (alpha - 1); the integrand is
    # Gaussian-like and lives within +-reach, so the trapezoid rule with a step of
    # sd/50 converges spectrally.
    x = np.arange(-reach, reach, sd / 50.0)
    log_f = alpha * _log_mix(x, p, sd) + (1 - alpha) * _log_mix(x, q, sd)
    return (special.logsumexp(log_f) + math.log(sd / 50.0)) / (alpha - 1)


def _exact_worst_pair_rdp(z, q, alpha, c=1.0):
    """max of both directions for P = N(C, s^2), Q = (1-q) N(C, s^2) + q N(-C, s^2).

    This pair is realised by a sum of per-row values clipped to [-C, C] under
    replace-one neighbours (sensitivity 2C, noise sd s = z * 2C) with a batch of
    b = q n rows drawn without replacement: the replaced row is in the batch
    with probability q and moves the sum from C to -C.  Every valid bound for
    the subsampled Gaussian must be at least this divergence.
    """
    sd = 2 * c * z
    p_, q_ = [(1.0, c)], [(1 - q, c), (q, -c)]
    reach = 2 * alpha * c + 40 * sd
    return max(_renyi(p_, q_, sd, alpha, reach), _renyi(q_, p_, sd, alpha, reach))


_ORDERS_CHECKED = [2, 4, 8, 16, 32]
_PAIRS = [(z, b, n) for z in (0.5, 1.0, 2.0) for b, n in ((1, 10), (5, 100), (199, 200))]


@pytest.mark.parametrize("z,b,n", _PAIRS)
def test_rdp_including_cap_is_at_least_the_exact_divergence(z, b, n):
    # q < 1 throughout: pins dp-accounting's convention away from its q == 1
    # special case, and checks the alpha/(2z^2) cap where it is active (b = n - 1).
    module = subsampled_gaussian_rdp(z, 1, batch_size=b, n=n, orders=_ORDERS_CHECKED)
    for alpha, value in zip(_ORDERS_CHECKED, module):
        exact = _exact_worst_pair_rdp(z, b / n, alpha)
        assert exact > 0
        assert value >= exact * (1 - 1e-9), (z, b, n, alpha, value, exact)


def test_cap_is_active_near_full_batch_and_still_valid():
    z, n = 1.0, 200
    raw = dp_accounting_sampled_wor_rdp(z, n - 1, n, _ORDERS_CHECKED)
    plain = np.array(_ORDERS_CHECKED) / (2 * z * z)
    capped = subsampled_gaussian_rdp(z, 1, batch_size=n - 1, n=n, orders=_ORDERS_CHECKED)
    active = raw > plain
    assert active.any()  # the cap matters here ...
    np.testing.assert_array_equal(capped[active], plain[active])
    for alpha, value in zip(_ORDERS_CHECKED, capped):  # ... and is still an upper bound
        assert value >= _exact_worst_pair_rdp(z, (n - 1) / n, alpha) * (1 - 1e-9)


def test_a_wrong_noise_convention_would_be_detected():
    # Reading the multiplier relative to the clip bound C instead of the
    # replace-one sensitivity 2C (i.e. passing 2z to dp-accounting) claims less
    # privacy loss than the exact divergence of the worst pair: the test above
    # would catch that convention.
    violations = 0
    for z, b, n in [(1.0, 5, 100), (2.0, 1, 10)]:
        for alpha in (2, 8, 32):
            wrong = dp_accounting_sampled_wor_rdp(2 * z, b, n, [alpha])[0]
            if wrong < _exact_worst_pair_rdp(z, b / n, alpha) * (1 - 1e-6):
                violations += 1
    assert violations > 0


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


def test_million_releases():
    # (speed is measured in benchmarks/accounting.py, not asserted here)
    e = subsampled_gaussian_epsilon(1.1, 10**6, 1e-5, batch_size=100, n=100_000)
    k = subsampled_gaussian_max_count(1.1, 5.0, 1e-5, batch_size=100, n=100_000)
    s = calibrate_subsampled_gaussian_noise(10**6, 1.0, 1e-5, batch_size=100, n=100_000)
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
