"""The curvature release's share of each round, cut where less resolves it (``planned_settings``).

With the default ``hessian_share=None`` the plan gives each round's curvature
release :data:`~stan_dp.adaptation.plan.HESSIAN_SHARE` of the round's data
budget, and where one round's curvature noise at the planned rounds is below
:data:`~stan_dp.adaptation.plan.CURVATURE_NOISE_TARGET` (many rows or a large
budget) it cuts that share until the noise is at the target, to at least
:data:`~stan_dp.adaptation.plan.HESSIAN_SHARE_MIN`; the gradient releases,
whose noise is the estimate's, get the rest.  Checked against an independent
recomputation of the noise from the plan's own multiplier, and against the
accounting of a run.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from stan_dp.adaptation import newton
from stan_dp.adaptation.plan import (AdaptationSettings, CURVATURE_NOISE_TARGET, HESSIAN_SHARE,
                                     HESSIAN_SHARE_MIN, adaptation_releases, curvature_noise_forecast,
                                     noise_multipliers, planned_settings, round_count)
from stan_dp.adaptation.forecast import pld_mean_budget
from test_auto import Logistic


def _tau(settings: AdaptationSettings, n: int, dim: int, pld: float) -> float:
    """One round's curvature noise: 1.5 x (2 z_h C_h) x sqrt(2 d), C_h = 1.5 chi2_{d,0.9} / n."""
    z_h = noise_multipliers(pld, settings)["curvature"]
    c_h = 1.5 * stats.chi2.ppf(0.9, dim) / n
    return 1.5 * 2.0 * z_h * c_h * math.sqrt(2.0 * dim)


@pytest.mark.parametrize("n, dim, eps, cut", [
    (1000, 11, 4.0, False), (10_000, 11, 1.0, False), (10_000, 11, 4.0, False),
    (10_000, 6, 4.0, True), (100_000, 11, 1.0, True), (100_000, 6, 4.0, True)])
def test_the_share_is_cut_to_the_target_noise_and_no_further(n, dim, eps, cut):
    pld = pld_mean_budget(eps, 1e-5)
    planned = planned_settings(AdaptationSettings(), n, dim, pld)
    full = planned._replace(hessian_share=HESSIAN_SHARE)
    tau_full = _tau(full, n, dim, pld)
    assert bool(tau_full < CURVATURE_NOISE_TARGET) is cut, tau_full
    assert math.isclose(curvature_noise_forecast(full, n, dim, pld), tau_full, rel_tol=1e-9)
    # the noise goes like 1 / sqrt(share): the share that puts it at the target, within [min, default]
    expected = HESSIAN_SHARE * min(1.0, (tau_full / CURVATURE_NOISE_TARGET) ** 2)
    assert math.isclose(planned.hessian_share, max(HESSIAN_SHARE_MIN, expected), rel_tol=1e-12)
    tau = _tau(planned, n, dim, pld)
    if cut and expected > HESSIAN_SHARE_MIN:
        assert math.isclose(tau, CURVATURE_NOISE_TARGET, rel_tol=1e-9)
    if cut:   # a cut round stays resolvable on its own (round_count's condition)
        assert tau <= 1.0
    else:
        assert planned.hessian_share == HESSIAN_SHARE
    # the rounds are those of the uncut plan, and the cut gives the gradient the difference
    assert planned.rounds == round_count(full._replace(rounds=None), n, dim, pld)
    z_g = noise_multipliers(pld, planned)["gradient"]
    z_g_full = noise_multipliers(pld, full)["gradient"]
    assert math.isclose(z_g_full / z_g, math.sqrt((1 - planned.hessian_share) / (1 - HESSIAN_SHARE)),
                        rel_tol=1e-12)


def test_an_explicit_share_is_kept_and_an_unplanned_one_is_refused():
    pld = pld_mean_budget(1.0, 1e-5)
    planned = planned_settings(AdaptationSettings(hessian_share=0.2), 100_000, 11, pld)
    assert planned.hessian_share == 0.2
    with pytest.raises(ValueError, match="hessian_share"):
        noise_multipliers(pld, AdaptationSettings(rounds=10, orient=False))


def test_a_run_with_the_cut_share_makes_exactly_its_planned_releases():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(20_000, 2))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.2 + x @ np.array([0.7, -0.4])))))
    model = Logistic(x, y)
    pld = pld_mean_budget(4.0, 1e-5)
    planned = planned_settings(AdaptationSettings(), model.n_rows, model.dim, pld)
    assert planned.hessian_share < HESSIAN_SHARE   # n = 2e4, D = 3, epsilon = 4: cut
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = newton.private_mode(model, n_public=model.n_rows, pld_mean=pld, relation="replace_one",
                                     rng_noise=np.random.default_rng(0), init=np.zeros(model.dim))
    made = Counter(float(f"{e.noise_multiplier:.12g}") for e in result.ledger.entries)
    plan: Counter = Counter()
    for r in adaptation_releases(pld, AdaptationSettings(), model.n_rows, model.dim):
        plan[float(f"{r.noise_multiplier:.12g}")] += r.count
    assert made == plan
    z_h = noise_multipliers(pld, planned)["curvature"]
    assert made[float(f"{z_h:.12g}")] == planned.rounds
    mode, cov = model.exact()
    assert result.settled
    assert np.max(np.abs(result.mode - mode) / np.sqrt(np.diag(cov))) < 1.0
