"""Per-row log-likelihoods and gradients of RowModel against independent computations.

Oracles: BridgeStan's full-data log density and gradient (the decomposition
must hold exactly up to rounding), central finite differences, and direct
Python formulas for the bundled models' log-likelihoods.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from conftest import banana_data, bundled, linear_data, logistic_data, mixed_data, stan_test_model
from stan_dp import RowModel

CASES = {
    "logistic": (lambda: bundled("logistic_regression"), logistic_data),
    "linear_unknown_scale": (
        lambda: bundled("linear_regression_unknown_scale"),
        lambda: linear_data(unknown_scale=True),
    ),
    "linear": (lambda: bundled("linear_regression"), linear_data),
    "banana": (lambda: bundled("banana"), banana_data),
    "mixed": (lambda: stan_test_model("rows_mixed"), mixed_data),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, compiled):
    path, data = CASES[request.param]
    return request.param, RowModel(compiled(path()), data())


def points(dim: int, k: int = 3, seed: int = 11) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.5, 1.5, size=(k, dim))


def test_values_sum_to_full_log_density(case):
    _, model = case
    for theta in points(model.dim):
        full = model.bridge.log_density(theta, propto=False, jacobian=True)
        total = model.row_log_lik(theta).sum() + model.log_prior(theta)
        assert total == pytest.approx(full, rel=1e-10, abs=1e-9)


def test_gradients_sum_to_full_gradient(case):
    _, model = case
    for theta in points(model.dim):
        _, full_grad = model.bridge.log_density_gradient(theta, propto=False, jacobian=True)
        values, grads = model.row_log_lik_grad(theta)
        prior, prior_grad = model.log_prior_grad(theta)
        assert grads.shape == (model.n_rows, model.dim)
        np.testing.assert_allclose(grads.sum(axis=0) + prior_grad, full_grad, rtol=1e-9, atol=1e-8)
        # Values from the gradient call equal those from the value-only call.
        np.testing.assert_allclose(values, model.row_log_lik(theta), rtol=1e-12, atol=1e-12)
        assert prior == pytest.approx(model.log_prior(theta), rel=1e-12)


def test_row_gradients_match_central_finite_differences(case):
    _, model = case
    theta = points(model.dim, k=1, seed=5)[0]
    _, grads = model.row_log_lik_grad(theta)
    h = 1e-5
    fd = np.empty_like(grads)
    for k in range(model.dim):
        e = np.zeros(model.dim)
        e[k] = h
        fd[:, k] = (model.row_log_lik(theta + e) - model.row_log_lik(theta - e)) / (2 * h)
    np.testing.assert_allclose(grads, fd, rtol=1e-5, atol=1e-6)
    _, prior_grad = model.log_prior_grad(theta)
    fd_prior = np.array([
        (model.log_prior(theta + h * e) - model.log_prior(theta - h * e)) / (2 * h)
        for e in np.eye(model.dim)
    ])
    np.testing.assert_allclose(prior_grad, fd_prior, rtol=1e-5, atol=1e-6)


def test_row_subsets_with_repeats(case):
    _, model = case
    theta = points(model.dim, k=1, seed=6)[0]
    all_values, all_grads = model.row_log_lik_grad(theta)
    idx = np.array([model.n_rows - 1, 0, 2, 2, 0])
    values, grads = model.row_log_lik_grad(theta, idx)
    np.testing.assert_array_equal(values, all_values[idx])
    np.testing.assert_array_equal(grads, all_grads[idx])
    np.testing.assert_array_equal(model.row_log_lik(theta, idx), model.row_log_lik(theta)[idx])
    assert model.row_log_lik(theta, np.array([], dtype=int)).shape == (0,)


def test_random_subsets_equal_all_rows_bit_for_bit(compiled):
    """Index subsets go through the bridge's block read-ahead (touch_rows, blocks of 64 rows
    within each thread's chunk): every size around the block and chunk edges, with repeats,
    gives exactly the all-rows values and gradients."""
    model = RowModel(compiled(bundled("logistic_regression")), logistic_data(n=3000))
    theta = points(model.dim, k=1, seed=8)[0]
    all_values, all_grads = model.row_log_lik_grad(theta)
    all_plain = model.row_log_lik(theta)
    rng = np.random.default_rng(3)
    for size in (1, 63, 64, 65, 129, 255, 256, 257, 500, 2999, 5000):
        idx = rng.integers(0, model.n_rows, size=size)
        values, grads = model.row_log_lik_grad(theta, idx)
        assert np.array_equal(values, all_values[idx]) and np.array_equal(grads, all_grads[idx])
        assert np.array_equal(model.row_log_lik(theta, idx), all_plain[idx])


def test_results_do_not_depend_on_thread_count(compiled):
    model = RowModel(compiled(bundled("logistic_regression")), logistic_data(n=3000))
    theta = points(model.dim, k=1, seed=7)[0]
    idx = np.random.default_rng(0).integers(0, model.n_rows, size=2500)
    results = {}
    for threads in (1, 2, 3):
        model.threads = threads
        assert model.threads == threads
        results[threads] = (model.row_log_lik(theta), *model.row_log_lik_grad(theta, idx))
    for threads in (2, 3):
        for a, b in zip(results[1], results[threads]):
            assert np.array_equal(a, b)  # bit-identical, not just close


def test_logistic_rows_match_the_bernoulli_formula(compiled):
    data = logistic_data(n=50)
    model = RowModel(compiled(bundled("logistic_regression")), data)
    theta = points(model.dim, k=1, seed=8)[0]
    eta = theta[0] + data["X"] @ theta[1:]
    expected = stats.bernoulli.logpmf(data["y"], 1 / (1 + np.exp(-eta)))
    np.testing.assert_allclose(model.row_log_lik(theta), expected, rtol=1e-10)
    expected_prior = stats.norm.logpdf(theta, 0, data["prior_scale"]).sum()
    assert model.log_prior(theta) == pytest.approx(expected_prior, rel=1e-12)


def test_constrained_scale_and_jacobian(compiled):
    data = linear_data(unknown_scale=True)
    model = RowModel(compiled(bundled("linear_regression_unknown_scale")), data)
    theta = np.array([0.2, 0.9, 2.1, np.log(1.7)])
    alpha, beta, sigma = theta[0], theta[1:3], np.exp(theta[3])
    expected = stats.norm.logpdf(data["y"], alpha + data["X"] @ beta, sigma)
    np.testing.assert_allclose(model.row_log_lik(theta), expected, rtol=1e-10)
    # Prior part: normal priors; `sigma ~ normal(0, s)` on a <lower=0> parameter is
    # Stan's unnormalised-truncation normal density; plus the log-Jacobian log(sigma).
    prior = (
        stats.norm.logpdf([alpha, *beta], 0, data["prior_scale"]).sum()
        + stats.norm.logpdf(sigma, 0, data["sigma_scale"])
        + np.log(sigma)
    )
    assert model.log_prior(theta) == pytest.approx(prior, rel=1e-10)
    c = model.constrain(theta)
    assert set(c) == {"alpha", "beta", "sigma"}
    assert c["beta"].shape == (2,) and c["sigma"].shape == ()
    assert float(c["sigma"]) == pytest.approx(sigma)
    np.testing.assert_allclose(model.unconstrain(c), theta, rtol=1e-12)


def test_banana_rows_match_theorem5_likelihood(compiled):
    data = banana_data(n=20, d=3)
    model = RowModel(compiled(bundled("banana")), data)
    theta = np.array([0.3, -0.2, 0.8])
    a, b, m, s = data["a"], data["b"], data["m"], data["sigma"]
    means = np.array([theta[0], theta[1] + a * (theta[0] - m) ** 2 + b, theta[2]])
    expected = stats.norm.logpdf(data["x"], means, s).sum(axis=1)
    np.testing.assert_allclose(model.row_log_lik(theta), expected, rtol=1e-10)
    z = means.copy()
    prior = stats.norm.logpdf(z, 0, data["sigma0"]).sum()  # Ban prior: Jacobian of g is 1
    assert model.log_prior(theta) == pytest.approx(prior, rel=1e-12)
    assert model.row_vars == ("x",)


def test_mixed_row_variables_are_sliced(compiled):
    model = RowModel(compiled(stan_test_model("rows_mixed")), mixed_data())
    assert model.row_vars == ("Z", "g", "u")
    assert model.param_shapes == {"p": (3,), "s": (), "c": (3,), "L": (2, 2)}
    theta = points(model.dim, k=1, seed=9)[0]
    c = model.constrain(theta)
    assert c["p"].sum() == pytest.approx(1.0)
    L = c["L"]
    assert L[0, 1] == 0.0 and np.allclose(np.sum(L**2, axis=1), 1.0)  # Cholesky factor of a correlation
    np.testing.assert_allclose(model.unconstrain(c), theta, rtol=1e-9, atol=1e-12)


def test_warnings_name_each_unconstrained_coordinate(compiled):
    """A ``simplex[3]`` has 2 unconstrained coordinates and a ``cholesky_factor_corr[2]`` 1, so the
    constrained names (3 + 1 + 3 + 4) do not line up with the 7 coordinates: a warning names a
    lopsided variable's coordinate by its position among its own (BridgeStan's unconstrained
    names, read from the program), and a one-to-one variable as Stan does."""
    from stan_dp.auto import _coordinate_names

    model = RowModel(compiled(stan_test_model("rows_mixed")), mixed_data())
    assert model.dim == 7 and len(model.param_names) == 11
    assert model.unconstrained_names == ["p.1", "p.2", "s", "c.1", "c.2", "c.3", "L.1"]
    assert _coordinate_names(model, model.dim) == [
        "p's unconstrained coordinate 1", "p's unconstrained coordinate 2", "s", "c[1]", "c[2]", "c[3]",
        "L's unconstrained coordinate 1"]


def test_the_blocks_left_out_of_the_output_are_named(compiled):
    """Generated quantities, and transformed parameters, that read the rows may read the data, so
    the output leaves them out; the model names them (from the program) so that the output can say
    so.  ``c_sum = sum(c)`` and ``draw = normal_rng(c[1], s)`` read the parameters alone and come
    with the draws (tests/test_transformed_output.py, tests/test_generated_output.py), also from a
    seed sampler."""
    from stan_dp.output import omitted_note

    model = RowModel(compiled(stan_test_model("rows_mixed")), mixed_data())
    assert model.output_transformed == ("c_sum",) and model.output_generated == ("draw",)
    assert model.omitted_quantities == {"transformed parameters": [], "generated quantities": []}
    assert omitted_note(model) == ""
    from stan_dp import penalty

    fit = penalty(model, epsilon=2.0, delta=1e-5, clip=1.0, step_size=0.05, iterations=3, warmup=0,
                  chains=1, seed=1, progress=False)
    assert fit.attrs["not_in_output"] == "" and fit.attrs["transformed_in_output"] == "c_sum, draw"
    np.testing.assert_allclose(fit.posterior["c_sum"].values, fit.posterior["c"].values.sum(axis=-1))
    assert np.isfinite(fit.posterior["draw"].values).all()
    plain = RowModel(compiled(bundled("logistic_regression")), logistic_data(n=20))
    assert plain.omitted_quantities == {"transformed parameters": [], "generated quantities": []}
    assert omitted_note(plain) == ""


def test_nan_in_the_data_is_named_where_it_makes_the_log_density_nan(compiled):
    """It said 'check that the model's log density is finite near 0', pointing at the model."""
    data = linear_data(n=30)
    data["y"] = np.asarray(data["y"], dtype=float).copy()
    data["y"][[3, 17]] = np.nan
    from stan_dp import ModelDecompositionError

    with pytest.raises(ModelDecompositionError, match=r"non-finite values \(NaN or ±inf\) in y,"):
        RowModel(compiled(bundled("linear_regression")), data)


def test_explicit_row_vars_and_non_default_row_name(compiled):
    data = banana_data(n=12, d=2)
    data["rows"] = data.pop("N")
    # rows= must name the count; the default "N" is then absent and refused.
    with pytest.raises(ValueError, match="'N' is not in the data"):
        RowModel(compiled(bundled("banana")), data)


def test_json_data_file(compiled, tmp_path):
    import json

    data = logistic_data(n=30)
    path = tmp_path / "data.json"
    path.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in data.items()}))
    from_file = RowModel(compiled(bundled("logistic_regression")), path)
    from_dict = RowModel(compiled(bundled("logistic_regression")), data)
    theta = points(from_file.dim, k=1)[0]
    np.testing.assert_array_equal(from_file.row_log_lik(theta), from_dict.row_log_lik(theta))


def test_bad_arguments(compiled):
    model = RowModel(compiled(bundled("logistic_regression")), logistic_data(n=10))
    with pytest.raises(ValueError, match="shape"):
        model.row_log_lik(np.zeros(model.dim + 1))
    with pytest.raises(IndexError):
        model.row_log_lik(np.zeros(model.dim), [10])
    with pytest.raises(IndexError):
        model.row_log_lik(np.zeros(model.dim), [-1])
    with pytest.raises(ValueError, match="integers"):
        model.row_log_lik(np.zeros(model.dim), [0.5])
    with pytest.raises(ValueError, match="threads"):
        model.threads = 0


def test_nonfinite_rows_are_values_not_errors(compiled):
    # An infinite observation makes its row's log-likelihood -inf; the other
    # rows are unaffected and the call succeeds.
    data = banana_data(n=6, d=2)
    data["x"][2, 0] = np.inf
    model = RowModel(compiled(bundled("banana")), data, check=False)
    theta = np.array([0.1, 0.2])
    values, grads = model.row_log_lik_grad(theta)
    assert values[2] == -np.inf
    assert np.all(np.isfinite(np.delete(values, 2)))
    assert np.all(np.isfinite(np.delete(grads, 2, axis=0)))
    # A point Stan rejects (NaN parameter) gives NaN rows, not an exception.
    nan_values, nan_grads = model.row_log_lik_grad(np.array([np.nan, 0.0]))
    assert np.all(np.isnan(nan_values)) and np.all(np.isnan(nan_grads))
    assert model.log_prior(np.array([np.nan, 0.0])) == -np.inf


def test_a_row_count_declared_lower_1_is_relaxed_for_the_prior_part(compiled):
    """``int<lower=1> N`` (as published programs declare it) refuses N = 0, which the prior part
    needs; stan_dp compiles a derived program with ``lower=0`` and nothing else changes: the
    rows are the normal log densities of ``y`` (closed form), their sum plus the prior part is
    the user's own compiled program's log density on the full data (BridgeStan), and the
    relaxation reads only the program, never the data."""
    import bridgestan
    import stanio

    path = stan_test_model("needs_one_row")
    y = np.array([0.3, -1.2, 2.5])
    data = {"N": 3, "y": y}
    model = RowModel(compiled(path), data)
    assert model.n_rows == 3 and model.dim == 1
    derived = model.stan_file.read_text()
    assert "int<lower=0> N;" in derived and "lower=1" not in derived
    original = bridgestan.StanModel(str(compiled(path)), stanio.dump_stan_json(data), warn=False)
    for mu in (-1.0, 0.4, 2.0):
        theta = np.array([mu])
        rows = model.row_log_lik(theta)
        np.testing.assert_allclose(rows, stats.norm.logpdf(y, mu, 1.0), rtol=1e-12)
        np.testing.assert_allclose(model.log_prior(theta) + rows.sum(),
                                   original.log_density(theta, propto=False), rtol=1e-12)
    # the same program for a neighbouring data set: the derived file depends on the program only
    other = RowModel(compiled(path), {"N": 3, "y": y + 100.0})
    assert other.stan_file == model.stan_file

