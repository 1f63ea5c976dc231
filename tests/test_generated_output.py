"""Generated quantities computed from the parameters, shared data and Stan's RNG come with the draws.

``stan_dp.stan_source.row_free_generated_quantities`` reads the program (never the data) for the
generated quantities none of whose writes reads a row variable, the row count or a value derived
from them (a transformed parameter that reads the rows included); the zero-row instance of the
model, which holds the shared data only, computes them at each draw with its own random number
generator (:meth:`stan_dp.model.ZeroRowPart.transformed_values`).  Checked against their closed
form and their sampling distribution, against a model whose rows all differ, end to end, and
where the block cannot run without rows.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

import stan_dp
from conftest import stan_test_model
from stan_dp.stan_source import row_free_generated_quantities


def _data(seed: int, n: int = 200, summarise: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(50.0, 10.0, n)
    return {"N": n, "x": x, "y": 3.0 + 0.2 * x + rng.normal(0.0, 2.0, n), "x_new": 60.0,
            "summarise": summarise}


def test_the_program_reading_carries_rows_through_transformed_parameters():
    program = """
data { int N; vector[N] x; vector[N] y; real x_new; }
transformed data { real m = mean(x); }
parameters { real a; real b; real<lower=0> sigma; }
transformed parameters { vector[N] mu = a + b * x; real a2 = 2 * a; }
model { y ~ normal(mu, sigma); }
generated quantities {
  real sigma2 = square(sigma);
  real y_new = normal_rng(a + b * x_new, sigma);
  vector[N] log_lik;
  for (n in 1:N) log_lik[n] = normal_lpdf(y[n] | mu[n], sigma);
  array[N] real y_rep = normal_rng(mu, sigma);
  real centred = a + b * m;
  real from_tp = a2 + 1;
  real count = 0;
  for (n in 1:N) count += 1;
}
"""
    assert row_free_generated_quantities(program, "N", ["x", "y"]) == ("sigma2", "y_new", "from_tp")
    assert row_free_generated_quantities("parameters { real a; } model { a ~ std_normal(); }", "N", []) == ()


def test_the_values_are_the_closed_form_and_the_prediction_its_distribution(compiled):
    """At a fixed point ``sigma2 = sigma^2`` exactly and 4,000 draws of ``y_new`` have the mean
    ``a + b x_new`` and sd ``sigma`` of ``normal_rng`` (within 4.5 standard errors); a model whose
    every row and row count differ gives the same values from the same RNG seed."""
    path = compiled(stan_test_model("generated_output"))
    model, other = stan_dp.RowModel(path, _data(0)), stan_dp.RowModel(path, _data(1, n=90))
    assert model.output_generated == ("sigma2", "y_new") and not model.generated_blocked
    assert model.omitted_quantities == {"transformed parameters": ["mu"],
                                        "generated quantities": ["log_lik", "mean_mu"]}
    theta = np.array([1.5, 0.25, math.log(2.0)])
    rng, rng_other = model.quantity_rng(7), other.quantity_rng(7)
    draws = []
    for _ in range(4000):
        values = model.transformed_values(theta, rng)
        np.testing.assert_allclose(values["sigma2"], 4.0, rtol=1e-12)
        draws.append(values["y_new"])
        np.testing.assert_array_equal(other.transformed_values(theta, rng_other)["y_new"], values["y_new"])
    draws = np.asarray(draws, dtype=float)
    mean, sd = 1.5 + 0.25 * 60.0, 2.0
    assert abs(draws.mean() - mean) < 4.5 * sd / math.sqrt(draws.size)
    assert abs(draws.std() / sd - 1.0) < 4.5 / math.sqrt(2 * draws.size)
    assert model.transformed_values(theta) == {}   # without an RNG: no generated quantity


def test_a_fit_returns_them_with_the_draws_reproducibly(compiled):
    """``stan_dp.sample`` (epsilon = 16, seed 1): ``sigma2`` is the square of each ``sigma`` draw,
    ``y_new`` is there and the same in a second run with the same seed, and the quantities that
    read the rows are named as left out."""
    model = stan_dp.RowModel(compiled(stan_test_model("generated_output")), _data(0))
    fits = []
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=200))
    post = fits[0].posterior
    np.testing.assert_allclose(post["sigma2"].values, post["sigma"].values ** 2, rtol=1e-12)
    np.testing.assert_array_equal(post["y_new"].values, fits[1].posterior["y_new"].values)
    predicted = post["a"].values + 60.0 * post["b"].values
    assert np.corrcoef(post["y_new"].values.ravel(), predicted.ravel())[0, 1] > 0.0   # it follows a + b x_new
    assert fits[0].attrs["transformed_in_output"] == "sigma2, y_new"
    assert all(name in fits[0].attrs["not_in_output"] for name in ("mu", "log_lik", "mean_mu"))
    assert not {"mu", "log_lik", "mean_mu"} & set(post.data_vars)


def test_a_block_that_needs_rows_returns_none_and_says_why(compiled):
    """With ``summarise = 1`` the block takes a mean over the rows, which throws at zero rows:
    no generated quantity is returned (the block runs whole or not at all), and the note says so."""
    model = stan_dp.RowModel(compiled(stan_test_model("generated_output")), _data(0, summarise=1))
    assert model.output_generated == () and model.generated_blocked
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, seed=1, progress=False, draws=100)
    assert not {"sigma2", "y_new"} & set(fit.posterior.data_vars)
    assert "sigma2" in fit.attrs["not_in_output"] and "cannot run without the rows" in fit.attrs["not_in_output"]


def test_a_chain_in_the_private_frame_returns_them_too(compiled):
    """``method="penalty"`` runs its chain on the model seen in the adaptation's frame
    (:class:`stan_dp.adaptation.whitened.WhitenedDensity`); its draws carry the transformed
    parameters and generated quantities of the model's own point, and the same notes."""
    model = stan_dp.RowModel(compiled(stan_test_model("generated_output")), _data(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(model, epsilon=16.0, delta=1e-5, method="penalty", seed=1, progress=False,
                             chains=2, iterations=100, warmup=20)
    post = fit.posterior
    np.testing.assert_allclose(post["sigma2"].values, post["sigma"].values ** 2, rtol=1e-12)
    assert "y_new" in post.data_vars and fit.attrs["transformed_in_output"] == "sigma2, y_new"
    assert "log_lik" in fit.attrs["not_in_output"]
