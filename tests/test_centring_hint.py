"""The unsettled search's advice to centre predictors goes only where the program has one.

An intercept-slope ridge needs a predictor: a program whose rows hold one variable (a normal mean
and scale, a mixture of ``y`` alone) used to be told to centre its predictors whenever its search
did not settle.  The rule (:func:`stan_dp.auto._centring_hint`) reads the program's row layout,
which is public; each check below would fail with the old rule (two coordinates were enough).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import stan_dp
from conftest import stan_test_model
from stan_dp.auto import _centring_hint
from stan_dp.stan_source import covariate_row_variables


class _Model:
    def __init__(self, dim, row_vars=None, covariates=None):
        self.dim = dim
        if row_vars is not None:
            self.row_vars = row_vars
        self.covariates = covariates


def test_the_rule():
    assert _centring_hint(_Model(1, ("x", "y"))) == ""             # one coordinate: no ridge
    assert _centring_hint(_Model(2, ("y",))) == ""                 # no predictor among the rows
    assert "centred predictors" in _centring_hint(_Model(2, ("x", "y")))
    assert "centred predictors" in _centring_hint(_Model(3))        # a density that does not say
    # rows holding an outcome and indices only (an item-response model): no slope to centre
    assert _centring_hint(_Model(20, ("item", "person", "y"), covariates=())) == ""
    assert "centred predictors" in _centring_hint(_Model(20, ("item", "person", "y", "x"), covariates=("x",)))


def _program(model: str) -> str:
    return "data { int N; }\nparameters { real a; }\nmodel { " + model + " }"


@pytest.mark.parametrize("model, row_vars, covariates", [
    ("y ~ bernoulli_logit(theta[person] - b[item]);", ("item", "person", "y"), ()),
    ("for (n in 1:N) y[n] ~ bernoulli_logit(theta[person[n]] - b[item[n]] + c * x[n]);",
     ("item", "person", "y", "x"), ("x",)),
    ("for (n in 1:N) target += w[n] * normal_lpdf(y[n] | a[g[n]], s);", ("y", "w", "g"), ("w",)),
    ("for (n in 1:N) if (y[n] > 0) y[n] ~ lognormal(a + b * income[n], s);", ("y", "income"), ("income",)),
    ("y ~ bernoulli_logit_glm(X, alpha, beta);", ("X", "y"), ("X",)),
    ("target += normal_lccdf(c | mu, s);", ("c",), ()),
    ("y ~ normal(a[g, h], s);", ("y", "g", "h"), ("g", "h")),   # several indices: read as covariates
])
def test_covariates_are_row_variables_read_other_than_as_an_outcome_or_an_index(model, row_vars, covariates):
    assert covariate_row_variables(_program(model), row_vars) == covariates


def test_a_row_variable_read_in_transformed_data_is_a_covariate():
    program = ("data { int N; vector[N] x; vector[N] y; }\ntransformed data { vector[N] lx = log(x); }\n"
               "parameters { real a; real b; }\nmodel { y ~ normal(a + b * lx, 1); }")
    assert covariate_row_variables(program, ("x", "y")) == ("x",)


def test_compiled_models_name_their_covariates(compiled):
    rng = np.random.default_rng(0)
    groups = {"N": 40, "J": 4, "g": rng.integers(1, 5, 40), "y": rng.normal(size=40)}
    model = stan_dp.RowModel(compiled(stan_test_model("hierarchical_intercept")), groups)
    assert model.covariates == () and _centring_hint(model) == ""   # a group index and the outcome
    model = stan_dp.RowModel(compiled(stan_test_model("hierarchical_location")), groups | {"x": rng.normal(size=40)})
    assert model.covariates == ("x",) and "centred predictors" in _centring_hint(model)


def _heights(rng, n):
    return {"N": n, "y": 170 + 9 * rng.normal(size=n)}


def _metres(rng, n):
    x = 5000 + 1000 * rng.normal(size=n)   # a distance in metres around 5 km
    return {"N": n, "x": x, "y": 3 + 0.001 * x + rng.normal(size=n)}


@pytest.mark.parametrize("program, data, advised", [("normal_scale", _heights, False),
                                                    ("scale_flat", _metres, True)])
def test_an_unsettled_run_advises_centring_only_with_a_predictor(compiled, program, data, advised):
    """200 rows, epsilon = 0.5: neither search settles (the warning says so); only the regression
    on a distance in metres is told to centre it."""
    rng = np.random.default_rng(3)
    model = stan_dp.RowModel(compiled(stan_test_model(program)), data(rng, 200))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=0.5, delta=1e-5, seed=0, progress=False)
    assert "did not settle" in fit.attrs["warnings"]
    assert ("centred predictors" in fit.attrs["warnings"]) is advised
