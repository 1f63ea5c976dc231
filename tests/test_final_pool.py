"""The final pool: near rounds that left the search's pool return to it where they agree with it.

Where the search's pool holds at most half of the final streak of near rounds,
``pooling._final_rounds`` puts back the streak's rounds that are within ``pooling._reach`` of the
search's estimate (the quadratic model's reach, or twice their noise distance), unless Hausman's
test says the search's own estimate is farther from theirs than its noise explains.  Checked
here: Hausman's lemma (the covariance of ``a - b`` is ``V_a - V_b``) and the statistic's
chi-squared law against Monte Carlo draws of synthetic rounds whose gradients are exactly linear
plus their stated noise; the choice on stationary rounds (all come back), on a search that crept
along a ridge (none does), beside a pool holding most of the streak (none does), on rounds that
disagree among themselves beyond their noise where Hausman's test cannot see it (none does) and
on rounds gone to infinity (no raise); and end to end on a D = 10 logistic regression at 1,000
rows, epsilon = 1, against its exact posterior mode, and on a Stan regression on an uncentred
predictor whose scattered rounds must not come back, against its exact posterior.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import optimize, stats

import densities
import stan_dp
from conftest import plain_curvature_weights, stan_test_model
from stan_dp.adaptation import AdaptationSettings, newton, pooling

D, K = 3, 8
H = np.array([[4.0, 1.0, 0.5], [1.0, 2.0, 0.3], [0.5, 0.3, 9.0]])   # curvature, theta space
MODE = np.array([1.0, -2.0, 0.5])


def _layout(rng: np.random.Generator) -> list[tuple[np.ndarray, float, np.ndarray]]:
    """``K`` rounds' (frame, noise sd, point): fixed across noise draws."""
    h_inv = np.linalg.inv(H)
    return [(np.linalg.cholesky(h_inv) @ (np.eye(D) + 0.4 * rng.normal(size=(D, D))), rng.uniform(0.5, 2.0),
             MODE + np.linalg.cholesky(4.0 * h_inv) @ rng.normal(size=D)) for _ in range(K)]


def _rounds(layout, rng: np.random.Generator, lag: np.ndarray | None = None) -> list[dict]:
    """Rounds of ``layout`` with fresh gradient noise; the gradient is ``H (MODE - theta)`` plus the
    release's noise ``A^-T N(0, s^2 I)``, so that each one-step estimate is the mode plus its noise.
    ``lag[k]`` shifts round ``k``'s one-step estimate (what a round that undershoots along a ridge
    gives)."""
    out = []
    for k, (frame, s, theta) in enumerate(layout):
        inv = np.linalg.inv(frame)
        grad = H @ (MODE - theta) + inv.T @ (s * rng.normal(size=D))
        if lag is not None:
            grad = grad + H @ lag[k]
        out.append({"theta": theta, "grad": grad, "grad_sd": s,
                    "hess": H.copy(), "prior_hess": np.zeros((D, D)), "sd_h": 1e-9,
                    "frame": frame, "data_coordinates": np.ones(D, dtype=bool),
                    "hess_diag_sd": pooling.curvature_diagonal_sd(1e-9, inv)})
    return out


def test_hausman_covariance_and_law_against_monte_carlo():
    """Over 3,000 noise draws of the same rounds: ``a`` pools the last two rounds, ``b`` all eight.
    The empirical covariance of ``a - b`` matches ``V_a - V_b`` entry by entry (within 5 Monte
    Carlo standard errors of each entry, computed from the draws), the statistic's mean is ``D``
    (within 4 standard errors of a chi-squared mean, sqrt(2 D / 3000)), and it exceeds the 99 %
    quantile in 1 % of the draws (within 3.5 binomial sds)."""
    rng = np.random.default_rng(11)
    layout = _layout(rng)
    frame = np.eye(D)
    diffs, stat, covs = [], [], None
    for _ in range(3000):
        rounds = _rounds(layout, rng)
        a = pooling._pooled_estimate(rounds[-2:], frame)
        b = pooling._pooled_estimate(rounds, frame)
        diffs.append(a.mode - b.mode)
        value, dof = pooling._hausman(a.mode, a.noise_cov, b.mode, b.noise_cov)
        assert dof == D
        stat.append(value)
        covs = a.noise_cov - b.noise_cov   # the same in every draw (frames, sds and curvature fixed)
    diffs = np.array(diffs)
    empirical = np.cov(diffs.T)
    products = diffs[:, :, None] * diffs[:, None, :]
    se = products.std(axis=0) / math.sqrt(len(diffs))
    assert np.all(np.abs(empirical - covs) < 5.0 * se)
    stat = np.array(stat)
    assert abs(stat.mean() - D) < 4.0 * math.sqrt(2.0 * D / len(stat))
    rate = float(np.mean(stat > stats.chi2.ppf(0.99, D)))
    assert abs(rate - 0.01) < 3.5 * math.sqrt(0.01 * 0.99 / len(stat))


def test_noisy_rounds_that_left_the_pool_come_back():
    """Rounds whose noise is many posterior sds (sd 6 in the frame of the posterior: a noise
    distance of 6 sqrt(3) = 10.4, twice that beyond the model's reach of 8.2), the search's pool
    holding only the last: all eight come back, and the estimate's noise falls by about
    sqrt(8)."""
    rng = np.random.default_rng(5)
    h_root = np.linalg.cholesky(np.linalg.inv(H))
    layout = [(h_root, 6.0, MODE + 6.0 * h_root @ rng.normal(size=D)) for _ in range(K)]
    rounds = _rounds(layout, rng)
    assert pooling.model_reach(D) < 2.0 * 6.0 * math.sqrt(D)
    kept = pooling._final_rounds(rounds[-1:], rounds, np.eye(D))
    assert len(kept) == K
    pooled = pooling._pooled_estimate(kept, np.eye(D))
    one = np.trace(pooling._pooled_estimate(rounds[-1:], np.eye(D)).noise_cov @ H)
    np.testing.assert_allclose(np.trace(pooled.noise_cov @ H), one / K, rtol=1e-6)


def test_a_search_that_crept_along_a_ridge_keeps_its_own_pool():
    """The same rounds with little noise (sd 0.5), their points and one-step estimates lagging
    behind the mode along one direction by 14, 12, ..., 0 posterior sds (a search that crept along
    a ridge: the early rounds undershoot more), the search's pool holding the last two.  The rounds
    lagging by at most 8 are within the model's reach of the search's estimate and would come
    back; pooling them would pull the estimate back, Hausman's statistic is far beyond its
    quantile, and the search's pool stays."""
    rng = np.random.default_rng(6)
    h_root = np.linalg.cholesky(np.linalg.inv(H))
    direction = h_root @ np.array([1.0, 0.0, 0.0])   # one posterior sd along the first axis
    lag = np.array([-2.0 * (K - 1 - k) * direction for k in range(K)])
    rounds = _rounds([(h_root, 0.5, MODE + lag[k]) for k in range(K)], rng, lag)
    own = pooling._pooled_estimate(rounds[-2:], np.eye(D))
    admitted = [r for r in rounds if pooling._distance(r["theta"], own) <= pooling._reach(r, own)]
    assert len(admitted) == 5   # lagging by 8, 6, 4, 2, 0
    wide = pooling._pooled_estimate(admitted, np.eye(D))
    statistic, dof = pooling._hausman(own.mode, own.noise_cov, wide.mode, wide.noise_cov)
    assert statistic > stats.chi2.ppf(0.99, dof)
    assert pooling._final_rounds(rounds[-2:], rounds, np.eye(D)) == rounds[-2:]


def test_a_pool_that_holds_most_of_the_streak_is_kept():
    """Where the search's pool holds more than half of the streak, no round comes back, however
    well it agrees: re-admitting the rest buys at most a factor sqrt(2) of noise, and rounds still
    converging from a far start beside such a pool lag in ways the test cannot see (``wells``, 1,000
    rows, epsilon = 1: one early round of eight moved the estimate by 1.4 sds)."""
    rng = np.random.default_rng(7)
    h_root = np.linalg.cholesky(np.linalg.inv(H))
    rounds = _rounds([(h_root, 6.0, MODE + 6.0 * h_root @ rng.normal(size=D)) for _ in range(K)], rng)
    assert pooling._final_rounds(rounds[-5:], rounds, np.eye(D)) == rounds[-5:]
    assert len(pooling._final_rounds(rounds[-4:], rounds, np.eye(D))) > 4


def test_rounds_that_disagree_among_themselves_do_not_come_back():
    """Rounds far by their noise (sd 6 in the posterior's frame) whose one-step estimates also lag
    by 20 posterior sds along one direction, alternately ahead and behind (what rounds still
    converging along a ridge give with a curvature floored there: a one-step estimate overshoots
    by a multiple of its distance), the search's pool holding the last round, which does not lag.
    Every round is within reach of the search's estimate and the lags cancel in the wider pool,
    so Hausman's test cannot tell; their dispersion is far beyond its 99 % quantile, and the
    search's pool stays.  Without the lags (same noise) all eight come back."""
    rng = np.random.default_rng(10)
    h_root = np.linalg.cholesky(np.linalg.inv(H))
    direction = h_root @ np.array([1.0, 0.0, 0.0])   # one posterior sd along the first axis
    lag = np.array([(20.0 if k % 2 else -20.0) * direction for k in range(K - 1)] + [np.zeros(D)])
    layout = [(h_root, 6.0, MODE + 6.0 * h_root @ rng.normal(size=D)) for _ in range(K)]
    state = rng.bit_generator.state
    rounds = _rounds(layout, rng, lag)
    own = pooling._pooled_estimate(rounds[-1:], np.eye(D))
    assert all(pooling._distance(r["theta"], own) <= pooling._reach(r, own) for r in rounds)
    wide = pooling._pooled_estimate(rounds, np.eye(D))
    statistic, dof = pooling._hausman(own.mode, own.noise_cov, wide.mode, wide.noise_cov)
    assert statistic <= stats.chi2.ppf(pooling.HAUSMAN_QUANTILE, dof)
    dispersion = pooling._pooled_estimate(rounds, np.eye(D), random_effects=True).dispersion
    assert dispersion * D * (K - 1) > stats.chi2.ppf(pooling.DISPERSION_QUANTILE, D * (K - 1))
    assert not pooling._rounds_agree(rounds, np.eye(D))
    assert pooling._final_rounds(rounds[-1:], rounds, np.eye(D)) == rounds[-1:]
    rng.bit_generator.state = state
    agreeing = _rounds(layout, rng)
    assert pooling._rounds_agree(agreeing, np.eye(D))
    assert len(pooling._final_rounds(agreeing[-1:], agreeing, np.eye(D))) == K


def test_rounds_gone_to_infinity_are_judged_without_raising():
    """A search whose rounds went to infinity (``radon`` at 1,000 rows, epsilon = 4: some parameter
    at infinity in most runs) can leave non-finite values in its rounds.  An infinite released
    curvature is floored like any unresolved one (``_shrunk_eigen``) and the rounds are judged as
    usual; a non-finite gradient precision (where ``pinv`` would not converge) leaves the
    search's pool as it is.  Neither raises."""
    rng = np.random.default_rng(8)
    h_root = np.linalg.cholesky(np.linalg.inv(H))
    rounds = _rounds([(h_root, 6.0, MODE + 6.0 * h_root @ rng.normal(size=D)) for _ in range(K)], rng)
    rounds[-1]["hess"] = np.full((D, D), np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kept = pooling._final_rounds(rounds[-1:], rounds, np.eye(D))
    assert kept[-1] is rounds[-1] and all(any(r is k for r in rounds) for k in kept)
    rounds = _rounds([(h_root, 6.0, MODE + 6.0 * h_root @ rng.normal(size=D)) for _ in range(K)], rng)
    rounds[0]["grad_sd"] = np.nan
    assert pooling._final_rounds(rounds[-1:], rounds, np.eye(D)) == rounds[-1:]


def _logistic(n: int, seed: int) -> tuple[densities.LogisticRegression, np.ndarray, np.ndarray]:
    """A D = 10 logistic regression on standard-normal predictors, its exact posterior mode
    (N(0, 1) priors) and the Laplace sds there."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 10))
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-(0.3 + z @ np.linspace(-0.8, 0.8, 10)))))
    x = np.column_stack([np.ones(n), z])

    def negative(t):
        eta = x @ t
        value = np.sum(y * eta - np.logaddexp(0.0, eta)) - 0.5 * t @ t
        return -value, -(x.T @ (y - 1.0 / (1.0 + np.exp(-eta))) - t)

    mode = optimize.minimize(negative, np.zeros(11), jac=True, method="BFGS", options={"gtol": 1e-9}).x
    p = 1.0 / (1.0 + np.exp(-(x @ mode)))
    sd = np.sqrt(np.diag(np.linalg.inv(x.T @ (x * (p * (1.0 - p))[:, None]) + np.eye(11))))
    return densities.LogisticRegression(z, y), mode, sd


def test_at_a_small_budget_the_final_estimate_averages_the_rounds(monkeypatch):
    """D = 10 logistic regression, 1,000 rows, epsilon = 1 (one round's one-step noise 4.9 posterior
    sds per coordinate), 24 seeds against the exact posterior mode.  With the search's own pool the
    estimate averaged at most four of the eight rounds (one in 15 seeds); now at least five in
    every seed, and the worst errors fall (measured: geometric mean of the ratios 0.78, median
    7.5 -> 5.5 sds; a change that pooled nothing more would give 1)."""
    def run(seed, **settings):
        model, mode, sd = _logistic(1000, seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = stan_dp.sample(model, epsilon=1.0, delta=1e-5, seed=seed + 500, progress=False, chains=1,
                                 draws=200, settings=AdaptationSettings(**settings))
        beta = fit.posterior["beta"].values.reshape(-1, 10).mean(axis=0)
        est = np.r_[fit.posterior["alpha"].values.mean(), beta]
        return float(np.max(np.abs(est - mode) / sd)), fit.attrs["rounds_averaged"]

    new = [run(seed) for seed in range(24)]
    monkeypatch.setattr(newton, "_final_rounds", lambda pool, streak, frame: pool)
    # on the paths of before the first Newton step's trust region (session 56), as measured
    old = [run(seed, first_radius=math.inf) for seed in range(24)]
    assert max(averaged for _, averaged in old) <= 4
    assert min(averaged for _, averaged in new) >= 5
    ratio = math.exp(np.mean([math.log(a / b) for (a, _), (b, _) in zip(new, old)]))
    assert ratio < 0.85
    assert np.median([e for e, _ in new]) < np.median([e for e, _ in old]) - 1.0


def test_a_regression_on_an_uncentred_predictor_keeps_its_search_pool(compiled, monkeypatch):
    """``y ~ normal(alpha + beta * x, sigma)`` with ``x`` around 170 (sd 10, an intercept-slope
    correlation of -0.998), flat priors, 2,000 rows, epsilon = 1 (``tests/stan/scale_flat.stan``),
    against the exact posterior (``densities.NormalRegression``, the same model).  With these two
    data sets and this noise seed the search's pool held five of its ten near rounds and its last
    point was 3.6-4.3 sds off; the ten rounds' one-step estimates, made with a curvature the
    rounds could not resolve along the ridge, ran from 143 sds on one side to 33 on the other, and
    pooling all of them ended 29-32 sds off (measured; 30 and 11 since the skew check took 0.5 % of
    the budget and moved the noise draws' scale).  Their disagreement keeps the search's pool:
    3.5-4.2 sds off, within the released noise plus clipping bias the run reports (1.5 + 1.5); 3.3 and
    5.3 (claimed 5.6 and 5.5) with the skew check."""
    path = compiled(stan_test_model("scale_flat"))
    n = 2000

    def worst(data_seed, **settings):
        rng = np.random.default_rng(data_seed)
        x = rng.normal(170.0, 10.0, n)
        y = -50.0 + 0.8 * x + rng.normal(0.0, 6.0, n)
        mean, sd = densities.NormalRegression(np.column_stack([np.ones(n), x]), y).exact()
        model = stan_dp.RowModel(path, {"N": n, "x": x, "y": y})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = stan_dp.sample(model, epsilon=1.0, delta=1e-5, seed=5001, progress=False, chains=1,
                                 draws=400, settings=AdaptationSettings(**settings))
        est = np.array([float(fit.posterior["alpha"].mean()), float(fit.posterior["beta"].mean()),
                        float(np.log(fit.posterior["sigma"]).mean())])
        claimed = fit.attrs["max_noise_sd_in_posterior_sds"] + fit.attrs["clipping_bias_bound"]
        return float(np.max(np.abs(est - mean) / sd)), claimed

    new = [worst(seed) for seed in (0, 1)]
    # the counterfactual needs the pool's curvature as it was then too (every round's curvature in
    # the mean): leaving out the rounds made in frames much narrower than the current one keeps these
    # runs at 3.4-4.1 sds (claimed 5.7) with or without the disagreement test
    monkeypatch.setattr(pooling, "curvature_weights", plain_curvature_weights)
    monkeypatch.setattr(pooling, "_rounds_agree", lambda rounds, frame: True)
    # and the paths of before the first Newton step's trust region (session 56): with the region at
    # 10 these counterfactual runs ended 3.0 and 3.8 sds off
    old = [worst(seed, first_radius=math.inf) for seed in (0, 1)]
    assert all(error > 10.0 for error, _ in old), old
    assert all(error < 6.0 and error < 2.0 * claimed for error, claimed in new), new
