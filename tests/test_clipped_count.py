"""The clipped-row count the run states, where its pooled rounds were released at several bounds
(``stan_dp.adaptation.clipped_count``).

Oracles: the precision-weighted pooled estimate's bias computed directly from per-round biases
``rho N_L B_L`` (a 1-D location model), a Monte Carlo of the counts' noise for the stated sd, and
a private search whose counts before the raise are forged high (the report must carry them while
its pool holds rounds released before the raise).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stan_dp.adaptation import newton
from stan_dp.adaptation.clipped_count import pooled_clipped_rows


def test_rounds_all_at_the_final_bound_give_its_mean_count_and_sd():
    counts = {2: [4.0, 7.0, 1.0]}
    n_eff, sd = pooled_clipped_rows([2, 2, 2, 2], [0.3, 0.3, 0.3, 0.3], counts, 2, 1.3, 1.5)
    assert n_eff == pytest.approx(4.0)
    assert sd == pytest.approx(1.5 / math.sqrt(3))


def test_the_pooled_bias_is_rho_times_the_final_bound_times_the_count():
    """A pooled estimate that weighs its rounds by ``1 / sd_k^2`` has the bias of that weighted
    mean of the rounds' biases ``rho N_L B_L``; the function's count times ``rho B_F`` equals it.
    The rounds at the lower bounds have the smaller noise (``sd`` proportional to the bound) and
    weigh more: the count is above the final bound's own."""
    rho, c, step = 0.2, 0.17, 1.3
    levels = [0, 0, 0, 1, 1, 2]
    bounds = c * step ** np.array(levels, dtype=float)
    sds = 2.5 * bounds                                  # noise sd proportional to the bound
    counts = {0: [12.0, 10.0], 1: [8.0], 2: [3.0, 5.0]}
    biases = rho * np.array([np.mean(counts[level]) for level in levels]) * bounds
    weights = 1.0 / sds**2
    pooled_bias = float(np.sum(weights * biases) / np.sum(weights))
    n_eff, _ = pooled_clipped_rows(levels, list(sds), counts, 2, step, 1.0)
    assert rho * bounds[-1] * n_eff == pytest.approx(pooled_bias)
    assert n_eff > np.mean(counts[2])                # what the final bound's counts alone said


def test_the_stated_sd_is_the_sd_of_the_count_over_its_noise():
    # Monte Carlo: each count is its true value plus N(0, count_sd^2); the stated sd of N_eff is
    # the sd of N_eff over that noise (20,000 draws: relative Monte Carlo error about 0.5 %)
    rng = np.random.default_rng(0)
    levels, sds, step, count_sd = [0, 0, 1, 1, 1], [0.2, 0.21, 0.26, 0.27, 0.26], 1.3, 1.8
    truth = {0: [9.0, 9.0, 9.0], 1: [4.0, 4.0]}
    _, stated = pooled_clipped_rows(levels, sds, truth, 1, step, count_sd)
    draws = [pooled_clipped_rows(levels, sds, {k: list(np.array(v) + rng.normal(0.0, count_sd, len(v)))
                                               for k, v in truth.items()}, 1, step, count_sd)[0]
             for _ in range(20_000)]
    assert np.std(draws) == pytest.approx(stated, rel=0.03)


def test_levels_without_a_count_are_left_out_and_none_gives_nan():
    n_eff, _ = pooled_clipped_rows([0, 1, 1], [0.1, 0.2, 0.2], {1: [6.0]}, 1, 1.3, 1.0)
    assert n_eff == pytest.approx(6.0)
    assert all(math.isnan(v) for v in pooled_clipped_rows([0], [0.1], {1: [6.0]}, 1, 1.3, 1.0))
    with pytest.raises(ValueError, match="one entry per pooled round"):
        pooled_clipped_rows([0, 1], [0.1], {1: [6.0]}, 1, 1.3, 1.0)


def test_a_search_reports_the_counts_of_its_pooled_rounds_from_before_a_raise(monkeypatch):
    """The strong-signal logistic regression of ``test_clip_bias`` at epsilon = 4, with the first
    clipped count forged a million high: it raises the bound once, and the counts after it are the
    real ones (a few dozen rows).  The pooled rounds released before the raise keep their weight in
    the estimate, so the stated count carries the forged one in proportion; the final bound's own
    counts alone (the report before) say a few dozen."""
    from test_clip_bias import _private_mode, _strong

    real_counts, real_pooled = newton.noisy_counts, newton.pooled_clipped_rows
    forged: list[bool] = []
    seen: dict = {}

    def counts(rng, values, t, z, ledger, what, repeats=None):
        out = real_counts(rng, values, t, z, ledger, what, repeats=repeats)
        if what.startswith("clipped count") and not forged:
            forged.append(True)
            return out + 1e6
        return out

    def pooled(levels, sds, level_counts, final_level, step, count_sd):
        seen.update(levels=list(levels), counts={k: list(v) for k, v in level_counts.items()},
                    final=final_level)
        return real_pooled(levels, sds, level_counts, final_level, step, count_sd)

    monkeypatch.setattr(newton, "noisy_counts", counts)
    monkeypatch.setattr(newton, "pooled_clipped_rows", pooled)
    result = _private_mode(_strong(0), 7, adaptive=True)
    assert result.settled and result.clip_adjust == pytest.approx(newton.KAPPA_STEP)
    assert seen["final"] == 1 and seen["counts"][0][0] > 1e5 and max(seen["counts"][1]) < 1e3
    assert 0 in seen["levels"]                       # a round from before the raise was pooled
    share = seen["levels"].count(0) / len(seen["levels"])
    # the report carries the forged count in (about) the pooled rounds' share, at the final bound
    assert result.clipped_rows > 1e6 * share / 3 / newton.KAPPA_STEP / 2, (result.clipped_rows, share)
    assert float(np.mean(seen["counts"][1])) < 1e3 < result.clipped_rows
