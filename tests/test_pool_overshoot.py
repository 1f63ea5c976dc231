"""A move to a pool of one round is judged for an overshoot far beyond its noise (``POOL_OVERSHOOT``).

A near round whose pool holds only itself moves the search to its own one-step
estimate.  In a blind round (every released eigenvalue at the floor) that step
can be long, and where it goes past the posterior into a region the prior holds
the next round's step, on the prior's gradient alone, was 1e8 posterior sds
(``radon`` at 1,000 rows, epsilon = 4: four of 24 runs 5e27-6e55 sds off).  The
check on such a move must not fire on the noise a pool's move lands on
(judged like a full step, a Poisson GLM's median went 4.0 -> 6.4 sds).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import stan_dp
from stan_dp.adaptation import curvature, newton
from stan_dp.adaptation import plan as plan_module
from stan_dp.adaptation.plan import CHECK_SHARE, AdaptationSettings
from stan_dp.adaptation.curvature import CURVATURE_CAP
from stan_dp.adaptation.newton import OVERSHOOT, POOL_OVERSHOOT, _went_too_far

from densities import radon_like


def _slopes(rng: np.random.Generator, ratio: float, signal: float, sd: float, dim: int,
            draws: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slopes before and after a Newton step on a quadratic, computed directly.

    In frame units the quadratic's gradient at the start is ``signal`` along the first axis, its
    curvature ``ratio`` times the identity the step assumes; each point's released gradient adds
    independent noise of sd ``sd`` per coordinate.  The step is ``du = g0`` (curvature 1), so the
    slope stepped along is ``g0 . du`` and the slope at the new point is
    ``(true gradient there + noise) . du`` with the true gradient ``true - ratio du``.
    """
    true = np.zeros(dim)
    true[0] = signal
    g0 = true + sd * rng.normal(size=(draws, dim))
    du = g0
    g1 = true - ratio * du + sd * rng.normal(size=(draws, dim))
    return np.sum(g0 * du, axis=1), np.sum(g1 * du, axis=1), np.linalg.norm(du, axis=1)


def test_the_pool_rule_does_not_fire_on_the_noise_of_a_move_near_the_mode():
    # At the mode (no signal, the curvature right) a move is all noise, and the slope back at the new
    # point is about as large as the slope stepped along (ratio ~ -1): the full step's factor 0.5
    # calls a sizable share of such moves overshoots; POOL_OVERSHOOT none of 20,000.
    rng = np.random.default_rng(0)
    sd = 30.0
    before, after, norm = _slopes(rng, ratio=1.0, signal=0.0, sd=sd, dim=4, draws=20_000)
    pooled = np.array([_went_too_far(a, b, c, sd, pooled=True) for a, b, c in zip(after, before, norm)])
    full = np.array([_went_too_far(a, b, c, sd, pooled=False) for a, b, c in zip(after, before, norm)])
    assert pooled.sum() == 0
    assert full.mean() > 0.1, full.mean()


@pytest.mark.parametrize("ratio, fires", [(1.0 + POOL_OVERSHOOT - 0.5, False), (1.0 + POOL_OVERSHOOT + 0.5, True)])
def test_the_pool_rule_fires_where_the_curvature_was_underestimated_more_than_its_factor(ratio, fires):
    # Noise-free: the slope at the new point is (1 - ratio) times the slope stepped along, so the
    # rule fires exactly when the curvature was underestimated more than 1 + POOL_OVERSHOOT times.
    before, after, norm = _slopes(np.random.default_rng(1), ratio=ratio, signal=100.0, sd=0.0, dim=3, draws=1)
    np.testing.assert_allclose(after, (1.0 - ratio) * before)
    assert _went_too_far(after[0], before[0], norm[0], 1e-9, pooled=True) is fires
    # the full step's rule fires from 1 + OVERSHOOT on: both cases
    assert _went_too_far(after[0], before[0], norm[0], 1e-9, pooled=False)
    before, after, norm = _slopes(np.random.default_rng(1), ratio=1.0 + OVERSHOOT - 0.1, signal=100.0, sd=0.0,
                                  dim=3, draws=1)
    assert not _went_too_far(after[0], before[0], norm[0], 1e-9, pooled=False)


def test_a_pool_move_that_went_against_the_released_gradient_is_not_judged():
    assert not _went_too_far(-1e9, -1.0, 1.0, 1.0, pooled=True)
    assert not _went_too_far(-1e9, 0.0, 1.0, 1.0, pooled=True)


def _worst_error(seed: int, **settings) -> tuple[float, bool]:
    """Worst |private mean - exact mode| in Laplace sds (unconstrained) of a ``radon``-like varying
    intercept (20 groups of ~50 rows; 1,000 rows, epsilon = 4), and whether the run warned
    (``settings``: ``AdaptationSettings`` overrides)."""
    model = radon_like(seed)
    mode, cov = model.exact()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=4.0, delta=1e-5, seed=seed, progress=False, chains=1, draws=200,
                             settings=AdaptationSettings(**settings))
    p = fit.posterior
    with np.errstate(all="ignore"):
        est = np.r_[p["mu"].values.mean(), np.log(p["tau"].values).mean(),
                    p["a"].values.reshape(-1, 20).mean(axis=0), np.log(p["sigma"].values).mean()]
        err = np.abs(est - mode) / np.sqrt(np.diag(cov))
    warned = any(issubclass(w.category, stan_dp.UtilityWarning) for w in caught) and bool(fit.attrs["warnings"])
    worst = float(np.max(err)) if np.all(np.isfinite(err)) else math.inf
    return worst, warned


def test_a_pool_of_one_round_that_went_far_past_the_posterior_is_taken_back(monkeypatch):
    # Of 40 seeds of this twin, the rule changes these three (the other 37 are draw for draw the
    # same): with neither it nor Newton's step beyond the curvature cap (tests/test_newton_step.py)
    # 8,855, 247 and inf sds off (tau at infinity); with both 147, 43 and 44 — still far at this
    # budget, and warned.  Newton's step alone takes the first to 169 and the last to 784.
    # These figures are the plan's before the final check (plan.CHECK_SHARE = 0); the check, a
    # later release, redraws every noise draw of this cell (its budget comes off the rounds').
    # They are also the paths before the first Newton step's trust region (session 56): with it (at
    # 10, measured) none of the three ran away with the rules off either (18.9, 43.6 and 18.3 sds,
    # all three ways), so the counterfactuals lift it; the runs with every rule on keep it.
    seeds = (27, 30, 39)
    old_paths = {"first_radius": math.inf}
    monkeypatch.setattr(plan_module, "CHECK_SHARE", 0.0)
    on = [_worst_error(seed) for seed in seeds]
    monkeypatch.setattr(newton, "POOL_OVERSHOOT", math.inf)
    pool_off = [_worst_error(seed, **old_paths) for seed in seeds]
    monkeypatch.setattr(curvature, "STEP_CURVATURE_TOP", CURVATURE_CAP)
    both_off = [_worst_error(seed, **old_paths) for seed in seeds]
    for (w_on, warned), (w_pool_off, _), (w_both_off, _), seed in zip(on, pool_off, both_off, seeds):
        assert warned
        assert w_on < 200.0 and w_on * 4.0 < w_both_off, (on, pool_off, both_off)
        if seed != 27:
            assert w_on * 4.0 < w_pool_off, (on, pool_off)
    # With the final check planned and both rules still off, the check alone brings the three
    # runaways back to where the search had been (measured 26, 36 and 29 sds: warned, unsettled)
    monkeypatch.setattr(plan_module, "CHECK_SHARE", CHECK_SHARE)
    checked = [_worst_error(seed, **old_paths) for seed in seeds]
    for (w_checked, warned), (w_both_off, _) in zip(checked, both_off):
        assert warned and w_checked < 100.0 and w_checked * 2.0 < w_both_off, (checked, both_off)


def test_the_pool_rule_leaves_a_run_it_does_not_fire_in_unchanged(monkeypatch):
    on = _worst_error(0)
    monkeypatch.setattr(newton, "POOL_OVERSHOOT", math.inf)
    assert _worst_error(0) == on
