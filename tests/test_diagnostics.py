"""MMD and posterior comparison (seed 003, Section 7.1) against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stan_dp.diagnostics import compare, draws_matrix, median_bandwidth, mmd
from stan_dp.diagnostics import _mmd2_unbiased


def _brute_mmd2(x, y, h):
    k = lambda u, v: np.exp(-np.sum((u - v) ** 2) / (2 * h * h))  # noqa: E731
    m, n = len(x), len(y)
    sxx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    syy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    sxy = sum(k(x[i], y[j]) for i in range(m) for j in range(n)) / (m * n)
    return sxx + syy - 2 * sxy


def test_unbiased_estimate_matches_a_brute_force_double_loop():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(17, 3)), rng.normal(size=(11, 3)) + 0.4
    assert _mmd2_unbiased(x, y, 1.3) == pytest.approx(_brute_mmd2(x, y, 1.3), rel=1e-10)


@pytest.mark.parametrize("shift", [0.0, 0.5, 1.5])
def test_mmd_matches_the_population_value_for_gaussians(shift):
    """N(0, s²I) vs N(Δ, s²I), RBF bandwidth h (fixed, raw space):
    MMD² = 2 c (1 − exp(−|Δ|² / (2(h² + 2s²)))), c = (h² / (h² + 2s²))^{d/2}.

    With m = n = 2000 the estimate's sd is below 0.01 (U-statistic variance
    O(1/m)); tolerance 0.02 on MMD.
    """
    d, s, h = 2, 1.0, 1.5
    rng = np.random.default_rng(1)
    delta = np.full(d, shift / np.sqrt(d))
    x = rng.normal(size=(2000, d)) * s
    y = rng.normal(size=(2000, d)) * s + delta
    c = (h * h / (h * h + 2 * s * s)) ** (d / 2)
    exact = np.sqrt(2 * c * (1 - np.exp(-shift**2 / (2 * (h * h + 2 * s * s)))))
    assert mmd(x, y, bandwidth=h, standardise=False) == pytest.approx(exact, abs=0.02)


def test_same_distribution_is_near_zero_and_a_shift_is_clearly_positive():
    rng = np.random.default_rng(2)
    a = {"mu": rng.normal(size=(2, 1000)), "beta": rng.normal(size=(2, 1000, 3)) * 5}
    b = {"mu": rng.normal(size=(2, 1000)), "beta": rng.normal(size=(2, 1000, 3)) * 5}
    c = {"mu": rng.normal(size=(2, 1000)) + 0.5, "beta": b["beta"]}
    same, shifted = mmd(a, b), mmd(c, b)
    assert same < 0.04          # null: sqrt of an O(1/m) fluctuation, m = 2000
    assert shifted > 3 * same and shifted > 0.08


def test_standardising_removes_units():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(500, 2)), rng.normal(size=(500, 2)) + 0.3
    scale = np.array([1.0, 1000.0])
    assert mmd(x * scale, y * scale) == pytest.approx(mmd(x, y), rel=1e-9)


def test_median_bandwidth_is_the_median_pairwise_distance():
    x = np.array([[0.0], [1.0], [3.0]])
    rng = np.random.default_rng(0)
    h = median_bandwidth(x, x, rng, subsample=200)
    # pooled draws from {0, 1, 3}: distances 0 (same point), 1, 2 or 3; the median of
    # pairwise distances among 400 draws is 1 or 2.
    assert h in (1.0, 2.0)


def test_draws_matrix_names_and_errors():
    post = {"a": np.zeros((2, 5)), "b": np.zeros((2, 5, 2, 3))}
    mat, names = draws_matrix(post)
    assert mat.shape == (10, 7)
    assert names[:3] == ["a", "b[0,0]", "b[0,1]"]
    with pytest.raises(ValueError, match="not in the posterior"):
        draws_matrix(post, ["c"])
    with pytest.raises(ValueError, match="different components"):
        mmd({"a": np.zeros((1, 5))}, {"a": np.zeros((1, 5, 2))}, var_names=["a"])
    with pytest.raises(ValueError, match="non-finite"):
        mmd(np.full((5, 1), np.nan), np.zeros((5, 1)))


def test_compare_table_on_known_inputs(tmp_path):
    """Private = reference quantiles shifted by 0.5 sd and scaled by 2: the table says so."""
    grid = stats.norm.ppf((np.arange(4000) + 0.5) / 4000)
    ref = {"mu": grid.reshape(2, 2000)}
    priv = {"mu": (2.0 * grid + 0.5).reshape(2, 2000)}
    cmp = compare(priv, ref)
    row = cmp.table.loc["mu"]
    sd = grid.std(ddof=1)
    assert row["std_mean_error"] == pytest.approx(0.5 / sd, rel=1e-9)
    assert row["sd_ratio"] == pytest.approx(2.0, rel=1e-9)
    # reference mass inside the private 90% interval 0.5 ± 2·1.645:
    expected = stats.norm.cdf(0.5 + 2 * 1.6449) - stats.norm.cdf(0.5 - 2 * 1.6449)
    assert row["coverage"] == pytest.approx(expected, abs=1e-3)
    assert cmp.worst_std_mean_error == pytest.approx(0.5 / sd, rel=1e-9)
    assert cmp.mmd > 0.2
    same = compare(ref, ref)
    assert same.table.loc["mu", "coverage"] == pytest.approx(0.9, abs=1e-3)
    assert "MMD" in str(cmp)


def test_compare_skips_variables_the_private_fit_lacks_and_plots(tmp_path):
    rng = np.random.default_rng(4)
    import arviz as az

    ref = az.from_dict(posterior={"mu": rng.normal(size=(2, 300)), "y_rep": rng.normal(size=(2, 300, 4))})
    priv = az.from_dict(posterior={"mu": rng.normal(size=(2, 300))}, attrs={"epsilon": 1.0})
    cmp = compare(priv, ref)
    assert list(cmp.table.index) == ["mu"]
    out = cmp.plot(tmp_path / "cmp.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="share no posterior variables"):
        compare({"a": np.zeros((1, 5))}, {"b": np.zeros((1, 5))})
