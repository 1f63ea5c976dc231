"""The clipping bias a scale parameter's rows leave: the tail scale of ``z^2 - 1``.

A parameter declared with a lower bound only (``real<lower=0> sigma``) is sampled on the log
scale, where a normal likelihood's per-row gradient is ``z^2 - 1``: skewed, with an exponential
tail of scale 2 in ``z^2``.  In the posterior's frame (sd of ``log sigma`` ``1 / sqrt(2 n)``) every
row beyond the clip bound pushes ``sigma`` up by about ``sqrt(2 / n)`` more than clipping lets it,
so the bias per clipped row is about that tail scale (``stan_dp.adaptation.result
.scale_bias_per_row``), not the fixed fraction of the bound that GLM rows' scattered excesses add.
Oracles: the root of the clipped score of a normal model in the exact posterior frame (no noise),
and the exact posterior of ``sigma`` (flat priors: ``p(sigma | y) ~ sigma^-(n-1) exp(-S / 2 sigma^2)``).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import optimize

import stan_dp
from conftest import bundled, logistic_data, stan_test_model
from densities import flat_prior_sigma_posterior
from stan_dp.adaptation.result import BIAS_PER_CLIPPED_ROW_HIGH, scale_bias_per_row


def _clipped_root(y: np.ndarray, k: float) -> tuple[float, int]:
    """Shift of ``log sigma`` (posterior sds) of the root of the normal model's score clipped at
    whitened norm ``k / sqrt(n)`` in the exact posterior frame, and the rows clipped there."""
    n = y.size
    s = y.std()
    frame = np.diag([s / math.sqrt(n), 1.0 / math.sqrt(2.0 * n)])
    bound = k / math.sqrt(n)

    def clipped(theta):
        sigma = math.exp(theta[1])
        z = (y - theta[0]) / sigma
        rows = np.column_stack([z / sigma, z * z - 1.0]) @ frame
        norms = np.linalg.norm(rows, axis=1)
        return (rows * np.minimum(1.0, bound / norms)[:, None]).sum(axis=0), int(np.sum(norms > bound))

    root = optimize.root(lambda t: clipped(t)[0], [y.mean(), math.log(s)]).x
    return (root[1] - math.log(s)) * math.sqrt(2.0 * n), clipped(root)[1]


def test_a_clipped_scale_row_biases_by_about_the_tail_scale():
    # every clipped row pulls log sigma down (the rows cut are the large residuals), each by about
    # the tail scale sqrt(2 / n): measured 0.5-1.6 of it (the most where few rows are clipped and
    # one large residual weighs), wherever the bound is, so ``rho`` falls like 1 / (bound sqrt(n))
    ratios = []
    for n in (1000, 3000, 10000):
        for seed in range(3):
            y = np.random.default_rng(seed).normal(170.0, 10.0, n)
            for k in (3.5, 4.5, 5.9):
                shift, clipped = _clipped_root(y, k)
                if clipped >= 10:
                    assert shift < 0.0
                    ratios.append(-shift / clipped / math.sqrt(2.0 / n))
    assert len(ratios) >= 15
    assert 0.5 < min(ratios) and max(ratios) < 1.6
    # the reported rho at a bound (units of the bound): the tail scale with its factor, or the GLM
    # rows' value where that is larger (the program's other coordinates)
    for n, k in ((1000, 4.5), (10000, 5.9), (1000, 20.0)):
        tail = 1.2 * math.sqrt(2.0) / k
        assert scale_bias_per_row(k / math.sqrt(n), n) == pytest.approx(max(tail, BIAS_PER_CLIPPED_ROW_HIGH))
    assert 1.2 * math.sqrt(2.0) / 4.5 > BIAS_PER_CLIPPED_ROW_HIGH   # at the usual bounds it is larger


def test_the_program_decides_which_bias_per_row_is_reported(compiled, search_result):
    captured = search_result
    y = np.random.default_rng(0).normal(170.0, 10.0, 1000)
    scale = stan_dp.RowModel(compiled(stan_test_model("normal_scale")), {"N": y.size, "y": y})
    assert scale.log_transformed_parameters == ("sigma",)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(scale, epsilon=16.0, delta=1e-5, seed=1, draws=50, progress=False)
    # the search's result (its rho the GLM rows'), and what the run reports from it (adaptive: the
    # count at the final bound alone, no tail term)
    result = captured["result"]
    bound = result.grad_clip * result.clip_adjust
    assert result.clipped_rows > 0.0
    assert fit.attrs["clipping_bias_bound"] == pytest.approx(
        scale_bias_per_row(bound, 1000) * bound * result.clipped_rows)
    assert fit.attrs["clipping_bias_bound"] > result.clipping_bias_bound

    glm = stan_dp.RowModel(compiled(bundled("logistic_regression")), logistic_data(n=1000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(glm, epsilon=16.0, delta=1e-5, seed=1, draws=50, progress=False)
    result = captured["result"]
    assert result.bias_per_row == BIAS_PER_CLIPPED_ROW_HIGH
    assert fit.attrs["clipping_bias_bound"] == pytest.approx(result.clipping_bias_bound)


@pytest.mark.parametrize("n, data_seed", [(1000, 1), (200, 0)])
def test_a_run_that_clipping_left_half_a_sd_off_in_sigma_warns(n, data_seed, compiled):
    """Heights in cm (170 +- 10), epsilon = 16: the raised bound still clips rows whose ``z^2 - 1``
    all pull ``sigma`` down, and some runs end more than 0.5 posterior sds low.  With the GLM rows'
    bias per clipped row those said nothing (data set 1 at 1,000 rows: noise seeds 1, 3 and 8, 0.51-
    0.72 sds off; at 200 rows data set 0, seed 7, 0.64); each such run must warn.  Since the bound
    starts at ``scale_clip_inflation``'s for such a program, fewer runs miss: over noise seeds 1-12
    the mean |error| went 0.47 -> 0.31 (1,000 rows; misses 6 -> 2, seeds 8 and 10) and 0.55 ->
    0.19 (200 rows; 9 -> 0), and over seeds 1-12 it is below 0.4 (0.48 and 0.58 over seeds 1-8
    before).  Since a step-back keeps a frame its release showed ten times too wide (session 79,
    ``newton.KEEP_FRAME_CURVATURE``) seed 8 ends 0.21 off, not 0.52, and seed 10 (0.70, warned) is
    the miss that exercises the case; no other run of seeds 1-24 changed."""
    y = np.random.default_rng(data_seed).normal(170.0, 10.0, n)
    model = stan_dp.RowModel(compiled(stan_test_model("normal_scale")), {"N": n, "y": y})
    mean, sd = flat_prior_sigma_posterior(y)
    misses, errors = 0, []
    for seed in range(1, 13):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=seed, draws=200, progress=False)
        error = abs(float(fit.posterior["sigma"].mean()) - mean) / sd
        errors.append(error)
        if error > 0.5:
            misses += 1
            assert any(issubclass(w.category, stan_dp.UtilityWarning) for w in caught), (seed, error)
    assert misses >= (1 if n == 1000 else 0)   # the case is exercised (seed 10 at 1,000 rows)
    assert np.mean(errors) < 0.4   # the scale's bound (scale_clip_inflation)


def _rule_kappa(n: int, pld_mean: float) -> float:
    """clip_inflation's closed form (docs/adaptation.md §3): ``max(1.25, 1.4 sqrt(ln(n mu / 2) - 5))``,
    ``mu = sqrt(2 M)``, replace-one."""
    return max(1.25, 1.4 * math.sqrt(max(0.0, math.log(n * math.sqrt(2.0 * pld_mean) / 2.0) - 5.0)))


def _balanced_kappa(rule: float, n: int, d: int, per_kappa: float) -> float:
    """Oracle for ``scale_clip_inflation``: the whitened bound ``b`` minimising ``n E[(w - b)+]^2 +
    (per_kappa b / sqrt(chi2_{d,0.9}))^2``, ``w = (z^2 - 1) / sqrt(2)``, by quadrature of the chi2_1
    density and a grid (not the closed form nor the bounded search), as ``kappa``, at least the rule."""
    from scipy import integrate, stats

    root = math.sqrt(stats.chi2.ppf(0.9, d))

    def excess(b):
        c = 1.0 + math.sqrt(2.0) * b
        return integrate.quad(lambda x: (x - c) * stats.chi2.pdf(x, 1), c, np.inf)[0] / math.sqrt(2.0)

    grid = np.linspace(rule * root, 20.0 * rule * root, 4001)
    errors = [n * excess(b) ** 2 + (per_kappa * b / root) ** 2 for b in grid]
    return max(rule, float(grid[int(np.argmin(errors))]) / root)


def test_a_likelihood_scale_starts_the_gradient_bound_where_its_bias_balances_the_noise(compiled, search_result):
    """A program whose likelihood has a log-scale scale (``normal_scale``: ``sigma``) starts the
    search's gradient bound at the ``kappa`` that balances that scale's clipping bias against the
    noise (``scale_clip_inflation``), above the rule's at ``dim`` 2; a GLM without one (the bundled
    logistic regression) and a Bernoulli program whose only such parameter is a prior's scale
    (``hierarchical_logit``'s ``tau``) keep the rule's.  Oracles: the rule's closed form with the
    plan's public budget, ``C_w = sqrt(chi2_{d,0.9} / n)``, the balance by quadrature and a grid
    (``_balanced_kappa``), and the root of the normal model's clipped score without noise in the
    exact frame (``_clipped_root``), which the raised bound (1.49 times the rule's) moves from about
    2 posterior sds low to within 1 at 1,000 rows, epsilon = 4 (0.37-0.72 over 3 data sets)."""
    from scipy import stats

    from stan_dp.adaptation import AdaptationSettings
    from stan_dp.adaptation.forecast import forecast
    from stan_dp.adaptation.plan import rounds_share
    from stan_dp.auto import _adaptation_plan, _likelihood_scale

    n, eps = 1000, 4.0
    y = np.random.default_rng(0).normal(170.0, 10.0, n)
    scale = stan_dp.RowModel(compiled(stan_test_model("normal_scale")), {"N": n, "y": y})
    glm = stan_dp.RowModel(compiled(bundled("logistic_regression")), logistic_data(n=n))
    rng = np.random.default_rng(1)
    x = rng.normal(30.0, 5.0, n)
    prior_scale = stan_dp.RowModel(compiled(stan_test_model("hierarchical_logit")),
                                   {"N": n, "J": 5, "g": rng.integers(1, 6, n), "x": x,
                                    "y": (rng.random(n) < 0.4).astype(int)})
    assert (_likelihood_scale(scale), _likelihood_scale(glm), _likelihood_scale(prior_scale)) == (True, False, False)
    assert prior_scale.log_transformed_parameters == ("tau",)
    kappas = {}
    for name, model in (("scale", scale), ("glm", glm), ("prior scale", prior_scale)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stan_dp.sample(model, epsilon=eps, delta=1e-5, seed=1, draws=20, progress=False)
        d = int(model.dim)
        plan, pld_mean, _ = _adaptation_plan(eps, 1e-5, 1.0, AdaptationSettings(), n, d)
        rule = _rule_kappa(n, pld_mean)
        if name == "scale":
            share = rounds_share(plan) * (1.0 - plan.clip_share) * (1.0 - plan.hessian_share)
            per_kappa = forecast(n, d, eps, 1e-5, kappa=1.0, share=share).expected_error
            kappas[name] = (_balanced_kappa(rule, n, d, per_kappa), rule)
        else:
            kappas[name] = (rule, rule)
        c_w = math.sqrt(stats.chi2.ppf(0.9, d) / n)
        assert search_result["result"].grad_clip == pytest.approx(kappas[name][0] * c_w, rel=2e-3), name
    kappa, rule = kappas["scale"]
    assert kappa > 1.4 * rule   # d = 2: the scale's one coordinate at nearly full length
    from scipy import integrate

    from stan_dp.adaptation.plan import scale_tail_excess
    for b in (0.5, 2.0, 4.0, 6.0):   # the closed form against quadrature of the chi2_1 density
        c = 1.0 + math.sqrt(2.0) * b
        quad = integrate.quad(lambda v: (v - c) * stats.chi2.pdf(v, 1), c, np.inf)[0] / math.sqrt(2.0)
        assert scale_tail_excess(b) == pytest.approx(quad, rel=1e-8)
    # the premise: at the normal model's bound, the clipped root's bias without noise
    for seed in range(3):
        data = np.random.default_rng(seed).normal(170.0, 10.0, n)
        root = math.sqrt(stats.chi2.ppf(0.9, 2))
        at_rule, raised = _clipped_root(data, rule * root)[0], _clipped_root(data, kappa * root)[0]
        assert at_rule < -1.5 and -1.0 < raised < 0.0
