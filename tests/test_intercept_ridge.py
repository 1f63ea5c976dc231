"""Along an intercept ridge the rows' log likelihood is flat: the prior alone sets the mode there.

``y ~ normal(mu + a[g] + b * x, sigma)`` depends on ``mu`` and the group effects ``a`` only
through ``mu + a[g]``, so moving ``mu`` by ``t`` and every ``a_j`` by ``-t`` leaves every row's
log likelihood exactly unchanged.  The program says so (public:
:func:`stan_dp.stan_source.intercept_ridges`, :attr:`stan_dp.model.ZeroRowPart.ridge_coordinates`),
and the private search puts its estimate at the log prior's maximum along that direction
(:func:`stan_dp.adaptation.groups.ridges_at_prior_mode`): the rows' released gradient there is
noise.  Checked: the program reading on the forms users write and on the forms that must not be
read; on a compiled model, that the rows' log likelihood is invariant along the direction it gives
(an independent check of the reading); the move against the closed form and a grid; and that the
search's estimate ends at the maximum where the ridge is declared and not where it is not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import stan_dp
from stan_dp.adaptation import groups
from stan_dp.stan_source import _enclosing_sum, intercept_ridges
from densities import ZeroMeanIntercept, radon_like_rows
from conftest import stan_test_model, traced_adaptation

DATA = "data { int N; int J; array[N] int<lower=1, upper=J> g; vector[N] x; vector[N] y; real s0; }\n"
PARAMS = "parameters { real mu; vector[J] a; real b; real<lower=0> sigma; real<lower=0> tau; }\n"


def _read(model: str, params: str = PARAMS, extra: str = "") -> dict[str, str]:
    return intercept_ridges(DATA + extra + params + "model { " + model + " }")


@pytest.mark.parametrize("model", [
    "a ~ normal(0, tau); y ~ normal(mu + a[g] + b * x, sigma);",
    "a ~ normal(0, tau); mu ~ normal(0, s0); y ~ normal(b * x + a[g] + mu, sigma);",
    "for (j in 1:J) a[j] ~ normal(0, 10); for (n in 1:N) y[n] ~ normal(mu + a[g[n]] + b * x[n], sigma);",
    "target += normal_lpdf(y | mu + a[g], sigma);",                      # no prior on a: fixed effects
    "y ~ normal(exp(1e-3 * x + mu + a[g]), sigma);",                     # inside a call; an exponent
    "y ~ normal((mu + a[g]) * b, sigma);",                               # the sum in brackets
])
def test_the_reading_finds_an_intercept_beside_every_use(model):
    assert _read(model) == {"a": "mu"}


@pytest.mark.parametrize("model, why", [
    ("y ~ normal(mu - a[g], sigma);", "a subtracted"),
    ("y ~ normal(2 * mu + a[g], sigma);", "mu scaled"),
    ("y ~ normal(mu + a[g] * x, sigma);", "a scaled"),
    ("y ~ normal(mu + a[g], exp(mu));", "mu in the scale too"),
    ("y ~ normal(mu + a[g], sigma); sum(a) ~ normal(0, 0.01);", "a bare elsewhere"),
    ("y ~ normal(mu + a[g], sigma); b ~ normal(mu, 1);", "mu elsewhere"),
    ("y ~ normal(mu + a[g], sigma); x ~ normal(a[g], 1);", "a without mu"),
    ("if (mu > 0) y ~ normal(mu + a[g], sigma);", "mu in a condition"),
    ("y ~ normal(mu + a[g], sigma); mu ~ normal(mean(y), 1);", "mu's prior reads the rows"),
    ("y ~ normal(mu + a[g], sigma); a ~ normal(x[1], tau);", "a's prior reads a row"),
    ("y ~ normal(mu + a[g] > 0 ? 1 : 0, sigma);", "a condition"),
])
def test_the_reading_refuses_a_use_it_cannot_prove_flat(model, why):
    assert _read(model) == {}, why


def test_the_reading_refuses_a_constrained_intercept_or_a_transformed_parameter():
    model = "a ~ normal(0, tau); y ~ normal(mu + a[g], sigma);"
    assert _read(model, PARAMS.replace("real mu;", "real<lower=0> mu;")) == {}
    assert _read(model, PARAMS.replace("real mu;", "real<offset=1, multiplier=2> mu;")) == {}
    tp = PARAMS + "transformed parameters { real m2 = 2 * mu; }\n"
    assert _read(model, tp) == {}


def test_the_enclosing_sum_splits_at_top_level_signs_only():
    text = "y ~ normal(-mu + a[g - 1] + 2.5e-3 * f(x, mu) - b, s)"
    at = text.index("a[")
    assert _enclosing_sum(text, at, text.index("]") + 1) == [
        ("-", "mu"), ("+", "a[g - 1]"), ("+", "2.5e-3 * f(x, mu)"), ("-", "b")]
    text = "target += normal_lpdf(y | mu + a[g], s)"
    assert _enclosing_sum(text, text.index("mu"), text.index("mu") + 2) == [("+", "mu"), ("+", "a[g]")]
    text = "z = mu <= a[g]"
    assert _enclosing_sum(text, text.index("a["), len(text)) is None


def test_a_compiled_model_s_rows_are_flat_along_the_ridge_it_reads(compiled):
    """The reading against the compiled model: along the direction it gives (``mu`` +1, every
    ``a_j`` -1) every row's log likelihood is unchanged to round-off, while moving ``mu`` alone
    changes it and the log prior changes along the ridge (it is not flat by accident)."""
    rng = np.random.default_rng(0)
    data = {"N": 60, "J": 5, "g": rng.integers(1, 6, size=60), "y": rng.normal(3.0, 1.0, size=60)}
    model = stan_dp.RowModel(compiled(stan_test_model("zero_mean_groups")), data)
    names = model.param_names
    members = tuple(j for j, n in enumerate(names) if n.startswith("a."))
    assert model.ridge_coordinates == ((names.index("mu"), members),)
    hierarchical = stan_dp.RowModel(compiled(stan_test_model("hierarchical_intercept")), data)
    assert hierarchical.ridge_coordinates == ()   # a[g] without an intercept beside it
    theta = rng.normal(size=model.dim)
    theta[names.index("tau")] = -5.0   # tau = 100 logistic(-5) = 0.67: the prior bends along the ridge
    v = np.zeros(model.dim)
    v[names.index("mu")], v[list(members)] = 1.0, -1.0
    rows = model.row_log_lik(theta)
    for t in (-3.0, 0.7, 5.0):
        np.testing.assert_allclose(model.row_log_lik(theta + t * v), rows, rtol=1e-12, atol=1e-10)
        assert abs(model.log_prior(theta + t * v) - model.log_prior(theta)) > 1e-3
    mu_only = np.where(np.arange(model.dim) == names.index("mu"), 1.0, 0.0)
    assert np.max(np.abs(model.row_log_lik(theta + 0.7 * mu_only) - rows)) > 1e-3


def _zero_mean(bounded: bool = False) -> ZeroMeanIntercept:
    return ZeroMeanIntercept(*radon_like_rows(0), 20, bounded=bounded)


def _along(density: ZeroMeanIntercept) -> np.ndarray:
    intercept, members = density.ridge_coordinates[0]
    v = np.zeros(density.dim)
    v[intercept], v[list(members)] = 1.0, -1.0
    return v


def test_the_move_against_the_closed_form():
    """``mu ~ normal(0, 100)``, ``a_j ~ normal(0, tau)``: along ``v`` the log prior is
    ``-(mu + t)^2 / (2 s^2) - sum_j (a_j - t)^2 / (2 tau^2)``, maximal at
    ``t* = (sum_j a_j / tau^2 - mu / s^2) / (J / tau^2 + 1 / s^2)``."""
    density = _zero_mean()
    rng = np.random.default_rng(1)
    theta = np.r_[1.2, math.log(0.3), rng.normal(0.4, 0.3, 20), math.log(0.75)]
    tau, a, mu = 0.3, theta[2:22], theta[0]
    t_star = (a.sum() / tau**2 - mu / 100.0**2) / (20 / tau**2 + 1 / 100.0**2)
    moved = groups.ridges_at_prior_mode(density, theta)
    np.testing.assert_allclose(moved, theta + t_star * _along(density), rtol=0, atol=1e-8)
    density.ridge_coordinates = ()
    np.testing.assert_array_equal(groups.ridges_at_prior_mode(density, theta), theta)


class _CauchyIntercept(ZeroMeanIntercept):
    """:class:`ZeroMeanIntercept` with ``mu ~ cauchy(0, 0.5)`` (not log-concave: the move is not
    one Newton step)."""

    def log_prior_grad(self, th: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = super().log_prior_grad(th)
        mu = th[0]
        value += 0.5 * (mu / 100.0) ** 2 - math.log1p((mu / 0.5) ** 2)
        grad[0] += mu / 1e4 - 2.0 * mu / (0.25 + mu * mu)
        return value, grad

    def log_prior(self, th: np.ndarray) -> float:
        return self.log_prior_grad(th)[0]


def test_the_move_against_a_grid_with_a_heavy_tailed_intercept_prior():
    density = _CauchyIntercept(*radon_like_rows(0), 20, bounded=False)
    theta = np.r_[2.0, math.log(0.2), np.full(20, -1.1), math.log(0.75)]
    v = _along(density)
    grid = np.linspace(-4.0, 2.0, 600_001)
    values = [density.log_prior(theta + t * v) for t in grid[::100]]
    coarse = grid[::100][int(np.argmax(values))]
    fine = np.linspace(coarse - 1e-3, coarse + 1e-3, 2001)
    t_grid = fine[int(np.argmax([density.log_prior(theta + t * v) for t in fine]))]
    moved = groups.ridges_at_prior_mode(density, theta)
    assert abs((moved - theta)[0] - t_grid) < 2e-6
    np.testing.assert_allclose(moved - theta, (moved - theta)[0] * v, atol=1e-12)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_search_ends_at_the_prior_s_maximum_along_a_declared_ridge(seed):
    """The private search (epsilon = 16; these runs end unsettled) reports a mode at which the log
    prior's slope along the ridge is 0; without the ridge declared it is not (the rows' released
    gradient along it left the mean of the elements off by noise: ``mean(a)`` 0.04 of ``mu``'s
    0.065 posterior sd at seed 1)."""
    density = _zero_mean()
    v = _along(density)

    def slope_in_prior_sds(mode: np.ndarray) -> float:
        slope = float(density.log_prior_grad(mode)[1] @ v)
        tau = math.exp(mode[1])
        return abs(slope) / math.sqrt(20.0 / tau**2)   # curvature along v: J / tau^2 (+ 1e-4)

    assert slope_in_prior_sds(traced_adaptation(density, 16.0, seed)[1].result.mode) < 1e-6
    density.ridge_coordinates = ()
    assert slope_in_prior_sds(traced_adaptation(density, 16.0, seed)[1].result.mode) > 1e-3
