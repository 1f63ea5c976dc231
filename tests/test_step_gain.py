"""The Newton rounds' cap on a step's first-order gain (``AdaptationSettings.step_gain``).

A Newton round's step along eigen-direction ``q_k`` of the released
curvature, ``du_k = (q_kᵀ g) / lam_k``, raises the summed log-likelihood by
``(q_kᵀ g)^2 / lam_k`` to first order.  Where the initial frame is wrong by
decades and the release cannot resolve the curvature, that step is decades
too long: a binary predictor whose count of depending rows the initial
scale cannot resolve gets scale 1 (about 20 times too wide at n = 1e3),
and the search's steps then run sigma out of range.
Flooring ``lam_k`` at ``(q_kᵀ g)^2 / (step_gain n)`` caps the gain at
``step_gain`` nats per row (growing 4-fold after every step not taken back).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

import stan_dp
from stan_dp.adaptation import AdaptationSettings, initial_frame
from stan_dp.adaptation.curvature import _gain_floor
from densities import LogisticRegression, NormalRegression


def test_the_gain_floor_caps_every_direction_and_leaves_the_others_alone():
    rng = np.random.default_rng(3)
    d = 6
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    lam = np.exp(rng.normal(size=d))
    g = rng.normal(size=d) * np.array([1, 1, 30, 1, 100, 1])
    gain = 50.0
    floored, capped = _gain_floor(lam, q, g, gain)
    # independent computation: the gain of the step along each direction
    gains_before = np.array([(q[:, k] @ g) ** 2 / lam[k] for k in range(d)])
    gains_after = np.array([(q[:, k] @ g) ** 2 / floored[k] for k in range(d)])
    assert capped == bool(np.any(gains_before > gain))
    assert np.all(gains_after <= gain * (1 + 1e-12))
    np.testing.assert_array_equal(floored[gains_before <= gain], lam[gains_before <= gain])
    np.testing.assert_allclose(gains_after[gains_before > gain], gain, rtol=1e-12)
    # a gradient with non-finite entries floors nothing where it is not finite
    bad = g.copy()
    bad[:] = np.nan
    np.testing.assert_array_equal(_gain_floor(lam, np.eye(d), bad, gain)[0], lam)


def _earnings_like(n: int, seed: int) -> NormalRegression:
    """log earnings on height in inches (around 66) and ``male`` (40 %): flat priors."""
    rng = np.random.default_rng(seed)
    male = rng.binomial(1, 0.4, n).astype(float)
    height = np.round(64 + 5 * male + rng.normal(0, 3, n))
    y = 5.8 + 0.06 * height + 0.42 * male + rng.normal(0, 0.88, n)
    return NormalRegression(np.column_stack([np.ones(n), height, male]), y)


def _fit(model, eps, seed, **settings):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return stan_dp.sample(model, epsilon=eps, delta=1e-5, seed=seed, progress=False, chains=1,
                              draws=200, settings=AdaptationSettings(**settings))


def test_a_rare_binary_predictor_no_longer_sends_sigma_out_of_range(monkeypatch):
    # n = 1000, epsilon = 1 at the initial scale's former share (0.05): the count noise forces its
    # tail to 0.5, and the count of the rows that depend on ``male`` is often unresolved (its scale
    # is then 1, ~20 times too wide; tests/test_initial_scale.py).  The cap is the backstop for such
    # a frame, so the test keeps that share.  Over 32 seeds without the cap sigma ended outside
    # 0.5-2 times its posterior mean in 3 runs and 5 runs ended beyond 1e3 posterior sds (up to
    # 2e4); with it sigma stayed within that range (on another machine, the code unchanged, one run
    # ended at 0.486) and no run went beyond 1e3 (median worst error 19 -> 17).  With the planned
    # share (0.10 here) the frames are mostly right: 3 and 1 runs with sigma out of range, 1 and 0
    # beyond 1e3 (median 14 -> 12).  The far phase is left out, as it was here before
    # planned_far_share raised its share for such a cell (0.19): it brings sigma in first, so that
    # without the cap no run went out of range.  So is the cap on the initial scale of a coordinate
    # at the floor (initial_frame._held_to_widest_measured), which keeps ``male`` from scale 1, and
    # the final check (check_share=0: the plan as measured; the check is another backstop), and so
    # is the skew check (skew_share=0: its 0.5 % of the budget moves every noise draw's scale, and
    # with it 3 of these 32 runs' sigma out of range, 0.26-2.02 times its mean, against 1 before),
    # and so is the first Newton step's trust region (first_radius, session 56: measured with it at
    # 10, no run's sigma left the range, with the cap or without).
    monkeypatch.setattr(initial_frame, "_held_to_widest_measured", lambda scale, at_floor, measured: scale)
    sigma_ratio, worst = {}, {}
    for gain in (math.inf, 100.0):
        ratios, errors = [], []
        for seed in range(32):
            model = _earnings_like(1000, seed)
            mean, sd = model.exact()
            fit = _fit(model, 1.0, seed, step_gain=gain, quantile_share=0.05, far_rounds=0, check_share=0.0,
                       skew_share=0.0, first_radius=math.inf)
            est = np.r_[fit.posterior["beta"].values.reshape(-1, 3).mean(axis=0),
                        fit.posterior["log_sigma"].values.mean()]
            with np.errstate(over="ignore"):
                ratios.append(float(np.exp(est[-1] - mean[-1])))
            errors.append(float(np.max(np.abs(est - mean) / sd)))
            assert fit.attrs["warnings"]   # n = 1e3, epsilon = 1: the forecast warns, always
        sigma_ratio[gain], worst[gain] = np.array(ratios), np.array(errors)
    out = {g: int(np.sum((r < 0.5) | (r > 2.0))) for g, r in sigma_ratio.items()}
    # with the cap at most one run, and only just (0.486 on one machine), against 3 without it
    assert out[100.0] <= 1 and out[math.inf] >= out[100.0] + 2, (out, sigma_ratio[100.0])
    assert np.all((sigma_ratio[100.0] > 0.4) & (sigma_ratio[100.0] < 2.5)), sigma_ratio[100.0]
    assert np.sum(worst[math.inf] > 1e3) >= 4
    assert np.sum(worst[100.0] > 1e3) <= 1, worst[100.0]


def test_the_cap_is_inert_where_the_start_is_within_reach():
    # a GLM started at 0 gains ~1 nat per row on its way to the mode: far below the cap,
    # so the run is the same draw for draw
    rng = np.random.default_rng(0)
    n, d = 3000, 4
    x = rng.normal(size=(n, d))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.3 + x @ np.linspace(-0.8, 0.8, d)))))
    model = LogisticRegression(x, y)
    default = _fit(model, 2.0, 5)
    uncapped = _fit(model, 2.0, 5, step_gain=math.inf)
    np.testing.assert_array_equal(default.posterior["beta"].values, uncapped.posterior["beta"].values)
