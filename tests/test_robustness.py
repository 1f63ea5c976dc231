"""Robustness of the data paths against extreme and failing rows (issue 14, items 5 and 6).

- ``clamp_rows_l2`` on rows whose norms span the whole double range, with
  non-finite entries, against an independent computation in 60-digit
  arithmetic (mpmath), and without any floating-point warning.
- A row whose Stan likelihood throws an exception other than Stan's reject
  (an index out of range, a size mismatch) becomes that row's NaN: the call
  completes, the other rows are exact, a sampler run finishes, and no
  message or warning names the row or its value.
"""

from __future__ import annotations

import re
import warnings

import mpmath
import numpy as np
import pytest

from stan_dp.mechanisms import clamp_rows_l2

# ------------------------------------------------------------ clamp_rows_l2 --

BIG = np.finfo(float).max

#: Rows of norms 0, ~1e-300, 1, ~1e200, ~1e308 and beyond (the sum of squares
#: overflows from ~1e154 on), some with inf/NaN entries (which count as 0).
ROWS = np.array([
    [0.0, 0.0, 0.0],
    [1e-300, -1e-300, 0.0],
    [5e-324, 0.0, 0.0],          # the smallest subnormal
    [0.0, -1.0, 0.0],            # norm exactly 1: on the sphere, kept
    [0.75, 0.0, 1.0],            # norm exactly 1.25
    [1e200, -3e200, 2e199],
    [1e308, 1e308, 1e308],       # norm 1.7e308: finite, its square is not
    [BIG, BIG, -BIG],            # norm > the largest double
    [np.inf, 1e200, 0.0],
    [np.nan, -np.inf, 2.0],
    [np.nan, np.nan, np.nan],
    [3e-200, 1e200, -np.nan],
])


def expected_clamp(row: np.ndarray, bound: float) -> tuple[np.ndarray, bool]:
    """The projection onto the ball of radius ``bound``, in 60-digit arithmetic."""
    with mpmath.workdps(60):
        vals = [mpmath.mpf(0) if not np.isfinite(v) else mpmath.mpf(float(v)) for v in row]
        norm = mpmath.sqrt(sum(v * v for v in vals))
        if norm <= bound:
            return np.array([float(v) for v in vals]), False
        return np.array([float(v * bound / norm) for v in vals]), True


@pytest.mark.parametrize("bound", [1.0, 1e-300, 1e3, 1e250])
def test_clamp_rows_l2_matches_an_exact_projection_at_every_scale(bound):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="warn"):  # any floating-point event becomes an error
            out, n_clamped = clamp_rows_l2(ROWS, bound)
    expected_changed = 0
    for row, got in zip(ROWS, out):
        want, clipped = expected_clamp(row, bound)
        expected_changed += clipped or not np.all(np.isfinite(row))
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0.0)
        if clipped:
            # Exactly on the sphere (up to rounding), in the row's direction.
            with mpmath.workdps(60):
                norm = mpmath.sqrt(sum(mpmath.mpf(float(v)) ** 2 for v in got))
            assert float(norm / bound) == pytest.approx(1.0, rel=1e-14)
        else:
            finite = np.where(np.isfinite(row), row, 0.0)
            np.testing.assert_array_equal(got, finite)  # untouched, bit for bit
    assert n_clamped == expected_changed


def test_clamp_rows_l2_clips_a_huge_row_to_the_bound_not_to_zero():
    out, n = clamp_rows_l2(np.array([[3e200, 4e200]]), 2.0)
    np.testing.assert_allclose(out, [[1.2, 1.6]], rtol=1e-15)
    assert n == 1


def test_clamp_rows_l2_zero_rows_emit_no_warning_and_stay_zero():
    rows = np.zeros((4, 3))
    rows[1, 2] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for bound in (0.0, 1e-320, 1.0, 10.0, 1e308, np.inf):
            out, n = clamp_rows_l2(rows, bound)
            np.testing.assert_array_equal(out, np.zeros((4, 3)))
            assert n == 1  # the NaN row only


def test_clamp_rows_l2_with_infinite_bound_changes_only_non_finite_entries():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, n = clamp_rows_l2(ROWS, np.inf)
    np.testing.assert_array_equal(out, np.where(np.isfinite(ROWS), ROWS, 0.0))
    assert n == int(np.count_nonzero(~np.isfinite(ROWS).all(axis=1)))


def test_clamp_rows_l2_refuses_a_negative_or_nan_bound():
    for bound in (-1.0, np.nan):
        with pytest.raises(ValueError, match="bound"):
            clamp_rows_l2(np.ones((2, 2)), bound)


# ----------------------------------------------- rows whose likelihood throws --

#: Rows 3 and 7 of ``row_throws.stan`` throw std::invalid_argument (k = -5,
#: a size mismatch) and std::out_of_range (k = 150, an index past the end).
BAD_ROWS = {3: -5, 7: 150}
N_ROWS = 12
#: Strings that would identify a failing row or its value in a message.
REVEALING = ("150", "-5", "row 3", "row 7", "row_throws.stan", "line ")


def throwing_data(prior_index: int = 1) -> dict:
    k = np.array([1, 2] * (N_ROWS // 2))
    for row, value in BAD_ROWS.items():
        k[row] = value
    return {"N": N_ROWS, "k": k, "y": np.linspace(-1.0, 1.5, N_ROWS), "j": prior_index}


@pytest.fixture(scope="module")
def throwing_library(compiled):
    from conftest import stan_test_model

    return compiled(stan_test_model("row_throws"))


@pytest.fixture(scope="module")
def throwing_model(throwing_library):
    from stan_dp import RowModel

    # check=False: the full-data log density throws at every point (row 7
    # always does), so the load-time decomposition check has no point to use.
    return RowModel(throwing_library, throwing_data(), check=False)


def revealed(needle: str, text: str) -> bool:
    """Whether ``text`` quotes ``needle``; a number counts only as a whole number.

    "150" inside the digits of a timestamp ("...23.762150+00:00", ArviZ's
    ``created_at``) or of another number is not the row's value.
    """
    if needle.lstrip("-").isdigit():
        return re.search(rf"(?<![\w.]){re.escape(needle)}(?!\d)", text) is not None
    return needle in text


def assert_nothing_revealing(texts: list[str]) -> None:
    for text in texts:
        for needle in REVEALING:
            assert not revealed(needle, text), f"{needle!r} in {text!r}"


def test_a_revealed_number_is_a_whole_number():
    assert revealed("150", "index k = 150 is out of range")
    assert revealed("150", "value 150.0")
    assert revealed("-5", "size -5 does not match")
    assert not revealed("150", "2026-11-29T22:10:23.762150+00:00")
    assert not revealed("150", "0.1502 and 1501")
    assert not revealed("-5", "delta 1e-5, 1e-05 or -50")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_that_throws_any_exception_is_nan_and_the_others_are_exact(throwing_model, threads):
    from scipy import stats

    model = throwing_model
    model.threads = threads
    data = throwing_data()
    good = np.setdiff1d(np.arange(N_ROWS), list(BAD_ROWS))
    for mu in (-0.7, 0.0, 1.3):
        theta = np.array([mu])
        values = model.row_log_lik(theta)
        values_g, grads = model.row_log_lik_grad(theta)
        assert grads.shape == (N_ROWS, 1)
        for v, g in ((values, None), (values_g, grads)):
            assert np.all(np.isnan(v[list(BAD_ROWS)]))
            np.testing.assert_allclose(v[good], stats.norm.logpdf(data["y"][good], mu, 1.0), rtol=1e-12)
        assert np.all(np.isnan(grads[list(BAD_ROWS)]))
        np.testing.assert_allclose(grads[good, 0], data["y"][good] - mu, rtol=1e-12, atol=1e-14)
        # An index subset (the read-ahead path), with repeats: the same values.
        idx = np.array([7, 0, 3, 7, 11, 3, 5])
        np.testing.assert_array_equal(model.row_log_lik(theta, idx), values[idx])
        sub_v, sub_g = model.row_log_lik_grad(theta, idx)
        np.testing.assert_array_equal(sub_v, values_g[idx])
        np.testing.assert_array_equal(sub_g, grads[idx])
        # The prior part does not depend on the rows and still evaluates.
        assert np.isfinite(model.log_prior(theta))
    model.threads = 1


def test_many_throwing_rows_on_many_threads_do_not_fail_the_call(throwing_library):
    """Every row throws, in parallel blocks: each is NaN, nothing escapes."""
    from stan_dp import RowModel

    n = 2000
    data = {"N": n, "k": np.where(np.arange(n) % 2 == 0, 150, -5), "y": np.zeros(n), "j": 1}
    model = RowModel(throwing_library, data, check=False, threads=2)
    values, grads = model.row_log_lik_grad(np.array([0.2]))
    assert np.all(np.isnan(values)) and np.all(np.isnan(grads))
    assert np.all(np.isnan(model.row_log_lik(np.array([0.2]), np.arange(0, n, 3))))


def test_a_throwing_prior_part_raises_without_quoting_data(throwing_library):
    """The zero-row part does not depend on a row: it may fail, but quotes no value."""
    from stan_dp import RowModel

    model = RowModel(throwing_library, throwing_data(prior_index=77), check=False)
    messages = []
    for call in (lambda: model.row_log_lik(np.array([0.1])),
                 lambda: model.row_log_lik_grad(np.array([0.1])),
                 lambda: model.log_prior(np.array([0.1])),
                 lambda: model.log_prior_grad(np.array([0.1]))):
        with pytest.raises(RuntimeError, match="out_of_range") as info:
            call()
        messages.append(str(info.value))
    for text in messages:
        assert "77" not in text
        assert "withheld" in text


def record_run(run) -> tuple[object, list[str]]:
    import logging

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.records: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record.getMessage())

    keep = Keep()
    root = logging.getLogger("stan_dp")
    old_level = root.level
    root.addHandler(keep)
    root.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = run()
    finally:
        root.removeHandler(keep)
        root.setLevel(old_level)
    return fit, [str(w.message) for w in caught] + keep.records


def test_samplers_complete_when_a_row_throws(throwing_model):
    """Whether a run finishes must not depend on one row (issue 14, item 5)."""
    import stan_dp

    model = throwing_model
    fit, texts = record_run(lambda: stan_dp.penalty(
        model, epsilon=1.0, delta=1e-5, iterations=30, clip=1.0, step_size=0.3,
        chains=1, init=np.zeros(1), seed=5, progress=False,
    ))
    assert fit.posterior["mu"].shape == (1, 30)
    assert np.all(np.isfinite(fit.posterior["mu"].values))
    texts += [str(v) for v in fit.posterior.attrs.values()]
    fit, more = record_run(lambda: stan_dp.hmc(
        model, epsilon=1.0, delta=1e-5, iterations=10, clip=1.0, grad_clip=1.0,
        step_size=0.05, n_leapfrog=2, chains=1, warmup=0, init=np.zeros(1), seed=5,
        progress=False,
    ))
    assert fit.posterior["mu"].shape == (1, 10)
    assert np.all(np.isfinite(fit.posterior["mu"].values))
    texts += more + [str(v) for v in fit.posterior.attrs.values()]
    assert_nothing_revealing(texts)
