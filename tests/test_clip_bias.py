"""Clipping bias near the mode and the adaptive gradient bound (``AdaptationSettings.adaptive_clip``).

A logistic regression with strong coefficients (1.5, -1, 0.3; intercept 0.5)
has rows whose outcome is surprising and whose whitened gradients lie far
beyond the typical ones; clipped at the rule's bound, their excesses align
and move the mode by more than the released noise says, so runs missed 0.5 sd
without a warning.  Checked against the exact posterior (NumPy, Laplace at
the exact mode): the bias itself without noise, the calibration of the
released noise with and without the adaptive bound, the accounting, and that
``stan_dp.sample`` turns it on exactly where its forecast does not warn.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import stan_dp
from stan_dp.adaptation import newton
from stan_dp.adaptation.plan import (AdaptationSettings, BIAS_PER_CLIPPED_ROW, BIAS_SHARE,
                                     adaptation_releases, allowed_clipped_rows, clip_inflation,
                                     planned_settings)
from stan_dp.adaptation.result import AdaptationResult, BIAS_PER_CLIPPED_ROW_HIGH
from stan_dp.adaptation.forecast import pld_mean_budget, whitened_grad_scale
from stan_dp.adaptation.releases import Ledger, noisy_counts
from test_auto import Logistic

N = 10_000


def _strong(seed: int, n: int = N) -> Logistic:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.5 + x @ np.array([1.5, -1.0, 0.3])))))
    return Logistic(x, y)


def _clipped_root_shift(model: Logistic, kappa: float) -> tuple[float, int]:
    """Worst-coordinate shift (posterior sds) of the root of the score clipped at ``kappa C_w`` in
    the exact posterior frame, to first order, and the number of clipped rows (no noise)."""
    mode, cov = model.exact()
    lam, q = np.linalg.eigh(cov)
    root = (q * np.sqrt(lam)) @ q.T
    _, g = model.row_log_lik_grad(mode)
    whitened = g @ root
    bound = kappa * whitened_grad_scale(model.n_rows, model.dim)
    norms = np.linalg.norm(whitened, axis=1)
    excess = whitened * np.maximum(0.0, 1.0 - bound / norms)[:, None]
    shift = root @ (-excess.sum(axis=0))          # the curvature is the identity in this frame
    return float(np.max(np.abs(shift) / np.sqrt(np.diag(cov)))), int(np.sum(norms > bound))


def test_strong_signal_rows_bias_the_clipped_root_beyond_the_released_noise():
    # the oracle behind the adaptive bound: at the rule's kappa the clipped rows move the root by
    # a sizeable share of what the whole budget's noise is (0.2 sd here); a wider bound removes it
    model = _strong(0)
    kappa = clip_inflation(AdaptationSettings(), N, pld_mean_budget(4.0, 1e-5))
    shift, clipped = _clipped_root_shift(model, kappa)
    assert 0.15 < shift < 0.5 and clipped > 20, (shift, clipped)
    wider, fewer = _clipped_root_shift(model, 1.69 * kappa)
    assert wider < shift / 3 and fewer < clipped / 3, (wider, fewer)


def _private_mode(model: Logistic, seed: int, adaptive: bool, **settings: Any) -> AdaptationResult:
    """The private search at epsilon = 4 (``settings``: further ``AdaptationSettings`` fields)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return newton.private_mode(model, n_public=model.n_rows, pld_mean=pld_mean_budget(4.0, 1e-5),
                                   relation="replace_one", rng_noise=np.random.default_rng(seed),
                                   init=np.zeros(model.dim),
                                   settings=AdaptationSettings(adaptive_clip=adaptive, **settings))


def _z_scores(adaptive: bool, seeds: range) -> tuple[np.ndarray, list[float]]:
    z, raised = [], []
    for seed in seeds:
        model = _strong(seed)
        mode, _ = model.exact()
        result = _private_mode(model, seed + 2000, adaptive)
        assert result.settled
        z.extend((result.mode - mode) / np.sqrt(np.diag(result.noise_covariance)))
        raised.append(result.clip_adjust)
    return np.array(z), raised


def test_the_adaptive_bound_makes_the_released_noise_cover_the_error():
    """24 seeds x 4 coordinates: the error over the claimed noise sd should be N(0, 1).  At the
    rule's bound its rms is 1.35 (mean +0.24: the bias); with the adaptive bound 0.89 (the rms
    of 96 standard normals is within 1 +- 0.15 with probability > 0.99)."""
    plain, raised_plain = _z_scores(False, range(24))
    adaptive, raised = _z_scores(True, range(24))
    assert set(raised_plain) == {1.0}
    assert np.sqrt(np.mean(plain**2)) > 1.2, np.sqrt(np.mean(plain**2))
    assert np.sqrt(np.mean(adaptive**2)) < 1.15, np.sqrt(np.mean(adaptive**2))
    assert np.median(raised) > 1.0                  # the released counts did raise the bound


def test_adaptive_bound_keeps_the_plan_and_the_count_sensitivity():
    model = _strong(1, 2000)
    settings = AdaptationSettings(adaptive_clip=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=2.0, delta=1e-6, seed=5, draws=20, settings=settings)
        plain = stan_dp.sample(model, epsilon=2.0, delta=1e-6, seed=5, draws=20,
                               settings=AdaptationSettings(adaptive_clip=False))
    plan = adaptation_releases(
        1.0, planned_settings(settings, 2000, model.dim, pld_mean_budget(2.0, 1e-6)), 2000, model.dim)
    assert fit.attrs["releases"] == plain.attrs["releases"] == sum(r.count for r in plan)
    assert fit.attrs["epsilon_spent"] == plain.attrs["epsilon_spent"] <= 2.0
    # the near rounds' 7 count releases are split 3 tail + 1 curvature tail + 3 clipped, at the clip
    # counts' multiplier
    assert fit.attrs["search_settled"]
    kinds = {part.split(": ")[0]: part.split(": ")[1] for part in fit.attrs["release_summary"].split("; ")}
    tail, clipped = int(kinds["tail count"].split(" x ")[0]), int(kinds["clipped count"].split(" x ")[0])
    curvature = int(kinds["curvature tail count"].split(" x ")[0])
    assert tail == clipped == 3 * curvature > 0
    assert kinds["clipped count"].split(" x ")[1] == kinds["tail count"].split(" x ")[1] \
        == kinds["curvature tail count"].split(" x ")[1] == kinds["clip count"].split(" x ")[1]
    # the same split without adaptive_clip: the count is made (it gives the reported bias), only
    # the raising is off
    assert plain.attrs["release_summary"] == fit.attrs["release_summary"]
    # one threshold per release: a row moves the count by at most one (sensitivity 1)
    ledger = Ledger("replace_one")
    noisy_counts(np.random.default_rng(0), np.ones((10, 1)), np.array([0.5]), 3.0, ledger, "clipped count",
                 repeats=3)
    assert [e.sensitivity for e in ledger.entries] == [1.0, 1.0, 1.0]


def test_without_adaptive_clip_the_clipped_rows_are_counted_and_steer_nothing(monkeypatch):
    """The count of rows beyond the bound is made in every run (it gives the reported clipping
    bias); without ``adaptive_clip`` its values reach nothing but that report.  Oracle: a run whose
    clipped counts are replaced by a million ends at the same mode, bit for bit, with the bound
    not raised; with ``adaptive_clip`` the same replacement raises the bound to its cap (the
    check can fail)."""
    model = _strong(0)
    plain = _private_mode(model, 7, adaptive=False)
    real = newton.noisy_counts

    def inflated(rng, values, thresholds, z, ledger, what, repeats=None):
        out = real(rng, values, thresholds, z, ledger, what, repeats=repeats)
        return out + 1e6 if what.startswith("clipped count") else out

    monkeypatch.setattr(newton, "noisy_counts", inflated)
    forged = _private_mode(model, 7, adaptive=False)
    np.testing.assert_array_equal(forged.mode, plain.mode)
    np.testing.assert_array_equal(forged.noise_covariance, plain.noise_covariance)
    assert forged.clip_adjust == plain.clip_adjust == 1.0
    assert forged.clipped_rows > 1e5 > plain.clipped_rows        # only the report saw it
    assert _private_mode(model, 7, adaptive=True).clip_adjust > 3.0


def test_without_adaptive_clip_the_reported_bias_counts_the_rows_beyond_the_bound():
    """At the rule's bound (not raised) the strong-signal regression clips 20-odd rows at its exact
    mode and frame; the released count (mean of the counts made near the mode, each with the clip
    counts' noise) agrees with that within 4 of its noise sds plus a third (the rounds' points and
    frames are near, not at, the exact ones); its reported noise sd is the ledger's (the clipped
    counts' sd over their number), and the reported bias is ``BIAS_PER_CLIPPED_ROW_HIGH`` x count x
    bound."""
    model = _strong(0)
    result = _private_mode(model, 11, adaptive=False)
    assert result.settled and result.clip_adjust == 1.0
    kappa = clip_inflation(AdaptationSettings(), N, pld_mean_budget(4.0, 1e-5))
    assert result.grad_clip == pytest.approx(kappa * whitened_grad_scale(N, model.dim))
    _, truth = _clipped_root_shift(model, kappa)
    counts = [e for e in result.ledger.entries if e.what.startswith("clipped count")]
    sd = counts[0].noise_sd / np.sqrt(len(counts))
    assert truth > 20
    assert abs(result.clipped_rows - truth) < 4 * sd + truth / 3, (result.clipped_rows, truth, sd)
    assert result.clipped_rows_sd == pytest.approx(sd)
    assert result.clipping_bias_bound == pytest.approx(
        BIAS_PER_CLIPPED_ROW_HIGH * result.clipped_rows * result.grad_clip)


@pytest.mark.parametrize("n, epsilon, expected", [(N, 4.0, True), (N, 1.0, False)])
def test_sample_turns_it_on_exactly_where_the_forecast_does_not_warn(n, epsilon, expected):
    model = _strong(2, n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=epsilon, delta=1e-5, seed=3, draws=20)
    forecast_warned = any("forecast" in str(w.message) for w in caught)
    assert forecast_warned is not expected
    # on: the released counts raised the bound here (strong signal); off: never raised
    assert (fit.attrs["grad_clip_raised"] > 1.0) is expected
    # either way the clipped rows were counted and their bias reported; off, the warning names the
    # switch that raises the bound
    assert fit.attrs["clipping_bias_bound"] > 0.0
    hint = "AdaptationSettings(adaptive_clip=True)" in fit.attrs["warnings"]
    assert hint is (not expected and fit.attrs["noise_exceed_probability"] > 0.1)


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_the_tail_term_enters_the_reported_bias_exactly_where_the_bound_is_not_adaptive(epsilon, search_result):
    """Where the forecast warns (epsilon 1 here) the bound is not adaptive and the reported bias adds
    the bound for each row beyond twice it (one count-noise sd below the released count); where it
    does not (epsilon 4), the count-calibrated figure alone.  Oracle: the formula from the result's
    released fields.  Data: the Poisson GLM with standardised log-normal predictors of
    ``test_auto`` (10-23 rows beyond twice the bound at the exact mode, many more at the private
    mode they pull), so that the tail term is not zero."""
    from test_auto import PoissonGLM

    rng = np.random.default_rng(0)
    z = (rng.lognormal(0.0, 1.0, size=(N, 5)) - np.exp(0.5)) / np.sqrt((np.e - 1) * np.e)
    model = PoissonGLM(z, rng.poisson(np.exp(1.0 + 0.3 * (z @ np.linspace(-0.8, 0.8, 5)))))

    captured = search_result
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=epsilon, delta=1e-5, seed=3, draws=20)
    result = captured["result"]
    tail = (max(result.tail_rows - result.tail_rows_sd, 0.0) * result.grad_clip
            if result.clip_adjust == 1.0 else 0.0)
    assert result.tail_bias_bound == pytest.approx(tail)
    adaptive = bool(fit.attrs["adaptive_clip"])
    assert adaptive is (epsilon == 4.0)
    expected = result.clipping_bias_bound + (0.0 if adaptive else tail)
    assert fit.attrs["clipping_bias_bound"] == pytest.approx(expected)
    if not adaptive:
        assert tail > 0.0 and fit.attrs["clipping_bias_bound"] > result.clipping_bias_bound


def test_allowed_clipped_rows_is_the_bias_noise_balance():
    # beta k z / (rho sqrt(m)), public; the bound itself cancels
    z, rounds = 7.4, 30
    for relation, k in (("replace_one", 2.0), ("add_remove", 1.0)):
        expected = BIAS_SHARE * k * z / (BIAS_PER_CLIPPED_ROW * np.sqrt(rounds))
        assert allowed_clipped_rows(z, rounds, relation) == pytest.approx(expected)


def test_no_raise_after_the_last_round(monkeypatch):
    """A raise changes the bound of the rounds after it; after the last there are none, and the
    report must name the bound the last counts were made at.  A raise there left the count NaN
    (the rounds' counts are reset at a raise) and the warning without its clipping bias: 8 of
    1,344 paired battery runs (``adaptation_trace.py``, 56 cells, 500-10^4 rows, epsilon 1-16) reported 0
    where the counts made at the bound actually used give 0.47-1.86 sds.  Oracle: with every
    clipped count forged high, the bound rises at every near round but the last, and the report
    names the last count's bound with a finite count."""
    model = _strong(0)
    real = newton.noisy_counts
    thresholds: list[float] = []

    def inflated(rng, values, t, z, ledger, what, repeats=None):
        out = real(rng, values, t, z, ledger, what, repeats=repeats)
        if not what.startswith("clipped count"):
            return out
        thresholds.append(float(t[0]))
        return out + 1e6

    monkeypatch.setattr(newton, "noisy_counts", inflated)
    result = _private_mode(model, 7, adaptive=True, rounds=8)
    assert len(thresholds) >= 2 and thresholds[-1] > thresholds[0]       # it did raise
    assert result.clip_adjust == pytest.approx(thresholds[-1])           # not after the last
    assert np.isfinite(result.clipped_rows) and result.clipped_rows > 1e5
    assert result.clipping_bias_bound > 0.0
