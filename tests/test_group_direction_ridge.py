"""Two declared groups' directions turn as a ridge of their own, judged apart from their elements.

A varying intercept ``a_j`` and a varying slope ``b_j`` on a binary predictor that is 1 in 80 % of
the rows (``radon-slopes``' shape) have a ridge between the two groups' directions
(``U_a = sum_j a_j + mu_a`` and ``U_b``: they share every row where ``x = 1``): along
``U_a - U_b`` only the ``x = 0`` rows inform the posterior, and a diagonal frame has about 8 times
its curvature there.  Each direction also shares rows with every one of its elements, so the
orientation's thresholding joins them in one block whose noise is that of all its members, and
the ridge is lost.  :func:`~stan_dp.adaptation.ridge.apart_from` judges the directions apart
from the elements.  Checked on an exactly Gaussian NumPy model at its posterior mean, with the
same releases (noise draws and ledger) with and without the declared elements.
"""

from __future__ import annotations

import math

import numpy as np

from densities import CentredInterceptsSlopes
from stan_dp.adaptation import initial_frame
from stan_dp.adaptation.groups import group_locations, grouped_frame
from stan_dp.adaptation.plan import AdaptationSettings
from stan_dp.adaptation.releases import Ledger
from stan_dp.aggregates import queries

J = 10


def _model(seed: int) -> CentredInterceptsSlopes:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, J, 1000)
    x = (rng.random(g.size) < 0.8).astype(float)
    a, b = 1.5 + rng.normal(size=J), -0.7 + rng.normal(size=J)
    return CentredInterceptsSlopes(a[g] + b[g] * x + rng.normal(size=g.size), x, g)


def _frame_curvature_along_the_ridge(seed: int, with_elements: bool) -> tuple[float, list]:
    """The oriented frame's curvature along ``U_a - U_b`` over the posterior's, and the ledger."""
    density = _model(seed)
    d = density.dim
    mean, cov = density.exact()
    data_precision = np.linalg.inv(cov) - density._prior_precision()
    declared = group_locations(density, d)
    # the initial frame as the search builds it at 1,000 rows: every element's own scale (one of
    # each group at the floor, so both groups' directions take their locations' columns)
    scale = 1.0 / np.sqrt(np.maximum(np.diag(data_precision), 1e-300))
    at_floor = np.zeros(d, dtype=bool)
    at_floor[[0, J, 2 * J, 2 * J + 1]] = True
    scale[at_floor] = 1.0
    directions = [(members | (np.arange(d) == loc)).astype(float) for members, loc in declared]
    group_scale = np.array([1.0 / math.sqrt(u @ data_precision @ u) for u in directions])
    frame, grouped = grouped_frame(np.diag(scale), declared, group_scale, np.zeros(2, dtype=bool), at_floor)
    assert grouped.sum() == 2
    elements = np.any([members for members, _ in declared], axis=0) if with_elements else None
    ledger = Ledger("replace_one")
    # noise multiplier 5: entries of R with noise sd ~0.12, as radon-slopes' at 1,000 rows, epsilon 16
    turned, _ = initial_frame._oriented_frame(queries(density), mean, frame, ~at_floor | grouped, density.n_rows,
                                              AdaptationSettings(), 5.0, 3.0, np.random.default_rng(100 + seed),
                                              ledger, elements=elements)
    v = np.concatenate([np.ones(J), -np.ones(J), [1.0, -1.0]])
    inverse = np.linalg.inv(turned)
    ratio = float((v @ inverse.T @ inverse @ v) / (v @ np.linalg.inv(cov) @ v))
    return ratio, [(e.what, e.noise_sd) for e in ledger.entries]


def test_the_groups_directions_ridge_turns_apart_from_the_elements():
    with_elements, without = [], []
    for seed in range(12):
        ratio, ledger = _frame_curvature_along_the_ridge(seed, True)
        ratio_without, ledger_without = _frame_curvature_along_the_ridge(seed, False)
        assert ledger == ledger_without          # the same releases: post-processing only
        with_elements.append(ratio)
        without.append(ratio_without)
    with_elements, without = np.array(with_elements), np.array(without)
    # without: 5 of the 12 frames have 7.7-9.2 times the posterior's curvature along U_a - U_b
    # (the diagonal frame's: their directions' block held elements and stayed unturned); with:
    # 1.4-1.8 in those five
    stuck = without > 5.0
    assert np.sum(stuck & (with_elements < 2.5)) >= 4
    # where the directions' entry stood out of no block (seed 3: within its threshold) neither
    # turns, and where the whole block turned already nothing changes: never worse
    assert np.all(with_elements <= without)
    np.testing.assert_array_equal(with_elements[~stuck], without[~stuck])
