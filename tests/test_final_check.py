"""The final check: one accounted release that lets an unsettled search report a point it evaluated.

``final_check`` releases ``sum_i clip_B(l_i(theta_k) - l_i(theta_hat))_k`` with
``B = CHECK_NATS sqrt(K)`` and noise sd ``2 B z`` (replace-one), adds the exact
log-prior difference and replaces the estimate by the best point only where
that beats it by more than ``CHECK_SDS`` noise sds and the search did not
settle.  Checked against the clipped sum written out with NumPy, on rows
impossible at a point, on a normal-scale model whose estimate jumped to where
the rows are flat, and on the plan: where it is made, that it composes to the
whole budget, and that a run's ledger holds exactly the planned release.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from densities import NormalMeanScale, radon_like
from stan_dp.adaptation import final_check as fc
from stan_dp.adaptation.forecast import pld_mean_budget
from stan_dp.adaptation.newton import private_mode
from stan_dp.adaptation.plan import (AdaptationSettings, adaptation_releases, check_planned,
                                     curvature_noise_forecast, noise_multipliers, planned_settings)
from stan_dp.adaptation.releases import Ledger
from stan_dp.aggregates import queries


def _model(seed: int = 0, n: int = 400) -> NormalMeanScale:
    rng = np.random.default_rng(seed)
    return NormalMeanScale(20.0 + 2.0 * rng.normal(size=n))   # mode near (20, log 2)


def test_the_release_is_the_clipped_sum_of_the_rows_differences_with_its_planned_noise():
    model = _model()
    candidates = [np.array([19.0, 0.5]), np.array([0.0, 0.0]), np.array([20.0, 0.7])]
    estimate = np.array([21.0, 0.8])
    z = 1e-9   # the noise is then negligible: the release is the clipped sum itself
    ledger = Ledger("replace_one")
    rng = np.random.default_rng(1)
    chosen, which = fc.final_check(queries(model), model, candidates, estimate, z, rng, ledger, use=False)
    # written out: per row the K-vector of differences, projected on the l2 ball of radius sqrt(K)
    diffs = np.column_stack([model.row_log_lik(c) - model.row_log_lik(estimate) for c in candidates])
    bound = fc.CHECK_NATS * math.sqrt(len(candidates))
    norms = np.linalg.norm(diffs, axis=1)
    expected = (diffs * np.minimum(1.0, bound / norms)[:, None]).sum(axis=0)
    assert len(ledger.entries) == 1 and ledger.entries[0].what == "final check"
    entry = ledger.entries[0]
    assert entry.noise_multiplier == z
    assert entry.sensitivity == pytest.approx(2.0 * bound, rel=1e-15)   # replace-one: 2 B
    assert entry.noise_sd < 1e-8
    # use=False: the estimate stands whatever the release says
    np.testing.assert_array_equal(chosen, estimate)
    assert which == -1
    # and with use=True the best point by released score plus exact prior difference is chosen
    ledger = Ledger("replace_one")
    chosen, which = fc.final_check(queries(model), model, candidates, estimate, z, np.random.default_rng(1),
                                   ledger, use=True)
    prior = np.array([model.log_prior(c) - model.log_prior(estimate) for c in candidates])
    assert which == int(np.argmax(expected + prior))
    np.testing.assert_array_equal(chosen, candidates[which])


def test_rows_impossible_at_a_point_count_fully_against_it_and_never_give_nan():
    class Bounded(NormalMeanScale):
        def row_log_lik(self, theta, rows=None):   # rows above theta[0] + 5 are impossible
            out = super().row_log_lik(theta, rows)
            y = self.y if rows is None else self.y[np.asarray(rows)]
            return np.where(y > theta[0] + 5.0, -np.inf, out)

    model = Bounded(np.r_[np.zeros(50), np.full(50, 10.0)])
    rows = fc.difference_rows(model, np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([10.0, 0.0]))
    assert np.all(np.isfinite(rows))
    # candidate 0 makes the 50 rows at 10 impossible (possible at the estimate): -inf there
    assert np.all(rows[50:, 0] == -fc._IMPOSSIBLE)
    # candidate 1 is the estimate: every difference 0
    assert np.all(rows[:, 1] == 0.0)
    # impossible at the reference and possible at the candidate: +inf
    back = fc.difference_rows(model, np.array([[10.0, 0.0]]), np.array([0.0, 0.0]))
    assert np.all(back[50:, 0] == fc._IMPOSSIBLE) and np.all(np.isfinite(back))
    # an impossible row weighs a full -B against the point, no more (bounded sensitivity, not a
    # veto): with 80 rows at 10 impossible at mu = 0 and 20 rows at 0 preferring it, mu = 0 loses
    model = Bounded(np.r_[np.zeros(20), np.full(80, 10.0)])
    bound = fc.check_bound(2)
    ledger = Ledger("replace_one")
    chosen, which = fc.final_check(queries(model), model, [np.array([0.0, 0.0]), np.array([10.0, 0.0])],
                                   np.array([10.0, 0.0]), 1e-9, np.random.default_rng(0), ledger, use=True)
    assert which != 0
    assert ledger.entries[0].sensitivity == pytest.approx(2.0 * bound)
    # the same 50/50 split: the 50 rows at 0 (each preferring mu = 0 by 50 nats, clipped to B) and
    # the 50 impossible ones (-B each) cancel, and the prior (mu ~ N(0, 5^2)) decides: mu = 0
    model = Bounded(np.r_[np.zeros(50), np.full(50, 10.0)])
    _, which = fc.final_check(queries(model), model, [np.array([0.0, 0.0])], np.array([10.0, 0.0]), 1e-9,
                              np.random.default_rng(0), Ledger("replace_one"), use=True)
    assert which == 0


def test_a_jump_to_where_the_rows_are_flat_is_caught_and_a_near_one_is_not():
    """``sigma`` grown to e^12: every row's log-likelihood is about -12 instead of about -2, so the
    rows prefer an earlier point near the mode by ~10 nats each; at 400 rows and K = 8 the clipped
    signal is 400 against a noise sd of 2 sqrt(8) z, beyond 3.5 sds up to z ~ 20."""
    model = _model(3)
    mode = np.array([model.y.mean(), math.log(model.y.std())])
    evaluated = [mode + np.array([0.3 * k, 0.02 * k]) for k in range(8)]
    jumped = np.array([mode[0], 12.0])
    for z, seed in ((5.0, 0), (15.0, 1)):
        chosen, which = fc.final_check(queries(model), model, evaluated, jumped, z,
                                       np.random.default_rng(seed), Ledger("replace_one"), use=True)
        assert which >= 0, z
        # the chosen point is one of the evaluated, near the mode (within a few of its sds)
        np.testing.assert_array_equal(chosen, evaluated[which])
    # a search that settled keeps its estimate
    chosen, which = fc.final_check(queries(model), model, evaluated, jumped, 5.0, np.random.default_rng(0),
                                   Ledger("replace_one"), use=False)
    assert which == -1
    # an estimate as good as the points (near the mode): no switch at any of 200 noise draws at the
    # multiplier of a 1,000-row, epsilon = 1 plan (differences of a few nats in all against a noise
    # sd of ~2 sqrt(8) z): a false switch needs the largest of 8 draws beyond 3.5 sds (0.19 %)
    m = pld_mean_budget(1.0, 1e-5)
    z = noise_multipliers(m, planned_settings(AdaptationSettings(), 1000, 11, m))["check"]
    switched = sum(fc.final_check(queries(model), model, evaluated, mode + np.array([0.05, 0.0]), z,
                                  np.random.default_rng(100 + i), Ledger("replace_one"), use=True)[1] >= 0
                   for i in range(200))
    assert switched <= 3   # binomial(200, 0.0019): P(> 3) < 1e-3


@pytest.mark.parametrize("n, d, epsilon, planned", [(1000, 11, 1.0, True), (1000, 11, 4.0, True),
                                                    (500, 4, 1.0, True), (10_000, 11, 1.0, False),
                                                    (20_000, 4, 4.0, False)])
def test_the_check_is_planned_where_the_rounds_are_blind_and_composes_to_the_budget(n, d, epsilon, planned):
    m = pld_mean_budget(epsilon, 1e-5)
    s = planned_settings(AdaptationSettings(), n, d, m)
    # the gate, computed independently: one round's curvature noise beyond the resolution, without
    # the check's share
    tau = curvature_noise_forecast(s._replace(check_share=0.0), n, d, m)
    assert check_planned(s, n, d, m) == (tau > 1.0) == planned
    assert (s.check_share > 0) == planned
    releases = adaptation_releases(m, s, n, d)
    # every release's PLD mean 1/(2 z^2) times its count sums to the budget, the check's share of it
    total = sum(r.count / (2.0 * r.noise_multiplier**2) for r in releases)
    assert total == pytest.approx(m, rel=1e-12)
    if planned:
        z = noise_multipliers(m, s)["check"]
        assert [r for r in releases if r.noise_multiplier == z] and 1.0 / (2.0 * z**2) == pytest.approx(
            s.check_share * m, rel=1e-12)
    else:
        assert "check" not in noise_multipliers(m, s)


def test_a_run_makes_exactly_the_planned_check_and_reports_which_point_it_took():
    model = radon_like(3)   # 1,000 rows, 23 coordinates: blind rounds at epsilon = 4
    m = pld_mean_budget(4.0, 1e-5)
    s = planned_settings(AdaptationSettings(), model.n_rows, model.dim, m)
    assert s.check_share > 0
    result = private_mode(model, n_public=model.n_rows, pld_mean=m, relation="replace_one",
                          rng_noise=np.random.default_rng(5), init=np.zeros(model.dim), settings=s)
    checks = [e for e in result.ledger.entries if e.what == "final check"]
    assert len(checks) == 1
    assert checks[0].noise_multiplier == noise_multipliers(m, s)["check"]
    assert checks[0].sensitivity == pytest.approx(2.0 * fc.check_bound(s.rounds))
    # the search's last release (only the skew check, at the reported mode, comes after it)
    assert [e.what for e in result.ledger.entries[-2:]] == ["final check", "skew check"]
    assert -1 <= result.checked < s.rounds
    if result.settled:
        assert result.checked == -1
    if result.checked >= 0:   # then the reported mode is one of the search's points
        assert any(np.array_equal(result.mode, p) for p in result.path)
