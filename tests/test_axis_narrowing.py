"""The pooled frame narrows an axis whose own diagonal resolves a curvature the spectrum cannot.

``pooling._axis_narrowing`` reads the diagonal of the released curvature in
the current frame (a right frame has curvature 1 there): an axis whose entry
is beyond ``AXIS_NARROW_MIN``, beyond ``1 + k s`` and whose data part alone
is beyond ``k s`` (``s`` the entry noise sd, ``k`` one-sided Bonferroni over
the axes at ``AXIS_FAMILYWISE``) narrows by ``1 / sqrt(c_jj)``.  The pool's
next frame (``_pooled_estimate(...).frame``) uses it; the pooled curvature,
covariance and mode do not.  Checked against the rule written out, against
the eigen-decomposition in the narrowed frame, and on a synthetic pool whose
frame is 3 times too wide along one axis under a noise whose spectral norm
hides it (the ordered logistic regression's top cut point of
docs/adaptation.md §7, "A coordinate at the initial scale's floor").
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from stan_dp.adaptation import pooling
from stan_dp.adaptation.curvature import _shrunk_eigen
from stan_dp.adaptation.plan import NOISE_SPECTRAL_FACTOR


def test_only_axes_resolved_above_the_minimum_narrow_and_by_the_root_of_their_diagonal():
    d, s = 5, 0.3
    k = stats.norm.isf(pooling.AXIS_FAMILYWISE / d)   # 2.33 at d = 5
    data = np.diag([9.0, 1.9, 2.5, 0.5, 4.0])
    data[0, 1] = data[1, 0] = 0.7   # off-diagonal entries play no part
    prior = np.diag([0.0, 0.0, 0.0, 3.0, 0.0])
    narrow = pooling._axis_narrowing(data, prior, s)
    # written out: axis 0 (9 > max(2, 1 + k s) and 9 > k s) narrows by 1/3; axis 1 (1.9 < 2) does
    # not; axis 2 (2.5 > 2, 2.5 > 1 + 0.70 and 2.5 > 0.70) does; axis 3's total 3.5 is mostly the
    # prior, its data 0.5 < k s: it does not; axis 4 does
    expected = np.array([1 / 3, 1.0, 1 / math.sqrt(2.5), 1.0, 0.5])
    np.testing.assert_allclose(narrow, expected, rtol=1e-12)
    # the same diagonal under a noise that could make it: nothing narrows
    assert np.all(pooling._axis_narrowing(data, prior, 9.0 / k * 1.01) == 1.0)
    # an unusable noise sd or non-finite entries narrow nothing (and do not raise)
    assert np.all(pooling._axis_narrowing(data, prior, math.inf) == 1.0)
    assert np.all(pooling._axis_narrowing(data, prior, 0.0) == 1.0)
    bad = data.copy()
    bad[0, 0] = np.nan
    assert pooling._axis_narrowing(bad, prior, s)[0] == 1.0


def test_the_narrowed_eigen_decomposition_is_the_curvature_in_the_narrowed_frame():
    rng = np.random.default_rng(4)
    d = 4
    root = rng.normal(size=(d, d))
    curvature = root @ root.T + np.diag([30.0, 1.0, 1.0, 1.0])   # axis 0 about 6 times too wide
    narrow_expected = pooling._axis_narrowing(curvature, np.zeros((d, d)), 0.01)
    assert narrow_expected[0] < 0.2 and np.all(narrow_expected > 0)
    lam, q, narrow = pooling._narrowed_eigen(curvature, np.zeros((d, d)), 1e-6, 0.01)
    np.testing.assert_array_equal(narrow, narrow_expected)
    # with a negligible noise nothing is shrunk: D^-1 Q diag(lam) Q' D^-1 is the curvature
    back = (q / narrow[:, None] * lam) @ (q / narrow[:, None]).T
    np.testing.assert_allclose(back, curvature, rtol=1e-9, atol=1e-9)
    # where no axis narrows it is _shrunk_eigen itself
    lam0, q0 = _shrunk_eigen(np.eye(d), np.zeros((d, d)), 0.5)
    lam1, q1, n1 = pooling._narrowed_eigen(np.eye(d), np.zeros((d, d)), 0.5, 0.01)
    assert np.all(n1 == 1.0)
    np.testing.assert_array_equal(lam0, lam1)
    np.testing.assert_array_equal(q0, q1)


def _wide_pool(rounds: int, sd_h: float, read: float) -> tuple[list[dict], np.ndarray]:
    """Rounds at the mode of a posterior with covariance I in a frame 3 times too wide along axis
    2 (true curvature there 9 in frame units), whose clipped rows read only ``read`` on that axis
    (their sum is at most the rows times the bound), released with entry noise sd ``sd_h``.  The
    released values are taken noise-free, so that the test is about the rule, not a draw; the
    pooling sees the noise level through ``sd_h`` only."""
    d = 3
    frame = np.diag([1.0, 1.0, 3.0])
    inv = np.linalg.inv(frame)
    released = np.diag([1.0, 1.0, read])   # in the frame
    pool = [{"theta": np.zeros(d), "grad": np.zeros(d), "grad_sd": 0.1,
             "hess": inv.T @ released @ inv, "prior_hess": np.zeros((d, d)), "sd_h": sd_h, "frame": frame,
             "data_coordinates": np.ones(d, dtype=bool),
             "hess_diag_sd": pooling.curvature_diagonal_sd(sd_h, inv)} for _ in range(rounds)]
    return pool, frame


def test_a_pooled_frame_too_wide_along_one_axis_is_narrowed_and_the_estimates_are_not_touched(monkeypatch):
    rounds, sd_h, read = 4, 1.6, 3.5
    pool, frame = _wide_pool(rounds, sd_h, read)
    pooled_sd = sd_h / math.sqrt(rounds)
    tau = NOISE_SPECTRAL_FACTOR * pooled_sd * math.sqrt(2.0 * 3)
    k = stats.norm.isf(pooling.AXIS_FAMILYWISE / 3)
    # the spectrum leaves the axis unresolved (shrunk to about 1), its entry is resolved
    assert read * (1 - tau**2 / read**2) < 1.1
    assert read > max(pooling.AXIS_NARROW_MIN, 1 + k * pooled_sd)
    narrowed = pooling._pooled_estimate(pool, frame)
    monkeypatch.setattr(pooling, "AXIS_NARROW_MIN", math.inf)
    plain = pooling._pooled_estimate(pool, frame)
    sd_narrowed = np.sqrt(np.diag(narrowed.frame @ narrowed.frame.T))
    sd_plain = np.sqrt(np.diag(plain.frame @ plain.frame.T))
    # without the narrowing axis 2 stays about 3 times too wide; with it 3 / sqrt(3.5) = 1.60,
    # still on the wide side of the truth (1): the clipped read understates the curvature
    assert sd_plain[2] > 2.5, sd_plain
    assert abs(sd_narrowed[2] - 3.0 / math.sqrt(read)) < 0.05 * 3.0 / math.sqrt(read), sd_narrowed
    assert sd_narrowed[2] > 1.0
    np.testing.assert_allclose(sd_narrowed[:2], sd_plain[:2], rtol=1e-12)
    # the estimates are the pool's own, untouched
    np.testing.assert_array_equal(narrowed.mode, plain.mode)
    np.testing.assert_array_equal(narrowed.curvature, plain.curvature)
    np.testing.assert_array_equal(narrowed.noise_cov, plain.noise_cov)
    assert narrowed.resolved == plain.resolved
