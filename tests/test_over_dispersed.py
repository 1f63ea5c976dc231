"""A settled search whose pooled rounds disagree far beyond their noise warns (``honesty.over_dispersed``).

The pool's one-step estimates give ``Q``, chi-squared with ``dim (rounds - 1)`` degrees of freedom
where the rounds differ by their privacy noise alone; the random-effects pooling widens the reported
noise to cover their scatter, not a shift they share.  A 20-county varying intercept (Stan ``radon``
at 1,000 rows, epsilon = 64) settled 22 posterior sds off with ``Q / dof`` = 2.1 and a stated noise
of 0.72 sds, "intervals calibrated" (docs/adaptation.md §5).  Checked here: the flag's rate under
the noise alone, by simulation against its chi-squared bound; and that a run whose pool is that
dispersed says so and no longer claims calibrated intervals, while one that is not keeps its
message.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

import stan_dp
from stan_dp import auto
from stan_dp.honesty import DISPERSION_LEVEL, DISPERSION_LIMIT, over_dispersed
from test_auto import logistic


@pytest.mark.parametrize("dim, rounds", [(3, 2), (3, 8), (4, 16), (11, 8), (24, 11)])
def test_pools_that_differ_by_noise_alone_are_rarely_flagged(dim, rounds):
    # Q drawn as the sum of dof squared standard normals (its law under the noise alone)
    dof = dim * (rounds - 1)
    rng = np.random.default_rng(dof)
    q = np.sum(rng.normal(size=(20_000, dof)) ** 2, axis=1)
    flagged = np.mean([over_dispersed(x / dof, dim, rounds) for x in q])
    bound = stats.chi2.sf(max(stats.chi2.ppf(DISPERSION_LEVEL, dof), DISPERSION_LIMIT * dof), dof)
    assert bound <= 1.0 - DISPERSION_LEVEL + 1e-12
    # binomial Monte Carlo error of 20,000 draws at a rate <= 1 %: sd <= 0.0007
    assert abs(flagged - bound) < 4 * np.sqrt(bound * (1 - bound) / 20_000) + 1e-4, (flagged, bound)


def test_the_flag_needs_both_the_size_and_the_significance():
    assert over_dispersed(2.1, 24, 11)            # the radon run
    assert not over_dispersed(1.4, 24, 11)        # significant at dof 240, but within the limit
    assert not over_dispersed(1.8, 3, 2)          # beyond the limit, within chi2_3's 99 % (3.78)
    assert over_dispersed(4.0, 3, 2)
    assert not over_dispersed(np.nan, 5, 8)       # no pool to judge
    assert not over_dispersed(9.0, 5, 1)


def _fit(monkeypatch, dispersion: float):
    """A Gaussian-approximation fit whose search result is the real one but for its pool's dispersion
    (settled, as the radon run was, and with no rows counted beyond the clip bound, so that the
    noise warning's consequence is the one about calibration)."""
    real = auto.private_mode

    def with_dispersion(*args, **kwargs):
        result = real(*args, **kwargs)
        return result._replace(settled=True, dispersion=dispersion, heterogeneity=1.0, clipped_rows=0.0,
                               tail_rows=0.0)

    monkeypatch.setattr(auto, "private_mode", with_dispersion)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = stan_dp.sample(logistic(2000, 0, False), epsilon=1.0, delta=1e-5, seed=2, chains=1, draws=100,
                             progress=False, method="gaussian")
    return fit.posterior.attrs


def test_a_settled_pool_that_disagrees_far_beyond_its_noise_says_so(monkeypatch):
    attrs = _fit(monkeypatch, 2.1)
    assert attrs["rounds_over_dispersed"]
    assert "disagree 2.1 times beyond what their privacy noise explains" in attrs["warnings"]
    assert "the privacy noise in the mean is up to" in attrs["warnings"]   # the noise warning fired
    assert "intervals stay calibrated" not in attrs["warnings"]
    assert "so the intervals may not be calibrated" in attrs["warnings"]


def test_a_pool_within_the_limit_keeps_its_message(monkeypatch):
    attrs = _fit(monkeypatch, 1.2)
    assert not attrs["rounds_over_dispersed"]
    assert "beyond what their privacy noise explains" not in attrs["warnings"]
    assert "intervals stay calibrated" in attrs["warnings"]

