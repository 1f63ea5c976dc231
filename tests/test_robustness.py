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
