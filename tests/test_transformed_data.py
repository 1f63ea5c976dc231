"""Models whose transformed data use all rows (issue 15, item 5).

brms centres predictors in ``transformed data`` (``means_X[i] = mean(X[, i])``),
other models z-score with ``sd(x)``.  Such a value depends on every row: the
per-row split does not exist and the value is private.  RowModel must refuse
it with one message that names the variables, says why and gives the fixes,
and ``public_data=`` must fit it with the constants read from the data.
"""

from __future__ import annotations

import subprocess
import textwrap

import numpy as np
import pytest
from scipy import stats

from stan_dp import ModelDecompositionError, RowModel
from stan_dp.stan_source import (
    analyse_transformed_data,
    canonical_program,
    override_program,
)
from stan_dp.toolchain import find_toolchain

from conftest import stan_test_model

BRMS = stan_test_model("brms_gaussian")
ZSCORE = stan_test_model("zscore")


@pytest.fixture(scope="module")
def stanc():
    return find_toolchain().stanc


def _program(tmp_path, stanc, body: str) -> str:
    path = tmp_path / "m.stan"
    path.write_text(textwrap.dedent(body))
    return canonical_program(path, stanc)


def brms_data(n: int = 60, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.normal(2.0, 1.0, n), rng.normal(-1.0, 2.0, n)])
    y = 1.0 + x[:, 1] - 0.5 * x[:, 2] + rng.normal(size=n)
    return {"N": n, "Y": y, "K": 3, "X": x, "Kc": 2, "prior_only": 0}


# ------------------------------------------------------------- the analysis --

def test_analysis_names_the_brms_means(stanc):
    report = analyse_transformed_data(canonical_program(BRMS, stanc), "N", ["X", "Y"])
    assert report.all_rows == {"means_X": ("X",)}  # Xc is per row once means_X is known
    assert report.row_count == () and report.rows_lower_bound == 1
    assert report.transformed_data == ("Xc", "means_X")


def test_analysis_of_zscoring_and_friends(tmp_path, stanc):
    program = _program(tmp_path, stanc, """
        data { int<lower=0> N; int K; vector[N] x; matrix[N, K] X; vector[N] y; }
        transformed data {
          real x_mean = mean(x);
          real x_sd = sd(x);
          vector[N] z = (x - x_mean) / x_sd;       // per row, given the two constants
          vector[N] z2 = (y - mean(y)) / sd(y);    // a reducer inline: all rows
          vector[N] row_sums;
          for (n in 1:N) row_sums[n] = sum(X[n]);  // a sum within each row: fine
          int n_cols = cols(X);                    // shape only
          real log_n = log(N);                     // the row count
          int n2 = num_elements(y);                // the row count, through a shape
          real total = 0;
          for (n in 1:N) total += y[n];            // a loop over the rows
          real first = y[1];                       // one particular row
          vector[N] y2 = square(y);                // elementwise: fine
        }
        parameters { real a; }
        model { y ~ normal(a, 1); }
    """)
    report = analyse_transformed_data(program, "N", ["x", "X", "y"])
    assert report.all_rows == {"x_mean": ("x",), "x_sd": ("x",), "z2": ("y",),
                               "total": ("y",), "first": ("y",)}
    assert report.row_count == ("log_n", "n2")
    assert report.rows_lower_bound == 0


def test_analysis_of_a_model_without_transformed_data(tmp_path, stanc):
    program = _program(tmp_path, stanc, """
        data { int N; vector[N] y; }
        parameters { real a; }
        model { y ~ normal(a, 1); }
    """)
    report = analyse_transformed_data(program, "N", ["y"])
    assert not report.found and report.rows_lower_bound is None


# -------------------------------------------------------------- the rewrite --

def test_override_rewrites_a_program_stanc_accepts(tmp_path, stanc):
    derived, overrides = override_program(canonical_program(BRMS, stanc), ["means_X"], "N")
    spec = overrides["means_X"]
    assert (spec.data_name, spec.dims_name, spec.rank, spec.integer) == (
        "means_X__public", "means_X__public_dims", 1, False)
    assert "mean(" not in derived  # nothing computes means_X from the rows any more
    assert "int<lower=0> N;" in derived and "int<lower=1> N;" not in derived
    path = tmp_path / "derived.stan"
    path.write_text(derived)
    info = subprocess.run([str(stanc), "--info", str(path)], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    assert '"means_X__public": { "type": "real", "dimensions": 1 }' in info.stdout
    # After the rewrite the analysis finds nothing that uses all rows.
    assert not analyse_transformed_data(derived, "N", ["X", "Y"]).found


def test_override_of_scalars_arrays_and_ints(tmp_path, stanc):
    program = _program(tmp_path, stanc, """
        data { int N; vector[N] x; }
        transformed data {
          real m = mean(x);
          array[2] matrix[3, 4] a = rep_array(rep_matrix(m, 3, 4), 2);
          int k = 3;
          k += 1;
        }
        parameters { real b; }
        model { x ~ normal(b + m, 1); }
    """)
    derived, specs = override_program(program, ["m", "a", "k"], "N")
    assert [specs[n].rank for n in ("m", "a", "k")] == [0, 3, 0]
    assert specs["k"].integer and not specs["a"].integer
    assert "real m = m__public;" in derived and "k += 1" not in derived
    assert "array[a__public_dims[1]] matrix[a__public_dims[2], a__public_dims[3]] a__public;" \
        in derived
    path = tmp_path / "derived.stan"
    path.write_text(derived)
    info = subprocess.run([str(stanc), "--info", str(path)], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr


def test_override_refuses_what_it_cannot_override(stanc):
    program = canonical_program(BRMS, stanc)
    with pytest.raises(ValueError, match=r"'b' is not a variable of the transformed data block "
                                         r"\(declared there: Xc, means_X\)"):
        override_program(program, ["b"], "N")
    with pytest.raises(ValueError, match="'K' is a data variable already"):
        override_program(program, ["K"], "N")
    with pytest.raises(ValueError, match="'Xc' has one entry per row"):
        override_program(program, ["Xc"], "N")


# ---------------------------------------------------------- compiled models --

def test_brms_model_is_refused_with_one_message():
    data = brms_data()
    with pytest.raises(ModelDecompositionError) as info:
        RowModel(BRMS, data)
    msg = str(info.value)
    assert "means_X (from X)" in msg and "all rows" in msg and "private" in msg
    assert 'public_data={"means_X": ...}' in msg and "center = FALSE" in msg
    assert "int<lower=1>" in msg  # N really is declared lower=1 here
    assert info.value.__cause__ is None and info.value.__suppress_context__
    # The message depends on the program only: a neighbouring data set gives the same.
    other = dict(data, X=data["X"].copy())
    other["X"][7, 1] = 12345.678
    with pytest.raises(ModelDecompositionError) as info2:
        RowModel(BRMS, other)
    assert str(info2.value) == msg and "12345" not in msg


def test_zscore_model_is_refused_without_the_wrong_hint():
    rng = np.random.default_rng(2)
    data = {"N": 30, "x": rng.normal(size=30), "y": rng.normal(size=30)}
    with pytest.raises(ModelDecompositionError) as info:
        RowModel(ZSCORE, data)
    msg = str(info.value)
    assert "x_mean (from x), x_sd (from x)" in msg
    assert "declare it int<lower=0>" not in msg and "int<lower=" not in msg
    assert "brms" not in msg   # a hand-written z-score is not told how to fit brms


def test_brms_model_fits_with_public_means(compiled):
    import bridgestan
    import stanio

    data = brms_data()
    means = data["X"][:, 1:].mean(axis=0)
    model = RowModel(BRMS, data, public_data={"means_X": means})
    assert model.row_vars == ("X", "Y") and model.n_rows == 60 and model.dim == 4
    assert model.stan_file.parent.parent.name == "derived"
    np.testing.assert_array_equal(model.public_data["means_X"], means)
    # With the true means the derived model's full log density is the original's.
    original = bridgestan.StanModel(str(compiled(BRMS)), stanio.dump_stan_json(data), warn=False)
    rng = np.random.default_rng(3)
    for _ in range(3):
        theta = rng.uniform(-1, 1, size=4)
        np.testing.assert_allclose(model.bridge.log_density(theta, propto=False),
                                   original.log_density(theta, propto=False), rtol=1e-12)
    # With other public means each row is its own Gaussian term (independent formula).
    chosen = np.array([1.5, -0.5])
    model = RowModel(BRMS, data, public_data={"means_X": chosen})
    theta = np.array([0.7, -0.4, 0.9, np.log(1.3)])  # b[1], b[2], Intercept, log sigma
    mu = 0.9 + (data["X"][:, 1:] - chosen) @ np.array([0.7, -0.4])
    np.testing.assert_allclose(model.row_log_lik(theta),
                               stats.norm.logpdf(data["Y"], mu, 1.3), rtol=1e-10)


def test_public_data_is_checked():
    data = brms_data(n=20)
    with pytest.raises(ValueError, match=r"must have 1 dimension\(s\) like its declaration "
                                         r"`vector\[Kc\] means_X`, got shape \(\)"):
        RowModel(BRMS, data, public_data={"means_X": 2.0})
    with pytest.raises(ValueError, match="must be numbers"):
        RowModel(BRMS, data, public_data={"means_X": ["a", "b"]})
    with pytest.raises(ValueError, match="non-empty dict"):
        RowModel(BRMS, data, public_data={})
    with pytest.raises(ValueError, match="not a variable of the transformed data block"):
        RowModel(BRMS, data, public_data={"means": [0.0, 0.0]})
    # A wrong size is Stan's size check, when the transformed data are built.
    with pytest.raises(ValueError, match="rejected the data"):
        RowModel(BRMS, data, public_data={"means_X": [0.0, 0.0, 0.0]})


# ------------------------------------------------- the QR reparameterisation --

QR_AS_WRITTEN = """
data {
  int<lower=0> N;
  int<lower=1> K;
  matrix[N, K] x;
  vector[N] y;
}
transformed data {
  matrix[N, K] Q_ast;
  matrix[K, K] R_ast;
  matrix[K, K] R_ast_inverse;
  Q_ast = qr_thin_Q(x) * sqrt(N - 1);
  R_ast = qr_thin_R(x) / sqrt(N - 1);
  R_ast_inverse = inverse(R_ast);
}
parameters {
  real alpha;
  vector[K] theta;
  real<lower=0> sigma;
}
model {
  y ~ normal(Q_ast * theta + alpha, sigma);
}
"""


def _qr_data(n: int = 40, seed: int = 5) -> dict:
    rng = np.random.default_rng(seed)
    x = np.column_stack([rng.uniform(20, 70, n), rng.normal(5000, 1000, n)])   # years, metres
    return {"N": n, "K": 2, "x": x, "y": 3 + x @ np.array([0.1, 0.001]) + rng.normal(size=n)}


def test_the_qr_program_as_written_is_told_the_rewrite_that_works(tmp_path):
    """Stan's User's Guide computes ``Q_ast`` with ``qr_thin_Q`` over all rows.  The refusal used
    to offer ``public_data={"Q_ast": ...}``, which ``public_data`` then refuses (a value per row),
    and again after ``R_ast`` was given: advice that went round in a circle.  Now it names the
    rewrite (``tests/stan/qr_regression.stan``, fitted below) and offers only the constants."""
    path = tmp_path / "qr.stan"
    path.write_text(QR_AS_WRITTEN)
    with pytest.raises(ModelDecompositionError) as info:
        RowModel(path, _qr_data())
    msg = str(info.value)
    assert "Q_ast (with qr_thin_Q) has one entry per row" in msg
    assert "compute Q_ast = x * R_ast_inverse after R_ast_inverse" in msg
    assert 'public_data={"R_ast": ..., "R_ast_inverse": ...}' in msg and '"Q_ast": ...' not in msg
    with pytest.raises(ValueError, match="'Q_ast' has one entry per row.*named constants"):
        RowModel(path, _qr_data(), public_data={"Q_ast": np.zeros((40, 2))})


def test_the_rewritten_qr_program_fits_with_a_public_r(compiled):
    """The rewrite the message gives splits into rows: each row's log-likelihood is the normal
    density of its outcome at ``alpha + x_i R^-1 theta`` (an independent formula), and with the
    data's own ``R`` the fitted coefficients are the design's: ``Q = x R^-1`` is ``qr_thin_Q``'s
    factor scaled by ``sqrt(N - 1)``."""
    data = _qr_data()
    _, r = np.linalg.qr(data["x"])
    r_ast = r / np.sqrt(data["N"] - 1)
    public = {"R_ast": r_ast, "R_ast_inverse": np.linalg.inv(r_ast)}
    model = RowModel(compiled(stan_test_model("qr_regression")), data, public_data=public)
    assert model.row_vars == ("x", "y") and model.dim == 4
    theta = np.array([2.5, 0.3, -0.2, np.log(1.4)])   # alpha, theta[1..2], log sigma
    q = data["x"] @ np.linalg.inv(r_ast)
    np.testing.assert_allclose(q.T @ q / (data["N"] - 1), np.eye(2), atol=1e-10)   # orthogonal
    mu = 2.5 + q @ np.array([0.3, -0.2])
    np.testing.assert_allclose(model.row_log_lik(theta), stats.norm.logpdf(data["y"], mu, 1.4),
                               rtol=1e-10)


def test_an_inline_z_score_is_told_to_name_its_constants():
    """``vector[N] z = (x - mean(x)) / sd(x)`` in one statement: ``z`` has one entry per row, so
    the advice is to name the mean and sd (which ``public_data`` can give), not to make ``z``
    public (which it refuses)."""
    from stan_dp.model import transformed_data_message

    program = textwrap.dedent("""
        data {
          int<lower=0> N;
          vector[N] x;
          vector[N] y;
        }
        transformed data {
          vector[N] z = (x - mean(x)) / sd(x);
        }
        parameters {
          real a;
        }
        model {
          y ~ normal(a * z, 1);
        }
        """)
    report = analyse_transformed_data(program, "N", ["x", "y"])
    assert report.per_row == ("z",) and report.calls == {"z": ("mean", "sd")}
    msg = transformed_data_message(report, "N")
    assert "z (with mean, sd) has one entry per row" in msg
    assert "each mean and sd over the rows in a transformed data variable of its own" in msg
    assert "public_data={" not in msg and msg.endswith(".")
