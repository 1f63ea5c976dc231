"""The quantile search's recheck rounds (``private_quantiles(..., rechecks=k)``).

A halving search on noisy counts never revisits a threshold, so one count read low by noise
at a threshold below every row that depends on a column sends the search decades down.  The
column here is the one that did it: an ordered logistic regression's top cut point at 1,000
rows, epsilon = 1 (285 rows depend on it, 129 with curvature ~1 and 156 with ~0.34; the other
715 rows have none), count-noise sd 81 and a target of 149 rows.  The recheck rounds re-read
the count at the interval's upper end and move it back up where the readings there average
above the target.
"""

from __future__ import annotations

import numpy as np
import pytest

from stan_dp.adaptation.quantile import LOG2_RANGE, private_quantiles
from stan_dp.adaptation.releases import Ledger

SD = 81.1
TARGET = 148.8
N = 1000


def _column() -> np.ndarray:
    rng = np.random.default_rng(5)
    return np.concatenate([rng.uniform(0.9, 1.05, 129), rng.uniform(0.32, 0.36, 156), np.zeros(715)])[:, None]


class ScriptedNoise:
    """A noise stream whose standard normals are given in advance (one per count release)."""

    def __init__(self, draws):
        self.draws = list(draws)

    def standard_normal(self, shape=None):
        return np.full(shape, self.draws.pop(0))


def _search(rng, rechecks: int, rounds: int = 11, values=None, sd: float = SD, target: float = TARGET,
            ledger: Ledger | None = None):
    return private_quantiles(rng, _column() if values is None else values, tail=target / N, n_public=N,
                             rounds=rounds, noise_multiplier=sd, ledger=ledger or Ledger("replace_one"),
                             rechecks=rechecks)


def test_a_count_read_low_below_the_rows_is_reread_and_reversed():
    # the halving rounds read, at log2 t = 0, -30, -15, ...: the true counts are 0 at 2^0 and
    # 285 below 2^-1.6.  A draw of -1.85 sds at 2^-15 (count 135 < 149) sends the search down.
    draws = [0.0, 0.0, -1.85] + [0.0] * 6 + [0.0, 0.0]
    t_plain, _ = _search(ScriptedNoise(draws), rechecks=0)
    assert t_plain < 2.0**-14   # 2^-15: the frame ~60 times too wide
    t, at_floor = _search(ScriptedNoise(draws), rechecks=2)
    # the recheck at 2^-15 reads 285: the average (135 + 285) / 2 > 149 reopens the interval up to
    # 2^0, the next threshold read (below the target); the last round halves it at 2^-7.5 (285,
    # above), and the reopened interval reports its upper end
    assert t == 1.0 and not at_floor[0]
    # the narrow side of the true quantile (between 0.34 and 1): steps short, never 60 times long
    assert np.sum(_column()[:, 0] > t) <= TARGET


def test_a_recheck_that_agrees_keeps_the_interval():
    # without noise the rechecks read what the halving rounds read: the result is the halving
    # search of rounds - rechecks rounds, exactly
    for rechecks in (1, 2, 3):
        t, f = _search(np.random.default_rng(0), rechecks=rechecks, sd=1e-9)
        t0, f0 = _search(np.random.default_rng(0), rechecks=0, rounds=11 - rechecks, sd=1e-9)
        assert t == t0 and f[0] == f0[0]


def test_a_column_whose_upper_end_was_never_read_is_halved():
    # every row above every threshold: every reading is above the target, the upper end is the
    # range's top and never read; the recheck rounds halve it as before
    values = np.full((N, 1), np.inf)
    t, _ = _search(np.random.default_rng(0), rechecks=2, values=values, sd=1e-9)
    t0, _ = _search(np.random.default_rng(0), rechecks=0, values=values, sd=1e-9)
    assert t == t0 and np.log2(t) > LOG2_RANGE[1] - 0.1   # the top octave


def test_the_plan_is_the_same_releases():
    for rechecks in (0, 2):
        ledger = Ledger("replace_one")
        _search(np.random.default_rng(1), rechecks=rechecks, ledger=ledger)
        assert len(ledger.entries) == 11
        assert {e.noise_multiplier for e in ledger.entries} == {SD}
        assert {e.sensitivity for e in ledger.entries} == {1.0}   # one column: sqrt(1)


def test_far_too_wide_frames_become_rare():
    # over 2,000 noise draws: how often the threshold lands decades below the depending rows
    # (t < 1e-2, a frame > 6 times too wide; the true quantile is 0.34-1).  A NumPy simulation of
    # the same search (6,000 draws) gave 0.123 without rechecks and 0.032 with two; Monte Carlo
    # sd at 2,000 draws 0.007 and 0.004, so the bounds below are > 4 sds from either.
    rng = np.random.default_rng(2)
    far = {0: 0, 2: 0}
    draws = 2000
    for _ in range(draws):
        for rechecks in far:
            t, _ = _search(rng, rechecks=rechecks)
            far[rechecks] += bool(t[0] < 1e-2)
    assert far[0] / draws > 0.09
    assert far[2] / draws < 0.05


def test_rechecks_must_leave_a_halving_round():
    with pytest.raises(ValueError, match="rechecks"):
        _search(np.random.default_rng(0), rechecks=11)


def test_columns_left_out_halve_in_every_round():
    # the same noise stream: a column outside ``rechecked`` gets the thresholds of the plain
    # search, bit for bit, next to one that takes the rechecks
    values = np.hstack([_column(), _column()])
    kw = dict(tail=TARGET / N, n_public=N, rounds=11, noise_multiplier=SD)
    plain, _ = private_quantiles(np.random.default_rng(3), values, ledger=Ledger("replace_one"), **kw)
    mixed, _ = private_quantiles(np.random.default_rng(3), values, ledger=Ledger("replace_one"), rechecks=2,
                                 rechecked=np.array([False, True]), **kw)
    assert mixed[0] == plain[0]
