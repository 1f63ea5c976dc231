"""A ridge that few rows depend on keeps a frame near its posterior's (the orientation's direction count).

A county's intercept and slope on a binary predictor that is 1 in 80 % of the rows form a ridge
(posterior correlation about -0.9) that only the county's rows, a tenth of them, depend on.  The
orientation (:func:`stan_dp.adaptation.initial_frame._oriented_frame`) turns the frame along it and
scales each turned direction from a private quantile of the rows' curvature along it.  Taken as a
tail of all ``n`` rows that quantile lands among the nine tenths that do not depend on the
direction, near 0, and the frame came out thousands of posterior sds wide along the county's pair
(``radon-slopes`` at 3,000 rows, epsilon = 16), where the rounds then diverged.  With the released
counts of the rows depending on each coordinate the target is taken among those rows
(:func:`stan_dp.adaptation.initial_frame.sparse_direction_tails`).

Checked against the exact posterior of a normal regression on the county indicators and their
products with the predictor (flat priors: multivariate t, closed form).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stan_dp.adaptation.forecast import pld_mean_budget
from stan_dp.adaptation.initial_frame import (DEPENDING_LOWER_SDS, _oriented_frame, initial_scale_release,
                                              sparse_direction_tails)
from stan_dp.adaptation.plan import AdaptationSettings, noise_multipliers, planned_settings, scale_tail
from stan_dp.adaptation.releases import Ledger
from stan_dp.aggregates import queries
from densities import NormalRegression

GROUPS = 10


def _county_regression(seed: int, n: int = 3000) -> NormalRegression:
    """``y ~ N(a[g] + b[g] x, 0.75)``, ``x`` binary (80 %), 10 counties, as fixed effects."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, GROUPS, n)
    x = rng.binomial(1, 0.8, n).astype(float)
    design = np.zeros((n, 2 * GROUPS))
    design[np.arange(n), g] = 1.0
    design[np.arange(n), GROUPS + g] = x
    a = 1.5 + 0.3 * rng.normal(size=GROUPS)
    b = -0.7 + 0.2 * rng.normal(size=GROUPS)
    return NormalRegression(design, a[g] + b[g] * x + 0.75 * rng.normal(size=n))


def _posterior(model: NormalRegression) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior mean and covariance of ``(beta, log sigma)`` (``beta`` multivariate t,
    ``log sigma`` independent of it to the order that matters here)."""
    mean, sd = model.exact()
    beta = mean[:-1]
    rss = float(np.sum((model.y - model.x @ beta) ** 2))
    nu = model.n_rows - model.p - 1
    cov = np.zeros((model.dim, model.dim))
    cov[:-1, :-1] = rss / (nu - 2) * np.linalg.inv(model.x.T @ model.x)
    cov[-1, -1] = sd[-1] ** 2
    return mean, cov


def _oriented(model: NormalRegression, seed: int, counts: bool, epsilon: float = 16.0):
    """The initial scale and the oriented frame at the exact mean, as the Newton rounds build them."""
    n, d = model.n_rows, model.dim
    pld = pld_mean_budget(epsilon, 1e-5)
    s = planned_settings(AdaptationSettings(orient=True), n, d, pld)
    z = noise_multipliers(pld, s)
    theta, _ = _posterior(model)
    ledger = Ledger("replace_one")
    rng = np.random.default_rng(seed)
    initial = initial_scale_release(queries(model), theta, n, s, z["scale"], rng, ledger, "scale count",
                                    sparse_rows=True)
    frame, turned = _oriented_frame(queries(model), theta, np.diag(initial.scale), ~initial.at_floor, n, s,
                                    z["orientation"], z["direction"], rng, ledger,
                                    depending=initial.depending if counts else None,
                                    count_sd=initial.count_sd)
    return frame, turned, ledger


def _widest(frame: np.ndarray, cov: np.ndarray) -> float:
    """The frame's sd over the posterior's along the direction where it is widest (1 in the
    posterior's own frame)."""
    inv = np.linalg.inv(frame)
    return float(1.0 / math.sqrt(np.linalg.eigvalsh(inv @ cov @ inv.T).min()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_county_pair_s_turned_direction_is_scaled_among_its_own_rows(seed):
    model = _county_regression(seed)
    _, cov = _posterior(model)
    old, old_turned, old_ledger = _oriented(model, seed, counts=False)
    new, turned, ledger = _oriented(model, seed, counts=True)
    assert turned and old_turned
    # a tail of all n rows: the quantile near 0 along some county's pair, the frame decades wide
    assert _widest(old, cov) > 100.0, _widest(old, cov)
    # among the county's rows: within a few posterior sds (the narrow side is safe)
    assert _widest(new, cov) < 5.0, _widest(new, cov)
    # the same releases, at the same noise: only post-processing of released counts changed
    assert [(e.what, e.sensitivity, e.noise_multiplier) for e in ledger.entries] == \
           [(e.what, e.sensitivity, e.noise_multiplier) for e in old_ledger.entries]


def test_where_every_row_depends_on_the_ridge_the_frame_is_the_same_draw_for_draw():
    """An intercept and a slope on an uncentred predictor (every row depends on both): the counts
    change nothing."""
    rng = np.random.default_rng(4)
    n = 3000
    x = 5.0 + rng.normal(size=n)
    model = NormalRegression(np.column_stack([np.ones(n), x]), 1.0 + 0.3 * x + rng.normal(size=n))
    old, old_turned, _ = _oriented(model, 4, counts=False, epsilon=4.0)
    new, turned, _ = _oriented(model, 4, counts=True, epsilon=4.0)
    assert turned and old_turned
    assert np.array_equal(new, old)


def test_the_sparse_target_stays_below_the_rows_that_surely_depend():
    n, sd, z, k = 3000, 20.0, 5.0, 21
    default = scale_tail(n, k, z)
    depending = np.array([300.0, 240.0, 2990.0, 2985.0, 1.0])
    tail, within, rows, weighed = sparse_direction_tails(depending, sd, [np.array([0, 1]), np.array([2, 3])],
                                                         n, default, k, z)
    lower = depending[0] - DEPENDING_LOWER_SDS * sd
    assert default * n > 0.5 * lower                      # the default target is beyond the county's rows
    assert np.all(tail[:2] * n <= 0.5 * lower + 1e-9)     # now within half of those surely there
    assert np.all(within[:2] <= 0.5) and np.allclose(within[:2], tail[:2] * n / depending[0])
    # the curvature is averaged over an upper bound on the pair's rows (either member's)
    assert np.allclose(rows[:2], depending[:2].sum() + 2 * DEPENDING_LOWER_SDS * sd)
    # a dense pair and a coordinate in no turned group keep the default exactly
    assert np.all(tail[2:] == default) and np.all(within[2:] == default) and np.all(rows[2:] == n)
    assert not weighed[2:].any()
