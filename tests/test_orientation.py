"""The orientation step of the private mode search (on by default: ``AdaptationSettings.orient``).

An intercept and a slope on a predictor in metres around 5 km (sd 1 km) form a
ridge whose curvature, in the diagonal frame of the initial scale, is 2 % of
its coordinates' own: the rounds' curvature releases cannot resolve it at
small budgets.  :func:`stan_dp.adaptation.initial_frame._oriented_frame` finds its
direction from one release of the rows' curvatures normalised to unit
Frobenius norm, and its scale from private quantiles along it.  Checked here
against the exact posterior (NumPy logistic regression, Laplace at the exact
mode): the mechanism and its accounting, the frame it builds, and the fit.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

import stan_dp
from stan_dp.adaptation import initial_frame, newton
from stan_dp.adaptation.curvature import _orientation_rows
from stan_dp.adaptation import plan as plan_module
from stan_dp.adaptation.plan import (AdaptationSettings, DIRECTION_GAP_SDS, DIRECTION_SHARE_MAX, HESSIAN_SHARE,
                                     ORIENT_NOISE_TARGET, QUANTILE_SHARE, adaptation_releases, noise_multipliers,
                                     orientation_detection_forecast, orientation_noise_forecast, planned_settings,
                                     round_count)
from stan_dp.adaptation.forecast import pld_mean_budget
from stan_dp.adaptation.releases import Ledger
from stan_dp.aggregates import queries
from densities import NormalRegression
from test_auto import Logistic

ORIENT = AdaptationSettings(orient=True)    # forced (the default decides from public facts)
PLAIN = AdaptationSettings(orient=False)


def _glm(n: int, seed: int, unstandardised: bool) -> Logistic:
    """The utility benchmark's logistic regression (D = 10); column 0 in metres, 1 in thousands."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 10))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.3 + z @ np.linspace(-0.8, 0.8, 10)))))
    x = z.copy()
    if unstandardised:
        x[:, 0] = 5000.0 + 1000.0 * z[:, 0]
        x[:, 1] = 1000.0 * z[:, 1]
    return Logistic(x, y)


def _diagonal_frame(model: Logistic) -> np.ndarray:
    """The ideal diagonal frame: conditional posterior sds at the exact mode."""
    _, cov = model.exact()
    return np.diag(1.0 / np.sqrt(np.diag(np.linalg.inv(cov))))


def _orient(model: Logistic, frame: np.ndarray, relation: str = "replace_one", seed: int = 0):
    settings = ORIENT._replace(rounds=10, hessian_share=HESSIAN_SHARE, far_rounds=0,
                               quantile_share=QUANTILE_SHARE)
    z = noise_multipliers(pld_mean_budget(1.0, 1e-5), settings)
    ledger = Ledger(relation)
    out, turned = initial_frame._oriented_frame(queries(model), np.zeros(model.dim), frame,
                                         np.ones(model.dim, dtype=bool), model.n_rows, settings,
                                         z["orientation"], z["direction"], np.random.default_rng(seed),
                                         ledger)
    return out, turned, ledger, z


def _condition(model: Logistic, frame: np.ndarray) -> float:
    """Condition number of the exact posterior precision in the frame (1 in the posterior's own)."""
    _, cov = model.exact()
    lam = np.linalg.eigvalsh(frame.T @ np.linalg.inv(cov) @ frame)
    return float(lam[-1] / lam[0])


def test_orientation_rows_are_normalised_and_the_releases_have_the_stated_sensitivities():
    model = _glm(2000, 0, True)
    frame = _diagonal_frame(model)
    rows = _orientation_rows(model, np.zeros(model.dim), frame, 1e-3)
    norms = np.linalg.norm(rows, axis=1)
    assert np.allclose(norms, 1.0)                       # every row weighs the same
    mats = rows.reshape(-1, model.dim, model.dim)
    assert np.allclose(mats, np.transpose(mats, (0, 2, 1)))
    for relation, k in (("replace_one", 2.0), ("add_remove", 1.0)):
        _, _, ledger, z = _orient(model, frame, relation)
        first, counts = ledger.entries[0], ledger.entries[1:]
        assert first.what == "orientation sum"
        assert first.sensitivity == k and first.noise_multiplier == z["orientation"]
        assert len(counts) == ORIENT.quantile_rounds
        assert all(e.what.startswith("direction count") for e in counts)
        # one count per direction: a row moves each by at most 1
        assert all(math.isclose(e.sensitivity, math.sqrt(model.dim)) for e in counts)
        assert all(e.noise_multiplier == z["direction"] for e in counts)


def test_the_plan_lists_the_orientation_releases_and_they_fit_the_budget():
    model = _glm(2000, 1, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=2.0, delta=1e-6, seed=5, draws=20, settings=ORIENT)
    settings = planned_settings(ORIENT, 2000, model.dim, pld_mean_budget(2.0, 1e-6))
    plan = adaptation_releases(1.0, settings, 2000, model.dim)
    assert fit.attrs["releases"] == sum(r.count for r in plan)
    assert "orientation sum: 1 x" in fit.attrs["release_summary"]
    assert f"direction count: {ORIENT.quantile_rounds} x" in fit.attrs["release_summary"]
    assert fit.attrs["epsilon_spent"] <= 2.0
    # without orient the plan has neither
    plain = adaptation_releases(1.0, PLAIN._replace(rounds=settings.rounds, check_share=settings.check_share),
                                2000, model.dim)
    assert sum(r.count for r in plain) == sum(r.count for r in plan) - 1 - ORIENT.quantile_rounds


@pytest.mark.parametrize("seed", [0, 1])
def test_the_oriented_frame_resolves_the_intercept_slope_ridge(seed):
    model = _glm(10_000, seed, True)
    frame = _diagonal_frame(model)
    oriented, turned, _, _ = _orient(model, frame, seed=seed)
    assert turned
    # the best diagonal frame: the ridge at ~2 % of the diagonal (condition ~ 150)
    assert _condition(model, frame) > 50
    # oriented (epsilon = 1 shares): within a factor ~6 of the posterior's own frame
    assert _condition(model, oriented) < 10, _condition(model, oriented)
    # only the intercept and the metres slope form the ridge: every other coordinate keeps its
    # axis and its initial scale exactly (thresholded R; no arbitrary basis of the repeated 1)
    assert np.array_equal(oriented[:, 2:], frame[:, 2:])
    assert not np.allclose(oriented[:, :2], frame[:, :2])


def test_standardised_predictors_keep_the_axes():
    # no ridge: the released matrix has no eigenvalue beyond noise below the threshold, and the
    # initial frame is kept as it is (the directional quantiles are released all the same)
    model = _glm(10_000, 2, False)
    frame = _diagonal_frame(model)
    out, turned, ledger, _ = _orient(model, frame)
    assert not turned
    assert np.array_equal(out, frame)
    assert sum(e.what.startswith("direction count") for e in ledger.entries) == ORIENT.quantile_rounds


def _worst_error(model, epsilon: float, noise_seed: int, settings: AdaptationSettings,
                 draws: int = 200):
    """Worst |posterior mean - exact mode| in exact posterior sds of one fit, and its attrs."""
    mode, cov = model.exact()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=epsilon, delta=1e-5, seed=noise_seed, draws=draws,
                             chains=1, settings=settings)
    mean = fit.posterior["b"].mean(("chain", "draw")).values
    return float(np.max(np.abs(mean - mode) / np.sqrt(np.diag(cov)))), fit.attrs


@pytest.mark.parametrize("n, epsilon, seed", [(10_000, 1.0, 0), (10_000, 1.0, 1), (1000, 4.0, 0),
                                               (1000, 4.0, 1)])
def test_orient_takes_the_ridge_case_near_the_standardised_accuracy(n, epsilon, seed):
    """Without the orientation the search creeps along the ridge: n = 1e4, epsilon = 1, median
    15.5 posterior sds over 24 seeds, unsettled; the default orients (public gate, full shares)
    and gets 2.4 (standardised data: 1.9-2.0).  n = 1e3, epsilon = 4 (24 seeds against the exact
    mode): 8.5 unoriented, 1.5 oriented (standardised: 1.55-1.75); there the spectral norm of the
    release's noise in ``R`` (1.3-2.4) swamps it, and only the thresholded entries show the ridge
    (:mod:`stan_dp.adaptation.ridge`)."""
    model = _glm(n, seed, True)
    plain = _worst_error(model, epsilon, seed + 100, PLAIN, draws=400)
    oriented = _worst_error(model, epsilon, seed + 100, AdaptationSettings(), draws=400)   # default
    assert oriented[1]["frame_turned"] and not plain[1]["frame_turned"]
    if n == 10_000:
        assert oriented[1]["search_settled"]
    assert oriented[0] < 4.5, oriented[0]
    assert plain[0] > 2.0 * oriented[0], (plain[0], oriented[0])
    assert oriented[1]["warnings"]              # neither budget can buy 0.5 sd here: it says so


def _poisson(n: int, seed: int, unstandardised: bool = True):
    """The utility benchmark's Poisson GLM (D = 5); unstandardised: column 0 in metres, 1 in
    thousands."""
    from test_auto import PoissonGLM
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 5))
    y = rng.poisson(np.exp(1.0 + 0.3 * (z @ np.linspace(-0.8, 0.8, 5))))
    x = z.copy()
    if unstandardised:
        x[:, 0] = 5000.0 + 1000.0 * z[:, 0]
        x[:, 1] = 1000.0 * z[:, 1]
    return PoissonGLM(x, y)


@pytest.mark.parametrize("seed", [0, 3])
def test_a_noisy_release_of_a_strong_ridge_turns_the_frame(seed, monkeypatch):
    """A Poisson GLM in metres at n = 1e3, epsilon = 1 (forecast 0.59: oriented by default).
    The intercept-metres entry of ``R`` is 0.98 without noise; in these seeds' releases it came
    out at 0.52 and 0.64 (a diagonal high by noise shrinks it), an eigenvalue of 0.48 and 0.36,
    above ``RIDGE_EIGENVALUE`` = 0.25 but within the pair's noise of it, and beyond that noise
    below 1.  Held to 0.25 these runs kept the diagonal frame and ended 16 and 17 posterior sds
    off (against the exact mode); turned, 5.3 and 7.8 (24 seeds: median 17.1 -> 6.2; the
    standardised twin 4.0-5.5).  Checked: the spy sees the released eigenvalue above 0.25, the
    frame turns, and the fit is within half the unoriented one's error."""
    seen = []
    real = initial_frame.thresholded_ridges

    def spy(r, entry_sd):
        out = real(r, entry_sd)
        seen.extend((float(out.eigenvalues[g].min()), float(out.noise_norm[g[0]])) for g in out.groups)
        return out

    monkeypatch.setattr(initial_frame, "thresholded_ridges", spy)
    model = _poisson(1000, seed)
    errors = {name: _worst_error(model, 1.0, seed + 500, settings)
              for name, settings in (("plain", PLAIN), ("default", AdaptationSettings()))}
    assert len(seen) == 1                              # one group: the intercept and metres
    lam, noise = seen[0]
    tau_g = initial_frame.NOISE_SPECTRAL_FACTOR * noise
    assert initial_frame.RIDGE_EIGENVALUE < lam < initial_frame.RIDGE_EIGENVALUE + tau_g, (lam, tau_g)
    assert errors["default"][1]["frame_turned"] and not errors["plain"][1]["frame_turned"]
    assert errors["default"][0] < 0.5 * errors["plain"][0], (errors["default"][0], errors["plain"][0])


def test_at_a_small_budget_metres_cost_little_more_than_standardised_predictors():
    """The private scale's claim at n = 1e3, epsilon = 1 (the Poisson GLM, oriented by default):
    median worst error over 12 seeds against the exact posterior, metres 6.9 and standardised
    4.5 (ratio 1.5; 24 seeds: 6.2 and 4.0); unoriented, metres 17.1 (ratio 3.8), the README
    table's 15-24 before.  Neither meets its target of about 2.6 at this budget, and both warn."""
    default = AdaptationSettings()
    median = {}
    for unstandardised in (False, True):
        errors = [_worst_error(_poisson(1000, seed, unstandardised), 1.0, seed + 500, default)[0]
                  for seed in range(12)]
        median[unstandardised] = float(np.median(errors))
    assert median[True] < 2.0 * median[False], median


def test_the_default_orients_only_where_the_public_forecast_resolves_the_release():
    """``orient=None``: on where the Bonferroni threshold times the forecast noise sd of an entry
    of ``R`` is below 0.75 (a ridge's entry at 0.95 or more is then kept).  Recomputed from the
    plan's own noise multiplier: entry sd ``(2 z / sqrt 2) d / n``, threshold
    ``Phi^-1(1 - 0.05 / (d (d - 1)))``.  Off at n = 1e3, D = 10, epsilon = 1 (1.22), at n = 600,
    D = 5, epsilon = 1 (0.98) and at n = 434, epsilon = 4 (0.81); on at n = 1e3, D = 10,
    epsilon = 4 (0.35: the ridge cell the spectral gate used to leave at 8-10 sds) and at n = 1e3,
    D = 5, epsilon = 1 (0.59) and n = 800 (0.74)."""
    default = AdaptationSettings()
    assert default.orient is None
    for n, dim, eps, on in ((10_000, 11, 1.0, True), (1000, 6, 4.0, True), (1000, 11, 4.0, True),
                            (1000, 6, 1.0, True), (800, 6, 1.0, True), (600, 6, 1.0, False),
                            (100_000, 11, 1.0, True), (1000, 11, 1.0, False), (434, 11, 4.0, False)):
        m = pld_mean_budget(eps, 1e-5)
        planned = planned_settings(default, n, dim, m)
        unplanned = default._replace(orient=True, rounds=1, hessian_share=0.25, far_rounds=0, quantile_share=0.05)
        z = noise_multipliers(m, unplanned)["orientation"]
        forecast = 1.5 * 2 * z * math.sqrt(2 * dim) * dim / n
        detect = stats.norm.isf(0.05 / (dim * (dim - 1))) * 2 * z / math.sqrt(2) * dim / n
        assert math.isclose(orientation_noise_forecast(default, n, dim, m), forecast)
        assert math.isclose(orientation_detection_forecast(default, n, dim, m), detect)
        assert planned.orient is on and bool(detect < 0.75) is on, (n, dim, eps, detect)
        assert planned.rounds == round_count(planned, n, dim, m)
        if on:   # shares cut until the spectral forecast is at the target; the direction counts'
            # share raised where its count noise needs it (planned_direction_share)
            cut = min(1.0, (forecast / ORIENT_NOISE_TARGET) ** 2)
            assert math.isclose(planned.orientation_share, default.orientation_share * cut)
            assert (math.isclose(planned.direction_share, default.direction_share * cut)
                    or planned.direction_share > default.direction_share * cut)
            assert math.isclose(orientation_noise_forecast(planned, n, dim, m),
                                max(forecast, ORIENT_NOISE_TARGET))
    # the run's plan follows: no orientation release where it is off
    model = _glm(1000, 0, False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=1.0, delta=1e-5, seed=1, draws=20)
    assert "orientation" not in fit.attrs["release_summary"] and not fit.attrs["frame_turned"]


def test_a_release_whose_noise_swamps_r_never_turns_the_frame():
    """Forced at n = 1e3, D = 10, epsilon = 1 (and the initial scale's share cut to 0.03, which
    is what let these seeds' smallest eigenvalue fall below ``1 - tau_R``): the release's noise in
    ``R`` is above 1 (tau_R 2.35, the floor of the diagonal), so that eigenvalue says nothing.
    Turning there sent the search 1.5e5 and 3.1e6 posterior sds off (seeds 3 and 10)."""
    settings = ORIENT._replace(quantile_share=0.03)
    for seed in (3, 6, 10):
        model = _glm(1000, seed, False)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = newton.private_mode(model, n_public=1000, pld_mean=pld_mean_budget(1.0, 1e-5),
                                         relation="replace_one",
                                         rng_noise=np.random.default_rng(seed + 1000),
                                         init=np.zeros(model.dim), settings=settings)
        assert not result.frame_turned, seed


def test_a_direction_read_as_indefinite_is_not_widened(monkeypatch):
    """An `earnings`-like regression (``log_earn ~ normal(a + b_height height + b_male male,
    sigma)``, height in inches around 66, flat priors; ``densities.NormalRegression``, exact
    posterior) at 500 rows, epsilon = 1.  At the start (sigma = 1, residuals around 10) the rows
    are indefinite along a combination of the intercept, the slope and ``log sigma``; in this
    seed the orientation's release read that direction below minus its noise norm and its
    direction count found ~0 curvature there.  Widened as the count said, the fit ended 309
    posterior sds off (measured; 98.6 since session 58); not widened (``INDEFINITE_STRETCH``), within 30
    (measured 14.6, 15.4 since session 58: a warned, unsettled fit at this budget).  The direction counts run at their former share
    (0.03): at the share planned since (0.131 here, ``planned_direction_share``) this seed's count
    no longer finds ~0 along that direction and both runs end 14.2 off."""
    n, seed = 500, 17
    rng = np.random.default_rng(seed)
    male = rng.binomial(1, 0.4, n).astype(float)
    height = np.round(64 + 5 * male + rng.normal(0, 3, n))
    log_earn = 5.8 + 0.06 * height + 0.42 * male + rng.normal(0, 0.88, n)
    model = NormalRegression(np.column_stack([np.ones(n), height, male]), log_earn)
    mean, sd = model.exact()
    readings = []
    real = initial_frame.thresholded_ridges

    def worst(**settings):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = stan_dp.sample(model, epsilon=1.0, delta=1e-5, seed=seed + 500, progress=False, chains=1,
                                 draws=100, settings=AdaptationSettings(**settings))
        est = np.r_[fit.posterior["beta"].values.reshape(-1, 3).mean(0), fit.posterior["log_sigma"].values.mean()]
        return float(np.max(np.abs(est - mean) / sd)), bool(fit.attrs["frame_turned"])

    def spy(r, entry_sd):
        out = real(r, entry_sd)
        readings.extend((float(out.eigenvalues[g].min()), float(out.noise_norm[g[0]])) for g in out.groups)
        return out

    monkeypatch.setattr(initial_frame, "thresholded_ridges", spy)
    monkeypatch.setattr(plan_module, "DIRECTION_GAP_SDS", 0.0)   # the former direction share
    monkeypatch.setattr(plan_module, "CHECK_SHARE", 0.0)   # and no final check: the plan as measured
    new, turned = worst()
    monkeypatch.setattr(initial_frame, "INDEFINITE_STRETCH", math.inf)
    # without the first Newton step's trust region as well (session 56): with the region at 10 the
    # widened frame's run ended 58 sds off, not 309
    old, _ = worst(first_radius=math.inf)
    assert turned and len(readings) == 2 and readings[0] == readings[1]   # one group, the same release
    lam, noise_norm = readings[0]
    assert lam < -noise_norm, readings                  # read as indefinite beyond its noise
    # (309 before session 58; 98.6 since the initial scale weighs its readings, which redraws the
    # path of the widened run: tests/test_quantile_weighed.py)
    assert old > 60.0 and new < 30.0, (old, new)


@pytest.mark.parametrize("n, dim, eps", [(500, 3, 1.0), (500, 4, 1.0), (1000, 3, 1.0), (1000, 4, 1.0),
                                         (1000, 6, 1.0), (800, 6, 1.0), (434, 4, 4.0), (1000, 4, 4.0),
                                         (2000, 3, 1.0), (10_000, 11, 1.0), (200, 3, 1.0)])
def test_the_direction_counts_target_is_planned_off_both_ends_of_the_count(n, dim, eps):
    """Where the direction counts' tail is forced to one half, their target (n / 2 rows) is at least
    DIRECTION_GAP_SDS count-noise sds from 0 and from n: checked against the noise sd the count
    releases will have (``z sqrt(dim)``, z from the plan's noise multipliers), the share raised no
    more than that needs (equality where raised) and never above DIRECTION_SHARE_MAX."""
    m = pld_mean_budget(eps, 1e-5)
    planned = planned_settings(AdaptationSettings(), n, dim, m)
    if not planned.orient:
        return
    count_sd = noise_multipliers(m, planned)["direction"] * math.sqrt(dim)
    # the share the orientation's noise target alone gives (no raise)
    cut = min(1.0, (orientation_noise_forecast(AdaptationSettings(), n, dim, m) / ORIENT_NOISE_TARGET) ** 2)
    base = AdaptationSettings().direction_share * cut
    assert planned.direction_share <= DIRECTION_SHARE_MAX
    if planned.direction_share < DIRECTION_SHARE_MAX:
        assert DIRECTION_GAP_SDS * count_sd <= 0.5 * n * (1 + 1e-9), (count_sd, n)
    if planned.direction_share > base * (1 + 1e-12):   # raised: exactly to the gap, or to the cap
        assert (math.isclose(DIRECTION_GAP_SDS * count_sd, 0.5 * n, rel_tol=1e-9)
                or planned.direction_share == DIRECTION_SHARE_MAX)
    else:
        assert math.isclose(planned.direction_share, base)
    # the accounted plan includes the raised share: its releases compose to the whole budget
    releases = adaptation_releases(m, planned, n, dim)
    assert math.isclose(sum(r.count / (2.0 * r.noise_multiplier**2) for r in releases), m, rel_tol=1e-9)


def _wells_like(seed: int, n: int = 500) -> Logistic:
    """``switched`` on a distance in metres (mean ~50, a long right tail) and arsenic levels."""
    rng = np.random.default_rng(seed)
    dist = rng.gamma(1.5, 33.0, n)
    arsenic = 0.5 + rng.gamma(1.2, 1.1, n)
    p = 1.0 / (1.0 + np.exp(-(-0.009 * dist + 0.46 * arsenic)))
    return Logistic(np.column_stack([dist, arsenic]), rng.binomial(1, p))


def test_a_false_direction_count_no_longer_widens_a_direction_by_decades(monkeypatch):
    """A ``wells``-like logistic regression at 500 rows, epsilon = 1: with the direction counts at
    their old share (count noise sd 129 rows against a target of 250) this seed's count read a
    threshold decades below the rows' median, the oriented frame was hundreds of times the
    posterior sd along one direction, and the fit ended far off; with the planned share (target
    3.5 noise sds from both ends) the frame is within a few posterior sds and the fit near."""
    model = _wells_like(13)
    mode, cov = model.exact()
    sd = np.sqrt(np.diag(cov))
    frames = []
    oriented = newton._oriented_frame

    def recording(*args, **kwargs):
        out = oriented(*args, **kwargs)
        frames.append(out[0])
        return out

    monkeypatch.setattr(newton, "_oriented_frame", recording)

    def fit_and_frame() -> tuple[float, float]:
        frames.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = stan_dp.sample(model, epsilon=1.0, delta=1e-5, seed=13, progress=False, chains=1, draws=100)
        est = fit.posterior["b"].values.reshape(-1, model.dim).mean(axis=0)
        (frame,) = frames
        inv = np.linalg.inv(frame)
        widest = 1.0 / np.sqrt(np.linalg.eigvalsh(inv @ cov @ inv.T).min())   # frame sd / posterior sd
        return float(np.max(np.abs(est - mode) / sd)), float(widest)

    worst, widest = fit_and_frame()
    monkeypatch.setattr(plan_module, "DIRECTION_GAP_SDS", 0.0)   # the old share
    old_worst, old_widest = fit_and_frame()
    # the old share's fit ends unsettled, 34.7 sds off where its last step back left it (it
    # reported the estimate that step took back, beyond 50, before session 57)
    assert old_widest > 100.0 and old_worst > 20.0, (old_widest, old_worst)
    assert widest < 10.0 and worst < 10.0, (widest, worst)
