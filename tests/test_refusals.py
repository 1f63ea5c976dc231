"""Every load-time refusal of RowModel and compile_model, with its message."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import bundled, logistic_data, stan_test_model
from stan_dp import ModelDecompositionError, RowModel, StanCompileError, compile_model


def test_stan_syntax_error_reports_line_and_column(tmp_path):
    with pytest.raises(StanCompileError, match=r"line 7, column 0") as info:
        compile_model(stan_test_model("syntax_error"), cache_dir=tmp_path)
    assert '";" expected' in str(info.value)


def test_stan_type_error_reports_stanc_message(tmp_path):
    path = tmp_path / "type_error.stan"
    path.write_text("data { int N; vector[N] y; }\nparameters { real mu; }\nmodel { y ~ normal(mu, \"one\"); }\n")
    with pytest.raises(StanCompileError, match=r"line 3"):
        compile_model(path, cache_dir=tmp_path)


def test_a_type_newer_than_the_bundled_stanc_is_named_with_its_rewrite(tmp_path):
    """stanc 2.35 reads ``sum_to_zero_vector`` (Stan 2.36) as a syntax error; the message adds
    which type, which Stan version brought it and the rewrite that works before it.  A plain
    syntax error gets no such line."""
    path = tmp_path / "zero_sum.stan"
    path.write_text("data { int N; int J; array[N] int g; vector[N] y; }\n"
                    "parameters { real mu; sum_to_zero_vector[J] a; real<lower=0> sigma; }\n"
                    "model { y ~ normal(mu + a[g], sigma); }\n")
    with pytest.raises(StanCompileError) as info:
        compile_model(path, cache_dir=tmp_path)
    msg = str(info.value)
    assert "sum_to_zero_vector came with Stan 2.36" in msg and "append_row(a_raw, -sum(a_raw))" in msg
    with pytest.raises(StanCompileError) as info:
        compile_model(stan_test_model("syntax_error"), cache_dir=tmp_path)
    assert "came with Stan" not in str(info.value)


def test_missing_files():
    with pytest.raises(FileNotFoundError, match="no_such.stan"):
        compile_model("no_such.stan")
    with pytest.raises(FileNotFoundError, match="Stan file|model not found"):
        RowModel("no_such.stan", {"N": 0})


def test_missing_data_file(compiled, tmp_path):
    with pytest.raises(FileNotFoundError, match="data file not found"):
        RowModel(compiled(bundled("logistic_regression")), tmp_path / "absent.json")


def test_malformed_data_file(compiled, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        RowModel(compiled(bundled("logistic_regression")), path)


def test_missing_data_variable(compiled):
    data = logistic_data(n=5)
    del data["X"]
    with pytest.raises(ValueError, match="variable name=X"):
        RowModel(compiled(bundled("logistic_regression")), data)


def test_mistyped_data_variable(compiled):
    data = logistic_data(n=5)
    data["y"] = data["y"] + 0.5  # reals where ints are declared
    with pytest.raises(ValueError, match="variable name=y"):
        RowModel(compiled(bundled("logistic_regression")), data)


def test_wrong_data_size(compiled):
    data = logistic_data(n=5)
    data["X"] = data["X"][:4]
    with pytest.raises(ValueError, match="variable name=X"):
        RowModel(compiled(bundled("logistic_regression")), data)


@pytest.mark.parametrize("value", [2.0, 2.5, [2], "2", True])
def test_row_count_must_be_an_integer(compiled, value):
    data = logistic_data(n=2)
    data["N"] = value
    with pytest.raises(ValueError, match="must be a single integer"):
        RowModel(compiled(bundled("logistic_regression")), data)


def test_row_count_absent(compiled):
    with pytest.raises(ValueError, match="'M' is not in the data"):
        RowModel(compiled(bundled("logistic_regression")), logistic_data(n=5), rows="M")


def test_row_vars_must_have_the_row_count_leading(compiled):
    with pytest.raises(ValueError, match="leading dimension"):
        RowModel(compiled(bundled("logistic_regression")), logistic_data(n=5), row_vars=["prior_scale"])
    with pytest.raises(ValueError, match="not in the data"):
        RowModel(compiled(bundled("logistic_regression")), logistic_data(n=5), row_vars=["Q"])


def test_parameter_dimension_depending_on_rows_is_refused(compiled):
    data = {"N": 4, "y": np.arange(4.0)}
    with pytest.raises(ValueError, match="number of parameters depends on the row count"):
        RowModel(compiled(stan_test_model("size_depends_on_rows")), data)


def test_interacting_rows_are_refused(compiled):
    data = {"N": 6, "y": np.linspace(-1, 2, 6)}
    with pytest.raises(ModelDecompositionError, match="does not decompose over rows"):
        RowModel(compiled(stan_test_model("rows_interact")), data)


def test_a_lag_across_rows_is_refused_with_how_to_give_each_row_its_own(compiled, tmp_path):
    """An AR(1) as users write it reads the previous row, in a loop (``y[n - 1]``) or vectorised
    (``y[2:N]`` against ``y[1:(N - 1)]``): its terms span rows.  The loop form fails the
    decomposition check, the vectorised one already the prior part with no rows (``y[2:0]``);
    both are refused with the cause found in the program and the fix (a lag column of its own,
    and what that does to the guarantee), not the generic message."""
    rng = np.random.default_rng(0)
    data = {"N": 40, "y": np.cumsum(rng.normal(size=40))}
    with pytest.raises(ModelDecompositionError) as info:
        RowModel(compiled(stan_test_model("ar1_lag")), data)
    msg = str(info.value)
    assert "(y[n - 1])" in msg and "y_lag" in msg and "group of two rows" in msg
    path = tmp_path / "ar1_vectorised.stan"
    path.write_text("data { int<lower=0> N; vector[N] y; }\nparameters { real a; real b; real<lower=0> s; }\n"
                    "model { y[2:N] ~ normal(a + b * y[1:(N - 1)], s); }\n")
    with pytest.raises(ModelDecompositionError, match=r"\(y\[2 : N\], y\[1 : \(N - 1\)\]\)"):
        RowModel(compiled(path), data)


def test_the_program_reading_finds_positional_row_indexing():
    """Ranges and offsets on a row variable are found; a row's own index, an index through
    another array, whole vectors and variables that are not rows are not."""
    from stan_dp.stan_source import positional_row_indexing

    program = """
model {
  for (n in 2:N) y[n] ~ normal(a + b * y[n - 1] + c * x[idx[n]], s);
  for (t in 1:(N - 1)) target += normal_lpdf(y[t + 1] - y[t] | 0, s);
  x ~ normal(z[2:K], 1);
  w ~ normal(y, 1);
}
"""
    assert positional_row_indexing(program, ["y", "x", "w"]) == ["y[n - 1]", "y[t + 1]"]
    assert positional_row_indexing(program, ["z"]) == ["z[2:K]"]
    assert positional_row_indexing(program, []) == []


def test_model_that_needs_a_row_after_the_relaxed_bound_is_refused(compiled):
    """``int<lower=1> N`` is relaxed for the prior part (tests/test_rows.py); where the model
    still fails with no rows (here a vector of N values left unsliced by row_vars), the message
    says what stan_dp relaxed and does not suggest declaring lower=0 again."""
    data = {"N": 3, "y": np.ones(3), "w": np.ones(3)}
    with pytest.raises(ModelDecompositionError) as info:
        RowModel(compiled(stan_test_model("bound_rows_unsliced")), data, row_vars=["y"])
    msg = str(info.value)
    assert "cannot be built with zero rows" in msg and "relaxed N's declared lower=1 to 0" in msg
    assert "declare it int<lower=0>" not in msg and "row_vars" in msg


def test_not_a_stan_dp_library(tmp_path):
    path = tmp_path / "model.txt"
    path.write_text("")
    with pytest.raises(ValueError, match=".stan file or a compiled library"):
        RowModel(path, {"N": 0})


def test_constraints_that_depend_on_rows_are_refused(compiled):
    data = {"N": 5, "y": np.linspace(-1, 1, 5)}
    with pytest.raises(ModelDecompositionError, match="constraints of the parameters depend on the row data"):
        RowModel(compiled(stan_test_model("bound_from_rows")), data)


def test_check_points_shrink_towards_the_start():
    """The load-time checks draw ``per_radius`` points from each box of ``CHECK_POINT_RADII`` in
    turn, widest first, from the seeded stream alone (no data): a model finite only near 0 (a probit
    regression in metres, ``tests/test_auto_stan.py``) still gets checked points."""
    from stan_dp.model import CHECK_POINT_RADII, check_points

    points = list(check_points(np.random.default_rng(0), 3, 5))
    assert len(points) == 5 * len(CHECK_POINT_RADII)
    for k, radius in enumerate(CHECK_POINT_RADII):
        block = np.array(points[5 * k:5 * (k + 1)])
        assert np.all(np.abs(block) < radius) and np.max(np.abs(block)) > radius / 10
    again = list(check_points(np.random.default_rng(0), 3, 5))
    assert all(np.array_equal(a, b) for a, b in zip(points, again))
