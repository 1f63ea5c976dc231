"""Transformed parameters computed from the parameters and shared data alone come with the draws.

``stan_dp.stan_source.row_free_transformed_parameters`` reads the program (never the data) for the
transformed parameters none of whose writes reads a row variable, the row count or a value
derived from them; a zero-row instance of the model, which holds the shared data only, computes
them at each draw (:meth:`stan_dp.model.ZeroRowPart.transformed_values`).  Checked against their
closed form, against a model whose rows are all different (the values must not move), and end to
end: the draws carry them, consistent with the parameters' draws, and the others are named as
left out.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import stan_dp
from stan_dp.stan_source import row_free_transformed_parameters
from conftest import stan_test_model


def _data(seed: int, n: int = 300) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.3 + x @ np.array([1.0, -0.5, 0.0]))))).astype(int)
    return {"N": n, "K": 3, "X": x, "y": y, "s": 2.5}


def test_the_program_reading_follows_every_write():
    """A declaration's initialiser, a later assignment, an assignment in a loop, its sizes and the
    loop around it, a value derived in ``transformed data`` and one transformed parameter from
    another: each carries the rows or the row count (or a shape query of a row container)
    forward."""
    program = """
data { int N; int K; matrix[N, K] X; vector[N] y; vector[K] w; }
transformed data { vector[N] ly = log(y); real s = sd(w); real m = mean(y); }
parameters { real a; vector[K] z; real<lower=0> tau; real ls; }
transformed parameters {
  vector[K] beta = z * tau * s;
  real<lower=0> sigma = exp(ls);
  vector[N] eta = a + X * beta;
  real c = m * a;
  real d;
  d = sigma * 2;
  vector[K] e;
  for (k in 1:K) e[k] = beta[k] + 1;
  vector[K] f;
  for (k in 1:K) f[k] = eta[1];
  real g = num_elements(ly);
  real h = sum(e) + d;
  real i = 0;
  for (n in 1:N) i += a;
}
model { y ~ normal(eta, sigma); }
"""
    assert row_free_transformed_parameters(program, "N", ["X", "y"]) == ("beta", "sigma", "d", "e", "h")
    assert row_free_transformed_parameters("parameters { real a; } model { a ~ std_normal(); }", "N", []) == ()


def test_the_returned_values_are_the_closed_form_and_never_see_a_row(compiled):
    """``beta = s tau z`` and ``scaled_alpha = alpha / s`` at random points, the same from a model
    whose every row differs (and whose row count differs): the zero-row instance holds no row."""
    path = compiled(stan_test_model("transformed_output"))
    model = stan_dp.RowModel(path, _data(0))
    other = stan_dp.RowModel(path, _data(1, n=120))
    assert model.output_transformed == ("beta", "scaled_alpha")
    assert model.omitted_quantities["transformed parameters"] == ["eta", "n_rows"]
    rng = np.random.default_rng(2)
    for _ in range(5):
        theta = rng.normal(size=model.dim)
        values, constrained = model.transformed_values(theta), model.constrain(theta)
        np.testing.assert_allclose(values["beta"], 2.5 * constrained["tau"] * constrained["z"], rtol=1e-12)
        np.testing.assert_allclose(values["scaled_alpha"], constrained["alpha"] / 2.5, rtol=1e-12)
        for name, value in other.transformed_values(theta).items():
            np.testing.assert_array_equal(value, values[name])


def test_a_fit_returns_them_with_the_draws(compiled):
    """``stan_dp.sample`` (epsilon = 16, seed 1): the posterior holds ``beta`` and
    ``scaled_alpha``, draw for draw the closed form of the parameters' draws, not ``eta`` or
    ``n_rows``, which ``attrs["not_in_output"]`` names."""
    model = stan_dp.RowModel(compiled(stan_test_model("transformed_output")), _data(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=200)
    post = fit.posterior
    assert {"beta", "scaled_alpha"} <= set(post.data_vars) and not {"eta", "n_rows"} & set(post.data_vars)
    np.testing.assert_allclose(post["beta"].values, 2.5 * post["tau"].values[..., None] * post["z"].values,
                               rtol=1e-12)
    np.testing.assert_allclose(post["scaled_alpha"].values, post["alpha"].values / 2.5, rtol=1e-12)
    assert "eta" in fit.attrs["not_in_output"] and "n_rows" in fit.attrs["not_in_output"]
    assert "beta" not in fit.attrs["not_in_output"]
    assert fit.attrs["transformed_in_output"] == "beta, scaled_alpha"
    # against a reference of the parameters alone (exact draws have no transformed parameters)
    # the fit's own are noted and left out; a parameter the reference lacks still refuses
    reference = {name: post[name].values for name in ("alpha", "z", "tau")}
    result = stan_dp.compare(fit, reference)
    assert set(result.table.index) == {"alpha", "z[1]", "z[2]", "z[3]", "tau"}
    assert ("not compared (transformed parameters or generated quantities the reference lacks): beta, "
            "scaled_alpha") in result.notes
    with pytest.raises(ValueError, match="missing from the reference: tau"):
        stan_dp.compare(fit, {name: post[name].values for name in ("alpha", "z")})
