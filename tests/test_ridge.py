"""The groups a released, unit-diagonal curvature matrix shows (:mod:`stan_dp.adaptation.ridge`).

Checked against independent simulations: the noise sd of ``R``'s entries
against repeated releases through the real mechanism, the familywise rate at
which pure noise joins coordinates, the group noise's spectral norm against
the bound the orientation's gate uses, and the eigenvalues of known ridges and
of a design that is not one.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stan_dp.adaptation.plan import NOISE_SPECTRAL_FACTOR
from stan_dp.adaptation.initial_frame import unit_diagonal
from stan_dp.adaptation.releases import Ledger, clipped_matrix_sum
from stan_dp.adaptation.ridge import FAMILYWISE, Ridges, apart_from, entry_threshold, thresholded_ridges


def _noisy(truth: np.ndarray, sd: float, rng: np.random.Generator) -> np.ndarray:
    d = truth.shape[0]
    e = np.triu(rng.normal(0.0, sd, size=(d, d)), 1)
    return truth + e + e.T


def _groups(ridges) -> list[list[int]]:
    return sorted(sorted(int(i) for i in g) for g in ridges.groups)


def test_the_entry_sd_of_r_matches_repeated_releases():
    # 4,000 releases of the same per-row matrices through clipped_matrix_sum: the empirical sd of
    # R's off-diagonal entries (D from the noiseless sum, as unit_diagonal takes it fixed) against
    # the sd unit_diagonal reports; Monte Carlo error of an sd over 4,000 draws ~1.1 %
    rng = np.random.default_rng(3)
    d, n = 4, 400
    x = rng.normal(size=(n, d)) + np.array([3.0, 0.0, 0.0, 1.0])
    rows = np.einsum("ni,nj->nij", x, x)
    rows /= np.linalg.norm(rows, axis=(1, 2))[:, None, None]
    truth = rows.sum(axis=0)
    draws, sd = [], None
    for _ in range(4000):
        m, s = clipped_matrix_sum(rng, rows.reshape(n, -1), 1.0, 2.0, Ledger("replace_one"), "test")
        draws.append(m - truth)
        sd = s
    _, entry_sd, diag = unit_diagonal(truth, sd)
    empirical = np.std(np.array(draws), axis=0) / np.sqrt(np.outer(diag, diag))
    off = ~np.eye(d, dtype=bool)
    np.testing.assert_allclose(empirical[off], entry_sd[off], rtol=0.05)


def test_the_threshold_is_two_sided_bonferroni():
    for d in (2, 6, 11, 30):
        pairs = d * (d - 1) / 2
        # P(|N(0,1)| > t) summed over the pairs is the familywise rate
        assert pairs * 2.0 * stats.norm.sf(entry_threshold(d)) == pytest.approx(FAMILYWISE, rel=1e-9)


def test_pure_noise_joins_coordinates_at_about_the_familywise_rate():
    # 20,000 noise-only matrices at d = 11: Bonferroni over 55 independent pairs keeps some entry
    # with probability 1 - (1 - 0.05/55)^55 = 0.0488; Monte Carlo sd 0.0015
    rng = np.random.default_rng(0)
    d, sd, trials = 11, 0.1, 20_000
    joined = 0
    for _ in range(trials):
        ridges = thresholded_ridges(_noisy(np.eye(d), sd, rng), np.full((d, d), sd))
        joined += bool(ridges.groups)
        if not ridges.groups:
            assert np.array_equal(ridges.directions, np.eye(d))
            assert np.all(ridges.eigenvalues == 1.0) and np.all(ridges.noise_norm == 0.0)
    exact = 1.0 - (1.0 - FAMILYWISE / 55) ** 55
    assert abs(joined / trials - exact) < 4 * np.sqrt(exact * (1 - exact) / trials)


def test_two_pair_ridges_are_found_and_the_rest_keeps_its_axes():
    # intercept and a predictor in metres around 5 km: entry -0.98 (entry sd 0.107: d = 11, n = 1e3,
    # epsilon = 4), and a second, separate pair: repeated eigenvalues must not mix coordinates
    rng = np.random.default_rng(1)
    d, sd = 11, 0.107
    truth = np.eye(d)
    truth[0, 1] = truth[1, 0] = -0.98
    truth[5, 7] = truth[7, 5] = 0.9
    others = [j for j in range(d) if j not in (0, 1, 5, 7)]
    found = 0
    for _ in range(200):
        noisy = _noisy(truth, sd, rng)
        ridges = thresholded_ridges(noisy, np.full((d, d), sd))
        w = ridges.directions
        assert np.allclose(w.T @ w, np.eye(d), atol=1e-12)
        if _groups(ridges) != [[0, 1], [5, 7]]:
            continue   # a false entry (about 5 % of draws): not this test's subject
        found += 1
        assert np.array_equal(w[np.ix_(others, others)], np.eye(len(others)))
        assert np.all(ridges.eigenvalues[others] == 1.0) and np.all(ridges.noise_norm[others] == 0)
        # each group's eigenvalues are its released block's
        for g in ([0, 1], [5, 7]):
            np.testing.assert_allclose(np.sort(ridges.eigenvalues[g]),
                                       np.linalg.eigvalsh(noisy[np.ix_(g, g)]))
    assert found >= 180


def test_entries_within_the_threshold_still_count_inside_a_group():
    """An intercept and three independent uncentred predictors (mean over rms 0.55): entries 0.55
    to the intercept, 0.55^2 = 0.30 between the predictors, the latter within the threshold at this
    noise (3.32 x 0.107 = 0.355).  Its smallest eigenvalue is 0.30: no thin ridge.  Over 2,000
    draws the group's block as released has a median smallest eigenvalue of ~0.26 (the smallest
    eigenvalue of a noisy matrix errs low by about 0.04 here), while the same matrix with its small
    entries zeroed (computed here) has ~0.12 and falls below the gate's 0.25 in ~84 % of draws
    against ~47 %."""
    rng = np.random.default_rng(4)
    d, sd = 11, 0.107
    truth = np.eye(d)
    for i in (1, 2, 3):
        truth[0, i] = truth[i, 0] = 0.55
        for j in (1, 2, 3):
            if i != j:
                truth[i, j] = 0.55 ** 2
    exact = float(np.linalg.eigvalsh(truth[:4, :4])[0])
    assert exact == pytest.approx(0.30, abs=0.01)
    cut = entry_threshold(d) * sd
    block, zeroed = [], []
    for _ in range(2000):
        noisy = _noisy(truth, sd, rng)
        ridges = thresholded_ridges(noisy, np.full((d, d), sd))
        if any(0 in g for g in ridges.groups):
            block.append(float(ridges.eigenvalues[[0, 1, 2, 3]].min()))
        kept = (np.abs(noisy) > cut) | np.eye(d, dtype=bool)
        zeroed.append(float(np.linalg.eigvalsh(np.where(kept, noisy, 0.0))[0]))
    block, zeroed = np.array(block), np.array(zeroed)
    assert block.size > 1800
    assert abs(np.median(block) - exact) < 0.06
    assert np.median(zeroed) < exact - 0.1
    assert np.mean(block < 0.25) < np.mean(zeroed < 0.25) - 0.25


def test_a_group_s_noise_stays_within_the_gate_s_spectral_bound():
    """The orientation's gate takes ``1.5 noise_norm`` as a group's noise in spectral norm:
    simulated for a pair and for the star above, the bound holds in at least 99 % of the draws
    that found exactly the true group."""
    rng = np.random.default_rng(2)
    d, sd = 11, 0.107
    pair = np.eye(d)
    pair[0, 1] = pair[1, 0] = -0.98
    star = np.eye(d)
    for i in (1, 2, 3):
        star[0, i] = star[i, 0] = 0.55
    for truth, members in ((pair, [0, 1]), (star, [0, 1, 2, 3])):
        held = found = 0
        for _ in range(2000):
            noisy = _noisy(truth, sd, rng)
            ridges = thresholded_ridges(noisy, np.full((d, d), sd))
            if _groups(ridges) != [members]:
                continue
            found += 1
            err = np.linalg.norm((noisy - truth)[np.ix_(members, members)], 2)
            held += err <= NOISE_SPECTRAL_FACTOR * ridges.noise_norm[members[0]]
        assert found >= 0.8 * 2000   # a 0.55 entry is missed 3.4 % of the time, 3.3 sds from 0
        assert held >= 0.99 * found, (members, held, found)


def test_a_floored_diagonal_counts_only_inside_a_group():
    # R's diagonal is below 1 where the release's diagonal was floored against its noise: alone
    # it shows no ridge (eigenvalue 1, the axis); inside a group it is part of the block (an
    # earnings regression's binary predictor at 0.54 next to the intercept-height ridge: setting
    # it to 1 there turned the frame along a wrong direction and the fit ended 59 sds off)
    sd = np.full((3, 3), 0.01)
    alone = np.diag([1.0, 1.0, 0.5])
    ridges = thresholded_ridges(alone, sd)
    assert ridges.groups == [] and np.all(ridges.eigenvalues == 1.0)
    joined = alone.copy()
    joined[0, 2] = joined[2, 0] = 0.4
    ridges = thresholded_ridges(joined, sd)
    assert _groups(ridges) == [[0, 2]]
    np.testing.assert_allclose(np.sort(ridges.eigenvalues[[0, 2]]),
                               np.linalg.eigvalsh(joined[np.ix_([0, 2], [0, 2])]))
    assert ridges.eigenvalues[1] == 1.0


def test_a_nan_entry_joins_nothing_and_a_nan_block_reads_no_ridge():
    sd = np.full((3, 3), 0.01)
    r = np.eye(3)
    r[0, 1] = r[1, 0] = np.nan
    assert thresholded_ridges(r, sd).groups == []
    r[0, 2] = r[2, 0] = 0.9
    r[2, 2] = np.nan
    ridges = thresholded_ridges(r, sd)
    assert _groups(ridges) == [[0, 2]] and np.all(np.isnan(ridges.eigenvalues[[0, 2]]))


def _varying_intercept_and_slope(rng: np.random.Generator, counties: int = 10, rows: int = 1000,
                                 share_x: float = 0.8) -> np.ndarray:
    """Unit-diagonal curvature of a normal model with a varying intercept ``a_j`` and a varying
    slope ``b_j`` on a binary ``x`` (public shape of ``radon-slopes``), in a frame whose columns
    are ``a_1..a_J``, ``b_1..b_J`` and the two groups' directions ``U_a = sum_j a_j``,
    ``U_b = sum_j b_j`` (what ``grouped_frame`` puts in the locations' columns)."""
    county = rng.integers(0, counties, size=rows)
    x = (rng.random(rows) < share_x).astype(float)
    v = np.zeros((rows, 2 * counties + 2))
    v[np.arange(rows), county] = 1.0
    v[np.arange(rows), counties + county] = x
    v[:, 2 * counties], v[:, 2 * counties + 1] = 1.0, x
    m = v.T @ v
    diag = np.sqrt(np.diag(m))
    return m / np.outer(diag, diag)


def test_two_groups_directions_are_judged_apart_from_their_elements():
    # Each group's direction shares rows with each of its elements (entries ~1/sqrt(J)), so
    # thresholding joins the directions and some elements in one group, whose block carries the
    # noise of all of them (radon-slopes at 1,000 rows, epsilon = 16: 12 members, tau_G = 1.7,
    # too large to turn).  Apart from the elements the two directions are a group of two whose block
    # has the smallest eigenvalue 1 - sqrt(0.8) = 0.106 (x = 1 in 80 % of the rows: the directions'
    # entry is sum x / sqrt(n sum x^2)); the elements keep their axes.
    rng = np.random.default_rng(11)
    truth = _varying_intercept_and_slope(rng)
    d, sd = truth.shape[0], 0.12
    elements = np.arange(d) < d - 2
    exact = 1.0 - truth[d - 2, d - 1]
    for _ in range(20):
        r = _noisy(truth, sd, rng)
        ridges = thresholded_ridges(r, np.full((d, d), sd))
        big = [g for g in ridges.groups if {d - 2, d - 1} <= set(int(i) for i in g)]
        assert len(big) == 1 and big[0].size > 2
        split, parts = apart_from(ridges, r, np.full((d, d), sd), big[0], elements)
        assert not any(np.array_equal(g, big[0]) for g in split.groups)
        assert all(not elements[p].any() for p in parts)
        # the directions' entry (0.89) stands out of its threshold (~0.45) in every draw
        assert _groups(Ridges(parts, split.eigenvalues, split.directions, split.noise_norm)) == [[d - 2, d - 1]]
        pair = np.array([d - 2, d - 1])
        np.testing.assert_allclose(split.eigenvalues[pair].min(), exact, atol=4 * sd)
        assert split.noise_norm[d - 1] == pytest.approx(sd * 2.0)   # the noise of a block of two
        # the group's elements: axes, eigenvalue 1, no noise; other groups untouched; the
        # directions orthonormal
        inside = big[0][elements[big[0]]]
        np.testing.assert_array_equal(split.directions[:, inside], np.eye(d)[:, inside])
        assert np.all(split.eigenvalues[inside] == 1.0) and np.all(split.noise_norm[inside] == 0.0)
        others = [g for g in ridges.groups if not np.array_equal(g, big[0])]
        assert _groups(Ridges(others, *ridges[1:])) == _groups(Ridges(split.groups[:len(others)], *split[1:]))
        for g in others:
            np.testing.assert_array_equal(split.directions[np.ix_(g, g)], ridges.directions[np.ix_(g, g)])
        np.testing.assert_allclose(split.directions.T @ split.directions, np.eye(d), atol=1e-12)
