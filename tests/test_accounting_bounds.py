"""The seeds' bounds, each checked against numbers computed by hand from its formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stan_dp.accounting import gaussian_delta, gaussian_max_count, subsampled_gaussian_rdp
from stan_dp.accounting.bounds import (
    advanced_composition_epsilon,
    advanced_composition_gaussian_epsilon,
    advanced_composition_gaussian_max_count,
    barker_base_rdp_epsilon,
    barker_clip_bound,
    barker_epsilon,
    barker_rdp_epsilon,
    dwork_roth_gaussian_epsilon,
    raisa_theorem7_delta,
    raisa_theorem7_max_iterations,
    subsampled_penalty_rdp_epsilon,
    subsampled_penalty_sensitivity,
    subsampled_penalty_sensitivity_terms,
    wbk_rdp_bound,
    yildirim_theorem1,
    zcdp_epsilon,
    zcdp_hmc_max_iterations,
    zcdp_max_count,
    zcdp_penalty_max_iterations,
    zcdp_rho,
)

# ---------------------------------------------------------------- seed 000


def test_dwork_roth_gaussian_mechanism():
    # sqrt(2 ln(1.25 / 1e-5)) / 10 = sqrt(2 * 11.7360690) / 10
    assert dwork_roth_gaussian_epsilon(10.0, 1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 10, rel=1e-14)
    assert dwork_roth_gaussian_epsilon(10.0, 1e-5) == pytest.approx(0.48448053, rel=1e-7)
    with pytest.raises(ValueError, match="epsilon < 1"):
        dwork_roth_gaussian_epsilon(2.0, 1e-5)


def test_advanced_composition_theorem3():
    eps, dlt = advanced_composition_epsilon(0.1, 1e-6, 100, 1e-5)
    by_hand = math.sqrt(2 * 100 * math.log(1e5)) * 0.1 + 100 * 0.1 * (math.exp(0.1) - 1)
    assert eps == pytest.approx(by_hand, rel=1e-14)
    assert eps == pytest.approx(5.8502351, rel=1e-7)
    assert dlt == pytest.approx(100 * 1e-6 + 1e-5)


def test_yildirim_theorem1_by_hand():
    n, c, sigma, alpha, beta, k0 = 10_000, 1.0, 1.0, 0.5, 1.5, 0.01
    r = yildirim_theorem1(n, c, sigma, alpha, beta, k0)
    logn = math.log(n)  # 9.2103404
    beta_p = 2 * alpha + beta  # 2.5
    assert r.k == math.floor(0.01 * 10_000 / logn) == 10
    # proof of Thm 1: sqrt(4 k b' log n log(1/d')) c/s n^-a + 2 k c^2/s^2 n^-2a 2 b' log n
    eps = math.sqrt(4 * 10 * beta_p * logn * (beta * logn)) * 0.01 + 2 * 10 * 1e-4 * 2 * beta_p * logn
    assert r.epsilon == pytest.approx(eps, rel=1e-13)
    assert r.epsilon == pytest.approx(1.2201351, rel=1e-7)
    assert r.delta == pytest.approx(1.25 * 10 * n**-2.5 + n**-1.5, rel=1e-13)
    # eq. (3) and (4) as printed
    assert r.epsilon_as_printed == pytest.approx(2 * math.sqrt(0.01 * 2.5 * 1.5) + 4 * 0.01 * 2.5, rel=1e-13)
    assert r.delta_as_printed == pytest.approx(1.25 * 0.01 * n**-1.5 / logn + n**-1.5, rel=1e-13)
    # the printed eq. (3) drops sqrt(log n) from the first term: it is smaller
    assert r.epsilon_as_printed < r.epsilon
    # Theorem 2 precondition (5): per-iteration epsilon < 1
    with pytest.raises(ValueError, match="condition"):
        yildirim_theorem1(n, c, 0.01, alpha, beta, k0)


def test_advanced_composition_gaussian_count_is_consistent():
    z, eps, delta = 100.0, 1.0, 1e-5
    k = advanced_composition_gaussian_max_count(z, eps, delta)
    assert k >= 1
    assert advanced_composition_gaussian_epsilon(z, k, delta) <= eps
    assert advanced_composition_gaussian_epsilon(z, k + 1, delta) > eps
    # one split by hand: delta' = delta / 2, delta_0 = delta / (2k)
    e0 = math.sqrt(2 * math.log(1.25 / (delta / (2 * k)))) / z
    one_split = math.sqrt(2 * k * math.log(2 / delta)) * e0 + k * e0 * math.expm1(e0)
    assert advanced_composition_gaussian_epsilon(z, k, delta) <= one_split
    # never more than the exact accounting allows
    assert k <= zcdp_max_count(z, eps, delta) <= gaussian_max_count(z, eps, delta)
    assert advanced_composition_gaussian_max_count(1.0, 1.0, 1e-5) == 0


# ---------------------------------------------------------------- seed 003


def test_zcdp_rule_theorem6_by_hand():
    big_l = math.log(1e5)
    rho = (math.sqrt(1 + big_l) - math.sqrt(big_l)) ** 2
    assert zcdp_rho(1.0, 1e-5) == pytest.approx(rho, rel=1e-14)
    assert zcdp_rho(1.0, 1e-5) == pytest.approx(0.02081992, rel=1e-6)
    # Thm 1 conversion inverts it
    assert zcdp_epsilon(rho, 1e-5) == pytest.approx(1.0, rel=1e-12)
    # Thm 6: k = floor(2 tau^2 n^(2 alpha) rho) = floor(2 * 0.25 * 10000 * 0.0208199) = 104
    assert zcdp_penalty_max_iterations(1.0, 1e-5, 0.5, 10_000, 0.5) == 104
    assert zcdp_max_count(50.0, 1.0, 1e-5) == math.floor(2 * 2500 * rho) == 104


def test_zcdp_hmc_rule_by_hand():
    # rho_g = rho_l = 1 / (2 * 1 * 1000); k = floor((rho - rho_g) / (rho_l + 10 rho_g))
    rho = zcdp_rho(1.0, 1e-5)
    k = math.floor((rho - 5e-4) / (5e-4 + 10 * 5e-4))
    assert k == 3
    assert zcdp_hmc_max_iterations(1.0, 1e-5, 1.0, 1.0, 1000, 10) == k


def test_theorem7_delta_by_hand_and_tight_iterations():
    eps, k, tau, n, alpha = 1.0, 64, 3.0, 100, 0.5  # z = tau n^alpha = 30
    mu = 1 / (2 * tau**2 * n ** (2 * alpha))
    by_hand = 0.5 * (
        math.erfc((eps - k * mu) / (2 * math.sqrt(k * mu)))
        - math.exp(eps) * math.erfc((eps + k * mu) / (2 * math.sqrt(k * mu)))
    )
    assert raisa_theorem7_delta(eps, k, tau, n, alpha) == pytest.approx(by_hand, rel=1e-10)
    assert raisa_theorem7_delta(eps, k, tau, n, alpha) == pytest.approx(gaussian_delta(30.0, k, eps), rel=1e-12)
    kmax = raisa_theorem7_max_iterations(1.0, 1e-5, tau, n, alpha)
    assert raisa_theorem7_delta(1.0, kmax, tau, n, alpha) <= 1e-5 < raisa_theorem7_delta(1.0, kmax + 1, tau, n, alpha)
    assert kmax == gaussian_max_count(30.0, 1.0, 1e-5)
    # tight accounting allows more than the zCDP rule for the same noise
    assert kmax > zcdp_penalty_max_iterations(1.0, 1e-5, tau, n, alpha)


def test_barker_theorem8_by_hand():
    b, n = 1000, 100_000
    q = b / n

    def base(a):
        return 5 / (2 * b) + math.log(2 * b / (b - 5 * a)) / (2 * (a - 1)) + 2 * a / (b - 5 * a)

    assert barker_base_rdp_epsilon(5, b) == pytest.approx(0.0025 + math.log(2000 / 975) / 8 + 10 / 975, rel=1e-14)
    m2 = min(4 * (math.exp(base(2)) - 1), 2 * math.exp(base(2)))
    assert barker_rdp_epsilon(2, b, n) == pytest.approx(math.log(1 + q * q * m2), rel=1e-12)
    by_hand_3 = 0.5 * math.log(1 + q * q * 3 * m2 + 2 * q**3 * 1 * math.exp(2 * base(3)))
    assert barker_rdp_epsilon(3, b, n) == pytest.approx(by_hand_3, rel=1e-12)
    assert barker_rdp_epsilon(3, b, n, k=50) == pytest.approx(50 * by_hand_3, rel=1e-12)
    assert barker_clip_bound(b, n) == pytest.approx(math.sqrt(1000) / 100_000)
    assert barker_clip_bound(b, n, n0=100) == pytest.approx(math.sqrt(1000) / 100)


@pytest.mark.parametrize(
    "alpha,b,name",
    [(200, 1000, "alpha < \\|B\\|/5"), (1, 1000, "alpha"), (2.5, 1000, "alpha"), (2, 10, "alpha < \\|B\\|/5")],
)
def test_barker_conditions_enforced(alpha, b, name):
    with pytest.raises(ValueError, match=name):
        barker_rdp_epsilon(alpha, b, 10_000)


def test_barker_epsilon_minimises_conversion():
    b, n, k, delta = 30, 3000, 200, 1e-5  # admissible orders 2..5
    expected = min(barker_rdp_epsilon(a, b, n, k) - math.log(delta) / (a - 1) for a in (2, 3, 4, 5))
    assert barker_epsilon(k, delta, b, n) == pytest.approx(expected, rel=1e-14)
    with pytest.raises(ValueError, match="batch_size > 10"):
        barker_epsilon(k, delta, 10, n)


def test_barker_epsilon_of_no_iterations_is_zero():
    assert barker_epsilon(0, 1e-5, 30, 3000) == 0.0
    assert barker_epsilon(0, 1e-5, 5, 3000) == 0.0  # nothing released: no order needed
    with pytest.raises(ValueError, match="batch_size"):
        barker_epsilon(0, 1e-5, 40, 30)


def test_wbk_bound_with_zero_base_rdp_at_order_two():
    # min{4(e^0 - 1), 2 e^0} = 0: the j = 2 term vanishes (no math-domain error)
    q, a = 0.1, 3
    expected = 0.5 * math.log(1 + 2 * q**3 * math.comb(3, 3))
    assert wbk_rdp_bound(a, q, lambda j: 0.0) == pytest.approx(expected, rel=1e-14)
    assert wbk_rdp_bound(2, q, lambda j: 0.0) == 0.0
    with pytest.raises(ValueError, match="base_rdp"):
        wbk_rdp_bound(2, q, lambda j: -1.0)
    with pytest.raises(ValueError, match="base_rdp"):
        wbk_rdp_bound(2, q, lambda j: float("nan"))


def test_subsampled_penalty_theorem9_rdp():
    tau, b, n = 4.0, 50, 1000  # noise multiplier sqrt(tau) = 2
    q = b / n
    e2 = 2 / (2 * tau)
    by_hand = math.log(1 + q * q * min(4 * (math.exp(e2) - 1), 2 * math.exp(e2)))
    assert subsampled_penalty_rdp_epsilon(2, tau, b, n) == pytest.approx(by_hand, rel=1e-12)
    # dp-accounting's strengthened WBK bound agrees at order 2 and is below it above
    for a in (2, 4, 8):
        ours = subsampled_gaussian_rdp(2.0, 1, batch_size=b, n=n, orders=[a])[0]
        seed = subsampled_penalty_rdp_epsilon(a, tau, b, n)
        assert ours <= seed * (1 + 1e-12)


def test_subsampled_penalty_sensitivity_by_hand():
    n, b, T, L, h = 1000, 100, 1.0, 0.1, 0.05
    d_lambda, d_sigma = subsampled_penalty_sensitivity_terms(n, b, T, L, h)
    assert d_lambda == pytest.approx(2 * 1000 * 0.1 * 0.05 / 100)  # 0.1
    s = (1000 / 100) ** 2 * 0.1**2 * 0.05**2  # 0.0025
    assert d_sigma == pytest.approx(s * (1 - 1 / 100) + 2 * 99 / 100 * s)  # 0.007425
    assert subsampled_penalty_sensitivity(n, b, T, L, h) == pytest.approx(0.107425, rel=1e-12)


def test_lemma1_bound_holds_on_adversarial_and_random_batches():
    # half of sigma_b^2 = (nT/b)^2 (sum r^2 - R^2 / b) / 2 must change by at most
    # Delta_sigma when one r_j in [-Lh, Lh] is replaced.
    rng = np.random.default_rng(1)
    n, b, T, L, h = 500, 20, 0.7, 2.0, 0.3
    bound = subsampled_penalty_sensitivity_terms(n, b, T, L, h)[1]
    lh = L * h

    def half_var(r):
        return 0.5 * (n * T / b) ** 2 * (np.sum(r**2) - np.sum(r) ** 2 / b)

    worst = 0.0
    for _ in range(2000):
        r = rng.uniform(-lh, lh, size=b)
        r2 = r.copy()
        r2[0] = rng.uniform(-lh, lh)
        worst = max(worst, abs(half_var(r) - half_var(r2)))
    # extreme configuration: others all +Lh, replaced row goes from +Lh to -Lh
    r = np.full(b, lh)
    r2 = r.copy()
    r2[0] = -lh
    worst = max(worst, abs(half_var(r) - half_var(r2)))
    assert worst <= bound


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: zcdp_rho(0.0, 1e-5), "epsilon"),
        (lambda: zcdp_rho(1.0, 0.0), "delta"),
        (lambda: zcdp_penalty_max_iterations(1.0, 1e-5, -1.0, 100, 0.5), "tau"),
        (lambda: yildirim_theorem1(1, 1.0, 1.0, 0.5, 1.0, 1.0), "n"),
        (lambda: yildirim_theorem1(100, 1.0, 1.0, 0.5, float("nan"), 1.0), "beta"),
        (lambda: subsampled_penalty_sensitivity(100, 200, 1.0, 1.0, 1.0), "batch_size"),
        (lambda: subsampled_penalty_sensitivity(100, 10, 1.0, -1.0, 1.0), "L"),
        (lambda: raisa_theorem7_delta(1.0, -1, 1.0, 10, 0.5), "k"),
        (lambda: advanced_composition_epsilon(0.1, 1e-6, 10, 0.0), "delta_prime"),
    ],
)
def test_invalid_inputs(call, name):
    with pytest.raises(ValueError, match=name):
        call()
