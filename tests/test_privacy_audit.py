"""The quick empirical privacy audit (issue 14, item 8): real mechanisms pass, broken ones are flagged.

Seeded throughout, so the outcome is deterministic.  The bounds themselves are
valid at confidence 0.99 for any seed; the broken variants are chosen so that
the quick sample sizes flag them by a wide margin (see
:func:`stan_dp.audit.audit_cases`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stan_dp import audit


@pytest.fixture(scope="module")
def results():
    return audit.run_audit(quick=True, secure=True)


def test_no_real_mechanism_is_flagged_and_every_broken_one_is(results):
    real = [r for r in results if r.variant == "real"]
    broken = [r for r in results if r.variant != "real"]
    assert not [r for r in real if r.flagged], audit.format_table(real)
    assert broken and all(r.flagged for r in broken), audit.format_table(broken)
    # every mechanism and relation of the brief is covered
    covered = {(r.mechanism.split(" (")[0].split(" [")[0], r.relation) for r in real}
    for name in ("penalty: clipped ratio sum", "DP HMC gradient", "DP HMC ratio"):
        assert {(name, "replace_one"), (name, "add_remove")} <= covered
    for name in ("subsampled penalty", "DP Barker test", "exp-family statistic",
                 "augmentation Laplace", "augmentation Gaussian"):
        assert (name, "replace_one") in covered
    assert {r.variant for r in broken} == {"noise halved", "clipping removed"}
    assert any("[secure noise]" in r.mechanism for r in real)


def test_the_audit_is_not_vacuous(results):
    """Where the samples allow it, the real lower bounds are well above 0 (and below the claim)."""
    by = {(r.mechanism, r.relation, r.variant): r for r in results}
    gauss = by[("augmentation Gaussian", "replace_one", "real")]
    assert 2.0 < gauss.epsilon_lower < gauss.claimed_epsilon
    lap = by[("augmentation Laplace", "replace_one", "real")]
    assert 0.8 < lap.epsilon_lower <= 1.0
    assert by[("penalty: clipped ratio sum", "replace_one", "real")].epsilon_lower > 1.0


def test_clopper_pearson_and_the_bound_on_known_distributions():
    lo, hi = audit.clopper_pearson(0, 100, 0.05)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.05 ** (1 / 100))
    lo, hi = audit.clopper_pearson(100, 100, 0.05)
    assert hi == 1.0 and lo == pytest.approx(0.05 ** (1 / 100))
    # identical distributions: the bound is 0 (no evidence against privacy)
    rng = np.random.default_rng(0)
    same = [rng.normal(size=20_000) for _ in range(4)]
    eps, _ = audit.epsilon_lower_bound((same[0], same[1]), (same[2], same[3]), 1e-5)
    assert eps == 0.0
    # Laplace shift 1, scale 1: exactly 1-DP; the bound is close to 1 from below
    a = [rng.laplace(0.0, 1.0, 200_000) for _ in range(2)]
    b = [rng.laplace(1.0, 1.0, 200_000) for _ in range(2)]
    eps, _ = audit.epsilon_lower_bound((a[0], b[0]), (a[1], b[1]), 0.0)
    assert 0.9 < eps <= 1.0
    assert not math.isnan(eps)
