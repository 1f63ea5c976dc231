"""Probabilistic bisection in the quantile search (``private_quantiles(..., weighed=mask)``).

A halving search on noisy counts takes every reading as certain and never revisits a threshold:
one count read a noise sd or two on the wrong side of the target, at a threshold beyond every row
that depends on a column, sends the search decades off.  Two columns that did it:

* an ordered logistic regression's top cut point at 1,000 rows, epsilon = 1 (285 rows depend on
  it, 129 with curvature ~1 and 156 with ~0.34; the other 715 rows have none), count-noise sd 81,
  target 149 rows: a count read low below the rows sent it decades down (a frame too wide);
* a group effect whose 251 rows all have curvature 0.68 (of 2,000), count-noise sd 55.6, target a
  noise sd or so above 0: a count read high above the rows sent it decades up (a frame too narrow).

A weighed column keeps a weight for every candidate threshold, reads where the weights split in
half, and ends at the candidate most consistent with every reading.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from stan_dp.adaptation.quantile import LOG2_RANGE, WEIGHED_STEP, _most_consistent, _weighed_update, \
    private_quantiles
from stan_dp.adaptation.releases import Ledger

SD = 81.1
TARGET = 148.8
N = 1000


def _column() -> np.ndarray:
    rng = np.random.default_rng(5)
    return np.concatenate([rng.uniform(0.9, 1.05, 129), rng.uniform(0.32, 0.36, 156), np.zeros(715)])[:, None]


def _point_mass() -> np.ndarray:
    values = np.zeros((2000, 1))
    values[:251, 0] = 0.68
    return values


def _search(rng, weighed: bool, values=None, sd: float = SD, target: float = TARGET, n: int = N,
            ledger: Ledger | None = None):
    return private_quantiles(rng, _column() if values is None else values, tail=target / n, n_public=n,
                             rounds=11, noise_multiplier=sd, ledger=ledger or Ledger("replace_one"),
                             weighed=np.array([weighed]))


def _rate(weighed: bool, bad, draws: int, **kw) -> float:
    rng = np.random.default_rng(2)
    return sum(bool(bad(_search(rng, weighed, **kw)[0][0])) for _ in range(draws)) / draws


def test_a_reading_adds_the_log_chance_of_its_side():
    # against scipy's normal cdf: a count c at threshold 0 says the quantile is above with chance
    # Phi((c - target) / sd); candidates above 0 gain its log, the others the log of the rest
    grid = np.linspace(-2.0, 2.0, 5)[None, :]
    for c in (100.0, 148.8, 300.0):
        add = _weighed_update(grid, np.array([0.0]), np.array([c]), np.array([TARGET]), SD)[0]
        p = stats.norm.cdf((c - TARGET) / SD)
        np.testing.assert_allclose(add[grid[0] > 0], np.log(p), rtol=1e-12)
        np.testing.assert_allclose(add[grid[0] <= 0], np.log1p(-p), rtol=1e-9)


def test_the_most_consistent_candidate_is_the_middle_of_the_highest_best_run():
    grid = np.arange(8.0)[None, :]
    np.testing.assert_array_equal(_most_consistent(grid, np.array([[0, 1, 3, 3, 2, 3, 3, 3.0]])), [6.0])
    np.testing.assert_array_equal(_most_consistent(grid, np.array([[5, 5, 1, 0, 0, 0, 0, 0.0]])), [0.5])


def test_the_most_consistent_candidate_agrees_with_a_plain_scan():
    # an independent reading of the rule, one row at a time: walk down from the highest candidate
    # of largest weight to the start of its run
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows, points = int(rng.integers(1, 5)), int(rng.integers(2, 30))
        grid = np.sort(rng.normal(size=(rows, points)), axis=1)
        weight = rng.integers(0, 3, size=(rows, points)).astype(float)
        expected = []
        for g, w in zip(grid, weight):
            last = max(i for i in range(points) if w[i] == w.max())
            first = last
            while first > 0 and w[first - 1] == w.max():
                first -= 1
            expected.append(0.5 * (g[first] + g[last]))
        np.testing.assert_array_equal(_most_consistent(grid, weight), expected)


def test_without_noise_it_finds_the_quantile_as_halving_does():
    # every reading certain: the weighed search bisects too, on its grid
    t, f = _search(np.random.default_rng(0), True, sd=1e-9)
    t0, f0 = _search(np.random.default_rng(0), False, sd=1e-9)
    assert abs(np.log2(t[0]) - np.log2(t0[0])) <= 2 * WEIGHED_STEP and not f[0] and not f0[0]
    values = _column()[:, 0]
    below, above = np.sort(values)[::-1][[int(TARGET), int(TARGET) - 1]]   # the target's rank
    assert np.log2(below) - 2 * WEIGHED_STEP <= np.log2(t[0]) <= np.log2(above) + 2 * WEIGHED_STEP


def test_ends_of_the_range_are_reached():
    # no row above any threshold: the floor (no scale found); every row above: the top octave
    for weighed in (False, True):
        _, at_floor = _search(np.random.default_rng(0), weighed, values=np.zeros((N, 1)), sd=1e-9)
        assert at_floor[0]
        t, at_floor = _search(np.random.default_rng(0), weighed, values=np.full((N, 1), np.inf), sd=1e-9)
        assert np.log2(t[0]) > LOG2_RANGE[1] - 0.1 and not at_floor[0]


def test_the_plan_is_the_same_releases():
    for weighed in (False, True):
        ledger = Ledger("replace_one")
        _search(np.random.default_rng(1), weighed, ledger=ledger)
        assert len(ledger.entries) == 11
        assert {e.noise_multiplier for e in ledger.entries} == {SD}
        assert {e.sensitivity for e in ledger.entries} == {1.0}   # one column: sqrt(1)


def test_columns_left_out_halve_in_every_round():
    # the same noise stream: a column outside ``weighed`` gets the thresholds of the plain search,
    # bit for bit, next to one that is weighed
    values = np.hstack([_column(), _column()])
    kw = dict(tail=TARGET / N, n_public=N, rounds=11, noise_multiplier=SD)
    plain, _ = private_quantiles(np.random.default_rng(3), values, ledger=Ledger("replace_one"), **kw)
    mixed, _ = private_quantiles(np.random.default_rng(3), values, ledger=Ledger("replace_one"),
                                 weighed=np.array([False, True]), **kw)
    assert mixed[0] == plain[0]


def test_far_too_wide_frames_become_rare():
    # the cut point's column, 2,000 noise draws: a threshold decades below the depending rows
    # (t < 1e-2, a frame > 6 times too wide; the true quantile is 0.34-1).  Measured 0.1245
    # halving and 0.0025 weighed (two recheck rounds of the upper end, the rule before, 0.032);
    # Monte Carlo sds 0.007 and 0.0011, so the bounds are > 4 sds from either
    assert _rate(False, lambda t: t < 1e-2, 2000) > 0.09
    assert _rate(True, lambda t: t < 1e-2, 2000) < 0.008


def test_far_too_narrow_frames_become_rare():
    # the group effect's column with the target 1.2 count-noise sds above 0: a threshold 8 times
    # above the rows' 0.68 (a frame ~3 times too narrow or worse; most such searches end decades
    # up).  Measured over 2,000 draws: 0.049 halving, 0.0175 weighed (Monte Carlo sds 0.0048 and
    # 0.0029; the bounds are 2.9 and 3.6 sds away)
    kw = dict(values=_point_mass(), sd=55.6, target=1.2 * 55.6, n=2000)
    assert _rate(False, lambda t: t > 0.68 * 8, 2000, **kw) > 0.035
    assert _rate(True, lambda t: t > 0.68 * 8, 2000, **kw) < 0.028


def test_a_target_near_the_rows_count_no_longer_sends_it_down():
    # the same column with the target 2.5 sds above 0 and 2.0 below the 251 rows: a threshold 8
    # times below the rows, measured 0.082 halving and 0 weighed in 2,000 draws
    kw = dict(values=_point_mass(), sd=55.6, target=2.5 * 55.6, n=2000)
    assert _rate(False, lambda t: t < 0.68 / 8, 1000, **kw) > 0.05
    assert _rate(True, lambda t: t < 0.68 / 8, 1000, **kw) < 0.01
