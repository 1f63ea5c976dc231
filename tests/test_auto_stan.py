"""``stan_dp.sample`` with no knobs on compiled Stan models as users write them.

Criterion (issue 13): the worst |mean error| in reference sds is at most
``max(3 floor, 0.5)`` (``floor`` the information floor,
:mod:`stan_dp.information_floor`), or the run warns.  Models: an
unstandardised regression with a flat prior on the scale (against the exact
posterior: flat priors on the coefficients make the posterior mean of
``(alpha, beta)`` the least-squares fit), logistic regression with
uniform-bounded coefficients (against NUTS), and a varying-intercept model
(whose unoriented mode search ends at the degenerate neck of the funnel: it
must say so).
Fixed seeds; n = 1e4, epsilon = 4, delta = 1e-5.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import densities
import stan_dp
from conftest import stan_test_model
from stan_dp.adaptation import AdaptationSettings, far, initial_frame, newton
from stan_dp.adaptation.forecast import whitened_grad_scale
from stan_dp.adaptation.plan import clip_inflation
from stan_dp.auto import PRIOR_SHARE_LIMIT, _adaptation_plan
from stan_dp.information_floor import information_floor

N = 10_000


def _fit(model, seed=2, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=4.0, delta=1e-5, seed=seed, progress=False, **options)
    return fit, [str(w.message) for w in caught if issubclass(w.category, stan_dp.UtilityWarning)]


def test_flat_prior_scale_with_a_predictor_in_metres(compiled):
    rng = np.random.default_rng(0)
    x = 5000 + 1000 * rng.normal(size=N)
    y = 20 + 0.004 * x + 3 * rng.normal(size=N)
    model = stan_dp.RowModel(compiled(stan_test_model("scale_flat")), {"N": N, "x": x, "y": y})
    fit, warned = _fit(model)
    # exact: (alpha, beta) | y is Student-t around least squares; sigma's posterior is close
    # to N(s, s^2 / (2 n)) at this n
    design = np.column_stack([np.ones(N), x])
    coef, rss = np.linalg.lstsq(design, y, rcond=None)[:2]
    s2 = float(rss[0]) / (N - 2)
    sd = np.sqrt(np.diag(s2 * np.linalg.inv(design.T @ design)))
    means = [float(fit.posterior[v].mean()) for v in ("alpha", "beta", "sigma")]
    errors = np.abs(np.array(means) - np.r_[coef, np.sqrt(s2)]) / np.r_[sd, np.sqrt(s2 / (2 * N))]
    sds = [float(fit.posterior[v].std()) for v in ("alpha", "beta")]
    # The r^2 - 1 gradients of log sigma are skewed: at the rule's bound their clipping moved
    # sigma 0.47-1.10 sds (8 seeds) while the run claimed 0.20 and stayed silent in 7 of them.
    # The adaptive bound (raised x1.3-1.7 here) left 0.23-0.61; started where the scale's bias
    # balances the noise (scale_clip_inflation, a likelihood's scale: 1.18 times the rule's here)
    # and raised x1.3 in 7 of the 8 seeds, 0.05-0.45, with a released noise of 0.19-0.24, which
    # the run reports: the only warning allowed.
    assert all(w.startswith("the privacy noise in the mean") for w in warned), warned
    plan, pld_mean, _ = _adaptation_plan(4.0, 1e-5, 1.0, AdaptationSettings(), N, 3)
    rule = clip_inflation(plan, N, pld_mean)
    assert fit.attrs["grad_clip_whitened"] > 1.1 * rule * whitened_grad_scale(N, 3)
    assert errors.max() < 4 * fit.attrs["max_noise_sd_in_posterior_sds"], errors
    np.testing.assert_allclose(sds, sd, rtol=0.5)   # not NUTS's: it mixes badly on metres


def test_a_scale_started_far_below_is_reached_and_named_when_the_far_phase_is_off(compiled):
    """434 rows of an outcome around 100 with residual sd 18 (kidiq's size): the default start puts
    sigma at 1.  The far phase brings it to the posterior; without it (``far_rounds=0``) the Newton
    rounds do not get there and the run says its search did not settle, and an ``init`` dict that
    sets only sigma (public: the outcome's scale) brings it within a few sds.  (Before the gain cap
    of the Newton steps the unsettled run also named sigma as still moving one way; capped, its
    steps from sigma = 1 gain at most 100 nats per row and no longer walk one way for three rounds
    — seeds 1-3 end at sigma 0.94-0.97, 28 sds off, warned.  Naming is tested in
    ``test_far_start.py``.)"""
    n = 434
    rng = np.random.default_rng(0)
    x = rng.normal(size=n)
    y = 100 + 9 * x + 18 * rng.normal(size=n)
    model = stan_dp.RowModel(compiled(stan_test_model("scale_flat")), {"N": n, "x": x, "y": y})
    design = np.column_stack([np.ones(n), x])
    rss = float(np.linalg.lstsq(design, y, rcond=None)[1][0])
    s, s_sd = np.sqrt(rss / (n - 2)), np.sqrt(rss / (n - 2) / (2 * n))   # sigma's posterior, closely
    default, _ = _fit(model, seed=1)
    assert "sigma " not in default.attrs["still_moving"]
    assert abs(float(default.posterior["sigma"].mean()) - s) < 5 * s_sd
    alone = AdaptationSettings(far_rounds=0)
    far, warned = _fit(model, seed=1, settings=alone)
    assert not far.attrs["search_settled"]
    assert any(w.startswith("the private mode search did not settle") for w in warned), warned
    assert abs(float(far.posterior["sigma"].mean()) - s) > 20 * s_sd    # 28 sds: still near 1
    near, _ = _fit(model, seed=1, init={"sigma": 20.0}, settings=alone)
    assert near.attrs["still_moving"] == ""
    # 0.1-2.4 sds over seeds 1-3 and two data sets (sigma's clipping bias is the rest)
    assert abs(float(near.posterior["sigma"].mean()) - s) < 3 * s_sd
    with pytest.raises(ValueError, match="sgima"):
        stan_dp.sample(model, epsilon=4.0, delta=1e-5, seed=1, init={"sgima": 20.0})


def test_uniform_bounded_coefficients(compiled):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(N, 3))
    y = rng.binomial(1, 1 / (1 + np.exp(-(0.5 + x @ np.array([1.5, -1.0, 0.3])))))
    data = {"N": N, "D": 3, "X": x, "y": y.astype(int)}
    path = stan_test_model("uniform_bounded")
    model = stan_dp.RowModel(compiled(path), data)
    ref = stan_dp.reference_fit(path, data, seed=1, chains=2, draws=1000, warmup=500)
    fit, warned = _fit(model)
    table = stan_dp.compare(fit, ref)
    worst = table.headline()["worst_std_mean_error"]
    target = max(3 * information_floor(model, ref, 4.0, 1e-5), 0.5)
    assert worst <= target or warned, (worst, target)
    assert worst <= 1.0


def test_a_predictor_far_from_zero_is_reached_along_its_ridge_and_its_error_is_claimed(compiled, monkeypatch):
    """``y ~ normal(alpha + beta * year, sigma)`` with ``year`` in 1970-1982 (intercept-slope
    correlation about -0.99999), flat priors, 1,000 rows, epsilon = 16, against the exact posterior.
    The rounds widen their frame along the ridge over many rounds; when the pool averaged the
    curvatures of rounds made in frames far narrower there (with one frame's noise level), it
    stopped 4.8 sds along the ridge while the run claimed 0.38-0.48 sds of noise and bias
    (``pooling.curvature_weights`` now leaves such rounds out: 0.33-0.37, claimed 0.68-0.74)."""
    from conftest import plain_curvature_weights
    from stan_dp.adaptation import pooling

    n = 1000
    rng = np.random.default_rng(0)
    x = rng.integers(1970, 1983, n).astype(float)
    y = -120 + 0.075 * x + rng.normal(0, 3, n)
    mean, sd = densities.NormalRegression(np.column_stack([np.ones(n), x]), y).exact()
    model = stan_dp.RowModel(compiled(stan_test_model("scale_flat")), {"N": n, "x": x, "y": y})

    def run(seed, **settings):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=seed, progress=False,
                                 settings=AdaptationSettings(**settings))
        est = np.array([float(fit.posterior[v].mean()) for v in ("alpha", "beta")]
                       + [float(np.log(fit.posterior["sigma"]).mean())])
        claimed = fit.attrs["max_noise_sd_in_posterior_sds"] + fit.attrs["clipping_bias_bound"]
        return float(np.max(np.abs(est - mean) / sd)), claimed

    for seed in (2, 3):
        error, claimed = run(seed)
        assert error < claimed and error < 1.0, (seed, error, claimed)
    monkeypatch.setattr(pooling, "curvature_weights", plain_curvature_weights)
    monkeypatch.setattr(far, "OVERSHOOT_OCTAVES", math.inf)   # and of before the far phase's bracket
    for seed in (2, 3):   # on the paths of before the first step's trust region (with the region at 10, seed 3 ended 3.5)
        error, claimed = run(seed, first_radius=math.inf)
        assert error > 4.0 and error > 5 * claimed, (seed, error, claimed)


def test_probit_with_a_distance_in_metres(compiled):
    """``bernoulli(Phi(eta))`` with a distance in metres: the log density is -inf on nearly all of
    Stan's init box (-2, 2), finite near 0.  The model loads (its decomposition is checked at test
    points on narrower boxes), NUTS cannot start from the default inits and says what would help,
    starts from 0 with ``init_radius=0``, and the private fit meets the criterion or warns (at
    1,000 rows, epsilon = 4, six runs: 0.74-1.26 sds, every one warned by the forecast)."""
    n = 2000
    rng = np.random.default_rng(0)
    age, dist = rng.uniform(20, 70, n), rng.gamma(2.0, 100.0, n)
    eta = 0.8 - 0.01 * age - 0.002 * dist
    y = (rng.normal(size=n) < eta).astype(int)
    data = {"N": n, "age": age, "dist": dist, "y": y}
    path = stan_test_model("probit_metres")
    model = stan_dp.RowModel(compiled(path), data)   # raised before: no finite test point
    with pytest.raises(RuntimeError, match="init_radius=0"):
        stan_dp.reference_fit(path, data, seed=1, chains=1, draws=10, warmup=10)
    ref = stan_dp.reference_fit(path, data, seed=1, chains=2, draws=1000, warmup=500, init_radius=0)
    assert ref.posterior.attrs["init_radius"] == 0.0
    fit, warned = _fit(model)
    worst = stan_dp.compare(fit, ref).headline()["worst_std_mean_error"]
    target = max(3 * information_floor(model, ref, 4.0, 1e-5), 0.5)
    assert worst <= target or warned, (worst, target)
    assert worst <= 3.0, worst


@pytest.mark.parametrize("orient", [True, False])
def test_hierarchical_intercept_warns_and_names_the_funnel_neck(compiled, orient, monkeypatch):
    """The default (oriented) search settles near the mode with this seed (worst 0.82 sd: the
    forecast warns); the unoriented one without the far phase (``orient=False, far_rounds=0``)
    and with ``mu`` and ``tau`` (no row depends on them) at scale 1 ends at the degenerate neck of
    the funnel (tau at 0, the prior supplying 105 % of the curvature, 146 sds off) and must say so.
    (With the far phase, or with their scale held to the widest measured as the initial scale now
    does, the unoriented search of this seed no longer ends there: 0.57 sds off; nor with the
    Newton rounds' cap on a log coordinate's move, ``newton.LOG_STEP_MAX``: 0.45 sds off, settled,
    so the counterfactual lifts that cap too; and it moves ``a`` and ``mu`` as one group, session
    59, :mod:`stan_dp.adaptation.groups`, after which it ends unsettled, not at the neck; nor
    with ``mu`` and ``log tau`` at the prior's scale, session 61; nor with them at the expected
    prior's mode in every pooled round, session 83.)"""
    rng = np.random.default_rng(0)
    groups = rng.integers(1, 6, size=N)
    effects = 10 + 2 * rng.normal(size=5)
    data = {"N": N, "J": 5, "g": groups, "y": effects[groups - 1] + 1.5 * rng.normal(size=N)}
    path = stan_test_model("hierarchical_intercept")
    model = stan_dp.RowModel(compiled(path), data)
    ref = stan_dp.reference_fit(path, data, seed=1, chains=2, draws=500, warmup=500)
    # the counterfactual also without the first Newton step's trust region (session 56), as it
    # was measured
    settings = (AdaptationSettings() if orient
                else AdaptationSettings(orient=False, far_rounds=0, first_radius=math.inf))
    if not orient:   # the initial scale's rule before: rowless coordinates at scale 1
        monkeypatch.setattr(initial_frame, "_held_to_widest_measured", lambda scale, at_floor, measured: scale)
        # and log tau's Newton moves not capped (with the cap this search no longer ends at the neck)
        monkeypatch.setattr(newton, "LOG_STEP_MAX", math.inf)
        # nor with a and mu moved together (stan_dp.adaptation.groups: the group's direction in the
        # first frame, and its column in the initial scale's releases, whose noise it changes)
        monkeypatch.setattr(newton, "group_locations", lambda density, d: [])
        # nor with mu and log tau at the prior's scale (session 61, groups.hyperparameter_scale)
        monkeypatch.setattr(newton, "hyperparameter_scale", lambda density, theta, scale, at_floor, h: scale)
        # nor with mu and log tau at the expected prior's mode in every pooled round (session 83:
        # with it the counterfactual ends with the prior supplying 0.13 % of the curvature, not at
        # the neck)
        monkeypatch.setattr(newton, "pooled_mode_with_expected_hyperparameters",
                            lambda density, pooled, frame, h, data_coordinates: pooled.mode)
    fit, warned = _fit(model, settings=settings)
    worst = stan_dp.compare(fit, ref).headline()["worst_std_mean_error"]
    target = max(3 * information_floor(model, ref, 4.0, 1e-5), 0.5)
    assert worst <= target or warned, (worst, target)
    at_neck = fit.attrs["prior_share"] > PRIOR_SHARE_LIMIT
    if at_neck:
        assert any("prior" in w for w in warned), warned
    if orient:   # the public gate orients here (n = 1e4, dim 8, epsilon = 4), and it helps
        assert "orientation sum" in fit.attrs["release_summary"]
        assert not at_neck and fit.attrs["search_settled"] and worst < 2.0, worst
    else:        # the case the neck warning is for (this seed's unoriented search ends there)
        assert at_neck, fit.attrs["prior_share"]
