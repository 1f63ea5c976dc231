"""Budget and Release: the interface the samplers share."""

from __future__ import annotations

import dataclasses
import math
import random

import dp_accounting as dpa
import pytest

from stan_dp.accounting import (
    Budget,
    PrivacyBudgetError,
    Release,
    calibrate_gaussian_noise,
    gaussian_epsilon,
    gaussian_max_count,
    sensitivity_factor,
    subsampled_gaussian_epsilon,
    subsampled_gaussian_max_count,
    validate_privacy_params,
)


def test_sensitivity_factor():
    assert sensitivity_factor("replace_one") == 2.0
    assert sensitivity_factor("add_remove") == 1.0
    with pytest.raises(ValueError, match="relation"):
        sensitivity_factor("substitute")


def test_budget_is_immutable_and_validated():
    b = Budget(1.0, 1e-5)
    assert b.relation == "replace_one"
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.epsilon = 2.0  # type: ignore[misc]
    assert b.as_dict() == {"epsilon": 1.0, "delta": 1e-5, "neighbouring_relation": "replace_one"}


@pytest.mark.parametrize(
    "args,name",
    [
        ((0.0, 1e-5), "epsilon"),
        ((-1.0, 1e-5), "epsilon"),
        ((float("nan"), 1e-5), "epsilon"),
        ((1.0, 0.0), "delta"),
        ((1.0, 1.0), "delta"),
        ((1.0, -0.1), "delta"),
        ((1.0, float("nan")), "delta"),
        ((1.0, 1e-5, "neighbours"), "relation"),
    ],
)
def test_budget_invalid(args, name):
    with pytest.raises(ValueError, match=name):
        Budget(*args)
    if len(args) == 2:
        with pytest.raises(ValueError, match=name):
            validate_privacy_params(*args)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(noise_multiplier=0.0), "noise_multiplier"),
        (dict(noise_multiplier=-1.0), "noise_multiplier"),
        (dict(noise_multiplier=float("nan")), "noise_multiplier"),
        (dict(noise_multiplier=1.0, count=-1), "count"),
        (dict(noise_multiplier=1.0, count=float("nan")), "count"),
        (dict(noise_multiplier=1.0, batch_size=5), "together"),
        (dict(noise_multiplier=1.0, batch_size=0, n=10), "batch_size"),
        (dict(noise_multiplier=1.0, batch_size=20, n=10), "batch_size"),
    ],
)
def test_release_invalid(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Release(**kwargs)


def test_single_line_plan_matches_gaussian_functions():
    b = Budget(1.0, 1e-5)
    assert b.accountant([Release(30.0)]) == "gaussian-pld-exact"
    k = b.max_iterations([Release(30.0)])
    assert k == gaussian_max_count(30.0, 1.0, 1e-5)
    assert b.calibrate([Release(1.0)], 500) == calibrate_gaussian_noise(500, 1.0, 1e-5)
    assert b.epsilon_spent([Release(30.0)], k) == gaussian_epsilon(30.0, k, 1e-5)


def test_dp_hmc_plan_against_pld_accountant():
    # DP HMC (seed 003, Sec. 5.2): per iteration 1 log-ratio release and L
    # gradient releases; one initial gradient per chain.
    z_l, z_g, L, chains = 40.0, 60.0, 5, 3
    b = Budget(2.0, 1e-6)
    plan = [Release(z_l), Release(z_g, count=L)]
    once = [Release(z_g)]
    k = b.max_iterations(plan, chains=chains, once=once)
    spent = b.epsilon_spent(plan, k, chains=chains, once=once)
    assert spent <= 2.0 < b.epsilon_spent(plan, k + 1, chains=chains, once=once)
    assert spent == gaussian_epsilon([z_l, z_g], [chains * k, chains * (k * L + 1)], 1e-6)
    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4)
    acc.compose(dpa.GaussianDpEvent(z_l), chains * k)
    acc.compose(dpa.GaussianDpEvent(z_g), chains * (k * L + 1))
    assert abs(acc.get_epsilon(1e-6) - spent) / spent < 1e-4


def test_chains_count_against_the_budget():
    b = Budget(1.0, 1e-5)
    k1 = b.max_iterations([Release(50.0)], chains=1)
    k4 = b.max_iterations([Release(50.0)], chains=4)
    # 4 chains of k iterations are 4k releases, so exactly the single-chain count / 4
    assert k1 == gaussian_max_count(50.0, 1.0, 1e-5)
    assert k4 == k1 // 4
    assert b.fits([Release(50.0)], k4, chains=4)
    assert not b.fits([Release(50.0)], k4 + 1, chains=4)


def test_calibrate_scales_every_multiplier_to_fit_exactly():
    b = Budget(1.0, 1e-5)
    plan = [Release(1.0), Release(2.0, count=3)]
    once = [Release(2.0)]
    s = b.calibrate(plan, 1000, chains=2, once=once)
    scaled = [r.scaled(s) for r in plan]
    scaled_once = [r.scaled(s) for r in once]
    assert b.epsilon_spent(scaled, 1000, chains=2, once=scaled_once) <= 1.0
    assert b.check(scaled, 1000, chains=2, once=scaled_once) <= 1.0
    smaller = [r.scaled(s * (1 - 1e-9)) for r in plan]
    smaller_once = [r.scaled(s * (1 - 1e-9)) for r in once]
    assert b.epsilon_spent(smaller, 1000, chains=2, once=smaller_once) > 1.0
    assert b.max_iterations(scaled, chains=2, once=scaled_once) == 1000


def test_subsampled_plan_uses_rdp_and_matches_functions():
    b = Budget(1.0, 1e-5)
    plan = [Release(1.5, batch_size=100, n=20_000)]
    assert b.accountant(plan) == "rdp-sampled-without-replacement"
    k = b.max_iterations(plan)
    assert k == subsampled_gaussian_max_count(1.5, 1.0, 1e-5, batch_size=100, n=20_000)
    assert b.epsilon_spent(plan, k) == subsampled_gaussian_epsilon(1.5, k, 1e-5, batch_size=100, n=20_000)
    s = b.calibrate(plan, 3000, chains=2)
    assert b.epsilon_spent([plan[0].scaled(s)], 3000, chains=2) <= 1.0
    assert b.epsilon_spent([plan[0].scaled(s * (1 - 1e-5))], 3000, chains=2) > 1.0


def test_mixed_plan_is_never_optimistic():
    b = Budget(2.0, 1e-5)
    sub = Release(2.0, batch_size=50, n=5000)
    plain = Release(30.0, count=2)
    plan = [sub, plain]
    assert b.accountant(plan) == "rdp-sampled-without-replacement"
    assert b.accountant([plain], once=[sub]) == "rdp-sampled-without-replacement"
    k = 400
    mixed = b.epsilon_spent(plan, k)
    # at least what the plain part alone costs exactly, and at least the subsampled part alone
    assert mixed >= gaussian_epsilon(30.0, 2 * k, 1e-5)
    assert mixed >= b.epsilon_spent([sub], k)
    assert mixed > b.epsilon_spent([plain], k)
    km = b.max_iterations(plan)
    assert b.fits(plan, km) and not b.fits(plan, km + 1)


def test_grouping_identical_lines():
    b = Budget(1.0, 1e-5)
    a = b.epsilon_spent([Release(20.0, 2), Release(20.0, 3)], 100)
    c = b.epsilon_spent([Release(20.0, 5)], 100)
    assert a == c


def test_requests_that_cannot_fit_raise_before_anything_runs():
    b = Budget(0.5, 1e-5)
    with pytest.raises(PrivacyBudgetError, match="not even one iteration"):
        b.max_iterations([Release(0.5)])
    with pytest.raises(PrivacyBudgetError):
        b.max_iterations([Release(100.0)], once=[Release(0.1)])
    with pytest.raises(PrivacyBudgetError, match="epsilon"):
        b.check([Release(10.0)], 10_000)
    assert issubclass(PrivacyBudgetError, ValueError)


def test_add_remove_relation():
    b = Budget(1.0, 1e-5, relation="add_remove")
    # Gaussian accounting in units of the relation's sensitivity is the same
    assert b.max_iterations([Release(30.0)]) == Budget(1.0, 1e-5).max_iterations([Release(30.0)])
    with pytest.raises(ValueError, match="replace-one"):
        b.max_iterations([Release(1.0, batch_size=10, n=100)])


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda b: b.max_iterations([Release(1.0)], chains=0), "chains"),
        (lambda b: b.max_iterations([]), "releases nothing"),
        (lambda b: b.max_iterations([Release(1.0, count=0)]), "releases nothing"),
        (lambda b: b.max_iterations([1.0]), "plan"),
        (lambda b: b.calibrate([Release(1.0)], 0), "iterations"),
        (lambda b: b.calibrate([Release(1.0)], -5), "iterations"),
        (lambda b: b.epsilon_spent([Release(1.0)], -1), "iterations"),
        (lambda b: b.epsilon_spent([Release(1.0)], 10, once=["x"]), "once"),
    ],
)
def test_invalid_budget_calls(call, name):
    with pytest.raises(ValueError, match=name):
        call(Budget(1.0, 1e-5))


def test_setup_calls_for_a_million_releases():
    # (speed is measured in benchmarks/accounting.py, not asserted here)
    b = Budget(1.0, 1e-5)
    plan = [Release(3000.0), Release(5000.0, count=10)]
    k = b.max_iterations(plan, chains=4, once=[Release(5000.0)])
    s = b.calibrate(plan, 10**6, chains=4)
    e = b.epsilon_spent(plan, 10**6, chains=4)
    assert k > 0 and s > 0 and e > 0
    assert b.check([r.scaled(s) for r in plan], 10**6, chains=4) <= 1.0

    sub = [Release(0.9, batch_size=64, n=50_000), Release(30.0)]
    k = b.max_iterations(sub)
    s = b.calibrate(sub, 10**6)
    e = b.epsilon_spent([r.scaled(s) for r in sub], 10**6)
    assert k > 0 and e <= 1.0 and math.isfinite(s)


# --------------------------------------------------------------------------
# decisions are made with exactly the arithmetic that check() uses
# --------------------------------------------------------------------------
def test_calibrate_two_line_plan_passes_check_regression():
    # D1: the fit used to be decided with mu(scale 1)/s^2 while epsilon_spent
    # sums count/(2 (z s)^2); the calibrated run then overspent by 1 ulp.
    b = Budget(1.0, 1e-5)
    plan = [Release(1.0), Release(2.0, count=3)]
    for it in (7, 28, 46):
        s = b.calibrate(plan, it)
        scaled = [r.scaled(s) for r in plan]
        assert b.epsilon_spent(scaled, it) <= 1.0
        b.check(scaled, it)  # must not raise


def test_max_iterations_pld_regression():
    # D2 (PLD): k * mu_unit + mu_fixed used to decide, grouped counts report.
    b = Budget(0.09980557303237705, 1.96499670353728e-08)
    plan = [Release(5662.025109860755, count=4)]
    k = b.max_iterations(plan, chains=2)
    b.check(plan, k, chains=2)
    assert b.epsilon_spent(plan, k, chains=2) <= b.epsilon < b.epsilon_spent(plan, k + 1, chains=2)


def test_max_iterations_rdp_regression():
    # D2 (RDP): the same for the RDP engine (found by a boundary search).
    b = Budget(195.25935040516674, 3.538278466722381e-06)
    plan = [
        Release(2.6711916493269876, count=2, batch_size=1728, n=100000),
        Release(4.8552919470372675, count=2),
    ]
    k = b.max_iterations(plan, chains=4)
    b.check(plan, k, chains=4)
    assert not b.fits(plan, k + 1, chains=4)


def _random_plan(rng):
    plan = [Release(10 ** rng.uniform(0, 3), count=rng.randint(1, 5)) for _ in range(rng.randint(1, 3))]
    once = [Release(10 ** rng.uniform(0, 3)) for _ in range(rng.randint(0, 2))]
    return plan, once, rng.randint(1, 8)


def test_calibrate_then_check_never_raises_randomised():
    rng = random.Random(20240611)
    for _ in range(150):
        b = Budget(10 ** rng.uniform(-2, 1), 10 ** rng.uniform(-12, -2))
        plan, once, chains = _random_plan(rng)
        it = rng.randint(1, 10**5)
        s = b.calibrate(plan, it, chains, once)
        sp, so = [r.scaled(s) for r in plan], [r.scaled(s) for r in once]
        b.check(sp, it, chains, so)  # must not raise
        # and the scale is tight
        sm, som = [r.scaled(s * (1 - 1e-9)) for r in plan], [r.scaled(s * (1 - 1e-9)) for r in once]
        assert not b.fits(sm, it, chains, som)


def test_max_iterations_then_check_never_raises_randomised():
    # Budgets placed exactly at (and one ulp below) the epsilon of a random
    # run, where any rounding disagreement between the search and check() shows.
    rng = random.Random(99)
    for _ in range(100):
        d = 10 ** rng.uniform(-12, -2)
        plan, once, chains = _random_plan(rng)
        target_k = rng.randint(1, 10**4)
        e = Budget(1.0, d).epsilon_spent(plan, target_k, chains, once)
        for eps in (e, math.nextafter(e, 0.0)):
            b = Budget(eps, d)
            try:
                k = b.max_iterations(plan, chains, once)
            except PrivacyBudgetError:
                assert eps < e and target_k == 1
                continue
            b.check(plan, k, chains, once)  # must not raise
            assert not b.fits(plan, k + 1, chains, once)
            if eps == e:
                assert k >= target_k


def test_subsampled_plans_randomised():
    rng = random.Random(7)
    for case in range(8):
        d = 10 ** rng.uniform(-9, -3)
        n = rng.choice([1000, 10_000, 100_000])
        plan = [Release(rng.uniform(0.6, 5), count=rng.randint(1, 3), batch_size=rng.randint(1, n // 10), n=n)]
        if rng.random() < 0.5:
            plan.append(Release(10 ** rng.uniform(0.5, 2), count=rng.randint(1, 3)))
        chains, target_k = rng.randint(1, 4), rng.randint(1, 3000)
        e = Budget(1.0, d).epsilon_spent(plan, target_k, chains)
        b = Budget(e, d)
        k = b.max_iterations(plan, chains)
        b.check(plan, k, chains)
        assert k >= target_k and not b.fits(plan, k + 1, chains)
        if case < 2:  # (each new noise scale costs a fresh WBK evaluation)
            s = b.calibrate(plan, target_k, chains)
            b.check([r.scaled(s) for r in plan], target_k, chains)
