"""A scale far above its mode under a uniform prior: ``real<lower=0, upper=100> sigma``.

``d_km ~ normal(a + b * temp, sigma)`` (600 rows, ``temp`` centred, the distances' scatter 0.002
km, no priors but the bounds) starts ``sigma`` at 50, the middle of its uniform and 4.4 decades
above its posterior.  Three parts of the search had not been made for it (docs/adaptation.md §7,
"A scale far above its mode under a uniform prior"); the oracle here is exact
(:class:`densities.UniformScaleRegression`, whose posterior is the flat-prior regression's):

* the far phase's first move of the slope, made once ``sigma`` had come down three decades, read
  the start's curvature scale (``far.first_move_variance`` now shrinks it by the growth of the
  slope's released median): the run ended 10^6 posterior sds off;
* the Newton rounds' first steps along ``sigma``'s logit coordinate were tens of e-folds
  (``newton.BOUNDED_STEP_MAX`` now caps them as a log coordinate's), and every step-back returned
  to the frame of the step it took back, too wide by 10^2 along the coefficients
  (``newton.STEP_BACK_KEEPS_FRAME``): the rounds alternated to the end, hundreds of sds off.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import stan_dp
from stan_dp.adaptation import far, newton
from densities import UniformScaleRegression

N = 600


def _km(seed: int = 0) -> tuple[UniformScaleRegression, np.ndarray, np.ndarray]:
    """The model, and the exact posterior means and sds of ``(a, b, log sigma)``."""
    rng = np.random.default_rng(seed)
    temp = rng.normal(14.0, 7.0, N) - 14.0
    d_km = 1.2555 + 0.0005 * temp + rng.normal(0.0, 0.002, N)
    model = UniformScaleRegression(np.column_stack([np.ones(N), temp]), d_km)
    mean, sd = model.exact()
    return model, mean, sd


def _error(model, mean, sd, epsilon: float, seed: int) -> tuple[float, bool]:
    """The fit's worst |mean error| over ``(a, b, log sigma)`` in posterior sds, and whether it
    raised a UtilityWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=epsilon, delta=1e-5, seed=seed, progress=False, draws=200)
    est = np.r_[fit.posterior["beta"].values.reshape(-1, 2).mean(0),
                np.log(fit.posterior["sigma"].values).mean()]
    warned = any(issubclass(w.category, stan_dp.UtilityWarning) for w in caught)
    return float(np.max(np.abs(est - mean) / sd)), warned


def test_a_late_first_move_is_at_most_the_newton_step_where_it_is_made():
    """The exact curvature along the slope and the rows' median ``|g|`` (no noise) at the start
    (``a = b = 0``, ``sigma = 50``) and where the slope first moved (``a`` at its mode, ``sigma``
    0.055, from the trace of epsilon = 4, seed 1): the first move's scale ``a_j^2`` must not
    exceed the inverse curvature there, which the start's scale does by 10^5."""
    model, mean, _ = _km()
    x = model.x[:, 1]

    def curvature_and_median(a: float, sigma: float) -> tuple[float, float]:
        r = model.y - a
        return float(np.sum(x * x) / sigma**2), float(np.median(np.abs(r * x) / sigma**2))

    c0, b0 = curvature_and_median(0.0, 50.0)
    c1, b1 = curvature_and_median(mean[0], 0.055)
    start_var = np.array([1.0 / c0])
    shrunk = far.first_move_variance(np.sqrt(start_var), np.array([b0]), np.array([b1]))
    assert shrunk[0] <= 1.0 / c1 < start_var[0] / 1e5
    assert shrunk[0] == pytest.approx(start_var[0] * (b0 / b1) ** 2, rel=1e-12)
    # where the median fell the start's scale stays, and nothing non-finite comes out
    same = far.first_move_variance(np.array([2.0, 3.0]), np.array([1.0, 0.0]), np.array([0.5, 0.0]))
    np.testing.assert_array_equal(same, [4.0, 9.0])
    np.testing.assert_array_equal(far.first_move_variance(np.array([2.0]), np.array([0.0]),
                                                          np.array([np.inf])), [0.0])


def test_the_slope_no_longer_leaves_by_a_million_sds(monkeypatch):
    """epsilon = 4, seed 1: the slope's first move comes in the far phase's last round.  With the
    start's scale it ended more than 10^4 posterior sds off (1.2e6 measured); now within 10.
    Both runs warn (epsilon = 4 at 600 rows cannot promise 0.5 sds)."""
    model, mean, sd = _km()
    error, warned = _error(model, mean, sd, 4.0, 1)
    assert error < 10.0 and warned
    monkeypatch.setattr(far, "first_move_variance", lambda local_sd, start, now: np.asarray(local_sd) ** 2)
    error, warned = _error(model, mean, sd, 4.0, 1)
    assert error > 1e4 and warned


def test_the_rounds_settle_from_a_uniform_scale_at_its_middle(monkeypatch):
    """epsilon = 16, noise seeds 1-8: every run within 2.5 posterior sds of the exact posterior
    (the largest of 48 measured was 1.7), and every run beyond 0.5 warns.  Without the logit cap
    and with step-backs to the old frame, at least two of the eight end more than 10 sds off
    (143, 80 and 363 measured, unsettled)."""
    model, mean, sd = _km()
    runs = [_error(model, mean, sd, 16.0, seed) for seed in range(1, 9)]
    assert max(e for e, _ in runs) < 2.5
    assert all(warned for e, warned in runs if e > 0.5)
    monkeypatch.setattr(newton, "BOUNDED_STEP_MAX", math.inf)
    monkeypatch.setattr(newton, "STEP_BACK_KEEPS_FRAME", False)
    before = [_error(model, mean, sd, 16.0, seed) for seed in range(1, 9)]
    assert sum(e > 10.0 for e, _ in before) >= 2
    assert all(warned for e, warned in before if e > 0.5)
