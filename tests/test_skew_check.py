"""The skew check (``stan_dp.adaptation.skew``): a Gaussian at the private mode against the posterior's shape.

Checked against closed forms: the cubature rule against Gaussian moments, the shift of a Poisson
rate's log-gamma posterior against its exact mean and mode, a Gaussian posterior's shift against 0;
its accounting against the plan; and end to end, a non-centred hierarchical logistic regression
(Stan) whose Gaussian approximation is several sds from NUTS must warn, where a GLM must not.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import special

import densities
import stan_dp
from conftest import bundled, stan_test_model
from stan_dp.adaptation import AdaptationSettings, private_mode
from stan_dp.adaptation.forecast import whitened_grad_scale
from stan_dp.adaptation.plan import adaptation_releases, noise_multipliers, planned_settings
from stan_dp.adaptation.releases import Ledger
from stan_dp.adaptation.skew import SKEW_BOUND, cubature_points, skew_bound, skew_check
from stan_dp.aggregates import queries
from stan_dp.auto import SKEW_CORRECTION_MAX, SKEW_LIMIT, shape_bias, skew_correction


class PoissonRate:
    """``y_i ~ Poisson(exp(s))``, flat prior on ``s``: the posterior of ``s`` is log-gamma.

    With ``S = sum y``, ``exp(s) ~ Gamma(S, n)``: mode ``log(S / n)``, mean ``psi(S) - log n``, sd
    ``sqrt(psi'(S))``; the curvature at the mode is ``S``.
    """

    def __init__(self, y: np.ndarray) -> None:
        self.y = np.asarray(y, dtype=float)
        self.n_rows, self.dim = int(self.y.size), 1

    def log_prior(self, theta: np.ndarray) -> float:
        return 0.0

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        return 0.0, np.zeros(1)

    def row_log_lik(self, theta: np.ndarray, rows=None) -> np.ndarray:
        return self.y * theta[0] - math.exp(theta[0]) - special.gammaln(self.y + 1)

    def row_log_lik_grad(self, theta: np.ndarray, rows=None):
        return self.row_log_lik(theta), (self.y - math.exp(theta[0]))[:, None]


def test_the_cubature_rule_is_exact_for_cubics_under_the_standard_normal():
    """``E p(u)`` for a random cubic ``p`` under ``N(0, I_d)`` is ``c + tr(Q)``: the ``2 d`` points
    ``+-sqrt(d) e_k`` give it exactly (odd terms cancel, ``(1/2d) sum_k d Q_kk`` is the trace)."""
    rng = np.random.default_rng(3)
    for d in (1, 2, 5, 11):
        c, b = rng.normal(), rng.normal(size=d)
        q = rng.normal(size=(d, d))
        t = rng.normal(size=(d, d, d))
        p = [c + b @ u + u @ q @ u + np.einsum("ijk,i,j,k", t, u, u, u) for u in cubature_points(d)]
        assert np.mean(p) == pytest.approx(c + np.trace(q), rel=1e-12, abs=1e-12)
        assert cubature_points(d).shape == (2 * d, d)


def _exact_release(density, mode, frame, n_public, z=1e6):
    """The check with a negligible noise: multiplier ``1 / z`` (noise sd ``2 B / z``, ``z = 1e6``)."""
    ledger = Ledger("replace_one")
    shift, sd = skew_check(queries(density), density, np.atleast_1d(mode), np.atleast_2d(frame), n_public,
                           1.0 / z, np.random.default_rng(0), ledger)
    return shift, sd, ledger


def test_the_shift_of_a_poisson_rate_is_its_log_gamma_posteriors_mean_less_mode():
    """At the exact mode and frame (``A = 1 / sqrt(S)``), one coordinate: the cubature gives
    ``A S (1 - cosh A)`` in posterior sds, which is ``-1 / (2 sqrt(S))`` to second order, the
    log-gamma posterior's (mean - mode) / sd to ``O(S^-3/2)``."""
    rng = np.random.default_rng(1)
    y = rng.poisson(0.05, size=1000)
    y[:50] = 1   # at least 50 events
    density = PoissonRate(y)
    total, n = float(y.sum()), y.size
    mode, a = math.log(total / n), 1.0 / math.sqrt(total)
    shift, sd, ledger = _exact_release(density, mode, [[a]], n)
    assert shift[0] == pytest.approx(a * total * (1.0 - math.cosh(a)), rel=1e-6)
    exact = (special.digamma(total) - math.log(total)) / math.sqrt(special.polygamma(1, total))
    assert shift[0] == pytest.approx(exact, rel=0.05)       # -0.070 at S = 50 ... 73
    assert shift[0] == pytest.approx(-0.5 / math.sqrt(total), rel=0.05)
    # one release, with the bound and noise of the mechanism: sd = 2 z B (replace-one)
    (entry,) = ledger.entries
    assert entry.what == "skew check"
    assert entry.sensitivity == pytest.approx(2.0 * SKEW_BOUND * whitened_grad_scale(n, 1) ** 3)
    assert sd[0] == pytest.approx(entry.noise_sd)


def test_a_gaussian_posterior_shifts_by_its_noise_alone():
    """A normal mean with known sd: the log density is quadratic, so the cubature's shift is 0
    exactly and the released one is noise (200 releases at the planned bound: mean within 4 sds
    of its standard error, spread within 15 % of the stated sd)."""
    rng = np.random.default_rng(2)
    density = densities.NormalMean(rng.normal(3.0, 2.0, size=2000), sigma=2.0, s0=100.0)
    mean, sd = density.posterior()
    shift, _, _ = _exact_release(density, mean + 0.3 * sd, [[sd]], density.n_rows)
    assert abs(shift[0]) < 1e-9
    draws, sds = [], []
    for seed in range(200):
        ledger = Ledger("replace_one")
        s, s_sd = skew_check(queries(density), density, np.array([mean]), np.array([[sd]]), density.n_rows,
                             0.5, np.random.default_rng(seed), ledger)
        draws.append(s[0])
        sds.append(s_sd[0])
    assert abs(np.mean(draws)) < 4 * sds[0] / math.sqrt(200)
    assert np.std(draws) == pytest.approx(sds[0], rel=0.15)


def test_rows_beyond_the_bound_are_clipped_and_failing_rows_count_zero():
    """Each row's vector is projected on the ball of radius ``B`` (one row's pull is bounded
    whatever it is), and a row whose gradient is not finite at some point contributes 0."""
    class Spiky(PoissonRate):
        def row_log_lik_grad(self, theta, rows=None):
            lik, g = super().row_log_lik_grad(theta)
            g = g.copy()
            g[0] *= 1e9 * (1.0 + theta[0] ** 2)   # one row far beyond any bound
            if abs(theta[0] - self.mode) > 1e-12:
                g[1] = np.nan                      # one row failing off the mode
            return lik, g

    y = np.ones(500)
    density = Spiky(y)
    density.mode = 0.0
    shift, _, _ = _exact_release(density, 0.0, [[1.0]], y.size, z=1e12)
    bound = skew_bound(y.size, 1)
    plain = PoissonRate(y[2:])
    rest, _, _ = _exact_release(plain, 0.0, [[1.0]], y.size, z=1e12)
    # the spiky row adds at most B; the failing row nothing; the others as without them
    assert abs(shift[0] - rest[0]) <= bound * (1 + 1e-9)


def test_the_plan_accounts_one_skew_release_and_none_without_its_share():
    n, d, m = 3000, 11, 20.0
    s = planned_settings(AdaptationSettings(), n, d, m)
    z = noise_multipliers(m, s)
    lines = adaptation_releases(m, AdaptationSettings(), n, d)
    assert sum(r.count for r in lines if r.noise_multiplier == z["skew"]) >= 1
    assert 1.0 / (2.0 * z["skew"] ** 2) == pytest.approx(s.skew_share * m, rel=1e-12)
    assert sum(r.count / (2 * r.noise_multiplier**2) for r in lines) == pytest.approx(m, rel=1e-9)
    none = adaptation_releases(m, AdaptationSettings(skew_share=0.0), n, d)
    assert sum(r.count for r in none) == sum(r.count for r in lines) - 1
    with pytest.raises(ValueError, match="skew_share"):
        adaptation_releases(m, AdaptationSettings(skew_share=-0.1), n, d)


def test_private_mode_makes_the_release_last_and_reports_the_shift():
    """The release is the ledger's last entry (after every search release), with the plan's
    multiplier; without the share there is none and no shift."""
    rng = np.random.default_rng(4)
    density = densities.NormalMean(rng.normal(1.0, 1.0, size=3000))
    out = private_mode(density, n_public=3000, pld_mean=5.0, relation="replace_one",
                       rng_noise=np.random.default_rng(5), init=np.zeros(1))
    assert out.ledger.entries[-1].what == "skew check"
    s = planned_settings(AdaptationSettings(), 3000, 1, 5.0)
    assert out.ledger.entries[-1].noise_multiplier == pytest.approx(noise_multipliers(5.0, s)["skew"])
    assert abs(out.skew_shift[0]) < 4 * out.skew_shift_sd[0]
    off = private_mode(density, n_public=3000, pld_mean=5.0, relation="replace_one",
                       rng_noise=np.random.default_rng(5), init=np.zeros(1),
                       settings=AdaptationSettings(skew_share=0.0))
    assert all(e.what != "skew check" for e in off.ledger.entries)
    assert not np.any(off.skew_shift)


HIERARCHICAL = "hierarchical_logit"


def _hierarchical_data(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    g = rng.integers(1, 9, n)
    a = -0.5 + 0.6 * rng.normal(size=8)
    x = rng.normal(30, 8, n)
    y = rng.binomial(1, 1 / (1 + np.exp(-(a[g - 1] + 0.04 * (x - 30)))))
    return {"N": n, "J": 8, "g": g.astype(int), "x": x, "y": y.astype(int)}


def test_a_non_centred_hierarchical_posterior_warns_that_it_is_not_gaussian(compiled, monkeypatch):
    """3,000 rows, epsilon = 16: the privacy noise is 0.18 posterior sds and nothing else warned,
    but the Gaussian at the mode puts ``tau`` at ~1.06 where NUTS has 0.34 +- 0.12 (the exact
    Laplace approximation is as far off).  The skew check sees it: ``tau``'s shift is about
    -0.6 sds against a noise sd of 0.03, the run warns and reports no credible intervals.  The
    centre moves by the shift beyond its noise, towards NUTS: the same run (same seed, so the same
    releases) with the centre left at the mode is farther in ``tau``."""
    data = _hierarchical_data(3000, 0)
    path = stan_test_model(HIERARCHICAL)
    model = stan_dp.RowModel(compiled(path), data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False)
    said = [str(w.message) for w in caught if issubclass(w.category, stan_dp.UtilityWarning)]
    assert any("not Gaussian" in w and "tau" in w for w in said), said
    assert not fit.attrs["gaussian_shape_ok"] and not fit.attrs["mixed"]
    assert fit.attrs["skew_shift"] > SKEW_LIMIT + 4 * fit.attrs["skew_shift_sd"]
    assert "skew check: 1 x" in fit.attrs["release_summary"]
    ref = stan_dp.reference_fit(path, data, seed=1, chains=2, draws=500, warmup=500)
    tau_ref = ref.posterior["tau"].values.ravel()
    tau = fit.posterior["tau"].values.ravel()
    assert abs(tau.mean() - tau_ref.mean()) / tau_ref.std() > 2.0   # the miss the warning is for
    assert 0.0 < fit.attrs["skew_correction"] <= SKEW_CORRECTION_MAX
    assert fit.attrs["skew_correction"] < fit.attrs["skew_shift"]   # its part beyond the noise
    monkeypatch.setattr(stan_dp.auto, "SKEW_CORRECTION_MAX", 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        at_mode = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False)
    assert at_mode.attrs["skew_correction"] == 0.0
    assert at_mode.attrs["skew_shift"] == fit.attrs["skew_shift"]   # the same releases
    tau_at_mode = at_mode.posterior["tau"].values.ravel()
    assert abs(tau.mean() - tau_ref.mean()) < abs(tau_at_mode.mean() - tau_ref.mean())


def test_a_logistic_regression_is_gaussian_enough(compiled):
    """The bundled logistic regression at 3,000 rows, epsilon = 16: the shift is a few hundredths
    of a posterior sd and the check does not warn."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 3))
    y = rng.binomial(1, 1 / (1 + np.exp(-(x @ np.array([0.5, -1.0, 0.3]) - 0.2))))
    data = {"N": 3000, "D": 3, "X": x, "y": y.astype(int), "prior_scale": 2.5}
    model = stan_dp.RowModel(compiled(bundled("logistic_regression")), data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False)
    assert not any("not Gaussian" in str(w.message) for w in caught)
    assert fit.attrs["gaussian_shape_ok"]
    assert fit.attrs["skew_shift"] < 0.1
    assert fit.attrs["skew_correction"] == 0.0   # within its noise: the centre stays at the mode


def test_the_shift_counts_beyond_a_bonferroni_multiple_of_its_noise_and_enters_the_miss_chance():
    """``shape_bias`` keeps ``|s_j| - k sd`` with ``k = Phi^-1(1 - 0.01 / (2 d))`` (3.32 at
    d = 11), so noise alone counts in at most 1 % of runs (checked by simulation); the part kept is
    a bias on its own coordinate in the chance of a miss."""
    from scipy import stats

    from stan_dp.adaptation.forecast import exceed_probability
    from stan_dp.auto import FORECAST_LIMIT, _miss_probability, shape_bias

    d = 11
    k = stats.norm.isf(0.01 / (2 * d))
    assert k == pytest.approx(3.32, abs=0.01)
    shift = np.zeros(d)
    shift[3] = -0.9
    result = _result(shift, np.full(d, 0.1))
    expected = np.zeros(d)
    expected[3] = 0.9 - k * 0.1
    assert shape_bias(result) == pytest.approx(expected)
    rng = np.random.default_rng(0)
    counted = [np.any(shape_bias(_result(rng.normal(0.0, 0.3, d), np.full(d, 0.3))) > 0) for _ in range(20000)]
    assert np.mean(counted) == pytest.approx(0.01, abs=0.003)   # 3 binomial sds at 20,000 runs
    noise = np.full(d, 0.2)
    plain = _miss_probability(noise, 0.0, _result(np.zeros(d), np.full(d, 0.1)))
    with_shape = _miss_probability(noise, 0.0, result, shape_bias(result))
    assert with_shape == pytest.approx(exceed_probability(noise, FORECAST_LIMIT, bias=expected))
    assert with_shape > plain
    assert shape_bias(_result(np.array([np.nan, 0.0]), np.zeros(2)))[0] == np.inf   # a failed check counts


def test_the_centre_moves_by_the_shift_beyond_its_noise_at_most_one_sd():
    """``skew_correction``: per coordinate the signed part of the shift beyond ``k`` noise sds (the
    same ``k`` as the warning), in unconstrained units (posterior sd 2 here), capped at
    ``SKEW_CORRECTION_MAX`` posterior sds; no check, or a failed one, moves nothing."""
    from scipy import stats

    d = 4
    k = stats.norm.isf(0.01 / (2 * d))
    shift = np.array([-0.9, 0.2, 5.0, np.nan])
    result = _result(shift, np.full(d, 0.1))._replace(covariance=np.diag([4.0, 4.0, 4.0, 4.0]))
    moved = skew_correction(result)
    assert moved[0] == pytest.approx(-2.0 * (0.9 - k * 0.1))   # beyond k sds, signed, times the sd
    assert moved[1] == 0.0                                        # within k sds of 0
    assert moved[2] == pytest.approx(2.0 * SKEW_CORRECTION_MAX)  # capped
    assert moved[3] == 0.0                                        # a failed check moves nothing
    assert np.all(skew_correction(result._replace(skew_shift=None)) == 0.0)
    # it moves exactly where the warning's shape bias counts: in 1 % of a Gaussian posterior's runs
    # (simulated in the test above)
    shape = shape_bias(result)
    assert np.array_equal(moved != 0.0, np.isfinite(shape) & (shape > 0.0))


def _result(shift, sd):
    from stan_dp.adaptation.result import AdaptationResult
    from stan_dp.adaptation.releases import Ledger

    d = len(shift)
    return AdaptationResult(mode=np.zeros(d), covariance=np.eye(d), noise_covariance=np.eye(d),
                            frame=np.eye(d), grad_clip=1.0, ledger=Ledger("replace_one"), rounds_averaged=2,
                            settled=True, path=np.zeros((1, d)), prior_share=0.0, tail_rows=np.nan,
                            tail_rows_sd=np.inf, skew_shift=np.asarray(shift, dtype=float),
                            skew_shift_sd=np.asarray(sd, dtype=float))
