"""Hard thresholding of the released, unit-diagonal curvature matrix (:mod:`stan_dp.adaptation.ridge`).

Checked against independent simulations: the familywise rate at which pure
noise keeps an entry, the kept noise's spectral norm against the bound the
orientation's gate uses, and the directions of known ridges.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from stan_dp.adaptation.newton import NOISE_SPECTRAL_FACTOR
from stan_dp.adaptation.ridge import FAMILYWISE, entry_threshold, thresholded_ridges


def _noisy(truth: np.ndarray, sd: float, rng: np.random.Generator) -> np.ndarray:
    d = truth.shape[0]
    e = np.triu(rng.normal(0.0, sd, size=(d, d)), 1)
    return truth + e + e.T


def _pattern_found(ridges, truth: np.ndarray) -> bool:
    """The kept entries are exactly the true nonzero ones (no false entry, none missed)."""
    return bool(np.array_equal(ridges.matrix != 0, truth != 0))


def test_the_threshold_is_two_sided_bonferroni():
    for d in (2, 6, 11, 30):
        pairs = d * (d - 1) / 2
        # P(|N(0,1)| > t) summed over the pairs is the familywise rate
        assert pairs * 2.0 * stats.norm.sf(entry_threshold(d)) == pytest.approx(FAMILYWISE, rel=1e-9)


def test_pure_noise_keeps_an_entry_at_about_the_familywise_rate():
    # 20,000 noise-only matrices at d = 11: Bonferroni over 55 independent pairs keeps some entry
    # with probability 1 - (1 - 0.05/55)^55 = 0.0488; Monte Carlo sd 0.0015
    rng = np.random.default_rng(0)
    d, sd, trials = 11, 0.1, 20_000
    kept = 0
    for _ in range(trials):
        ridges = thresholded_ridges(_noisy(np.eye(d), sd, rng), np.full((d, d), sd))
        kept += ridges.noise_norm > 0.0
        if ridges.noise_norm == 0.0:
            assert np.array_equal(ridges.matrix, np.eye(d))
            assert np.array_equal(ridges.directions, np.eye(d))
    exact = 1.0 - (1.0 - FAMILYWISE / 55) ** 55
    assert abs(kept / trials - exact) < 4 * np.sqrt(exact * (1 - exact) / trials)


def test_a_pair_ridge_gets_its_diagonal_directions_and_the_rest_keeps_its_axes():
    # intercept and a predictor in metres around 5 km: entry -0.98 (entry sd 0.107: d = 11, n = 1e3,
    # epsilon = 4), two separate ridges so that repeated eigenvalues would let eigh mix coordinates
    rng = np.random.default_rng(1)
    d, sd = 11, 0.107
    truth = np.eye(d)
    truth[0, 1] = truth[1, 0] = -0.98
    truth[5, 7] = truth[7, 5] = 0.9
    found = 0
    for _ in range(200):
        ridges = thresholded_ridges(_noisy(truth, sd, rng), np.full((d, d), sd))
        w = ridges.directions
        assert np.allclose(w.T @ w, np.eye(d), atol=1e-12)
        others = [j for j in range(d) if j not in (0, 1, 5, 7)]
        if not _pattern_found(ridges, truth):
            continue   # a false entry (about 5 % of draws): not this test's subject
        found += 1
        # the unconnected coordinates are exactly the axes, with eigenvalue 1
        assert np.array_equal(w[np.ix_(others, others)], np.eye(len(others)))
        assert np.all(ridges.eigenvalues[others] == 1.0)
        assert list(np.flatnonzero(ridges.in_ridge)) == [0, 1, 5, 7]
        # a unit-diagonal 2 x 2 block has eigenvectors (1, +-1) / sqrt 2 whatever its entry
        block = w[np.ix_([0, 1], [0, 1])]
        assert np.allclose(np.abs(block), np.sqrt(0.5))
        lam = np.sort(ridges.eigenvalues[[0, 1]])
        assert lam[0] == pytest.approx(1 - abs(ridges.matrix[0, 1])) and lam[1] == pytest.approx(2 - lam[0])
    assert found >= 180


def test_the_kept_noise_stays_within_the_gate_s_spectral_bound():
    """The orientation's gate takes ``1.5 noise_norm`` as the kept noise's spectral norm: simulated
    for a star (an intercept and three uncentred predictors, entries 0.55: eigenvalue 0.05) and a
    pair, the bound holds in at least 99 % of the draws that kept exactly the true entries (a false
    entry is beyond the threshold, 3.3 sds here, by construction: its rate is the familywise
    test's; alone it makes an eigenvalue of about 0.6, no ridge)."""
    rng = np.random.default_rng(2)
    d, sd = 11, 0.107
    for edges in ([(0, 1), (0, 2), (0, 3)], [(0, 1)]):
        truth = np.eye(d)
        for i, j in edges:
            truth[i, j] = truth[j, i] = 0.55 if len(edges) > 1 else -0.98
        held = found = 0
        for _ in range(2000):
            ridges = thresholded_ridges(_noisy(truth, sd, rng), np.full((d, d), sd))
            if not _pattern_found(ridges, truth):
                continue
            found += 1
            err = np.linalg.norm(ridges.matrix - truth, 2)
            held += err <= NOISE_SPECTRAL_FACTOR * ridges.noise_norm
        assert found >= 0.8 * 2000   # a 0.55 entry is missed 3.4 % of the time, 3.3 sds from 0
        assert held >= 0.99 * found, (edges, held, found)


def test_a_floored_diagonal_counts_only_inside_a_kept_entry():
    # R's diagonal is below 1 where the release's diagonal was floored against its noise: alone it
    # shows no ridge (eigenvalue 1, the axis); inside a kept entry it is part of the block (an
    # earnings regression's binary predictor at 0.54 next to the intercept-height ridge: setting it
    # to 1 there turned the frame along a wrong direction and the fit ended 59 sds off)
    sd = np.full((3, 3), 0.01)
    alone = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]])
    ridges = thresholded_ridges(alone, sd)
    assert np.array_equal(ridges.matrix, np.eye(3)) and np.all(ridges.eigenvalues == 1.0)
    joined = alone.copy()
    joined[0, 2] = joined[2, 0] = 0.4
    ridges = thresholded_ridges(joined, sd)
    assert np.array_equal(ridges.matrix, joined)
    np.testing.assert_allclose(np.sort(ridges.eigenvalues), np.linalg.eigvalsh(joined))
