"""A pool whose quadratic model is trusted at none of its rounds keeps the round just made alone.

The Newton rounds pool the near rounds' released gradients and curvatures and move to the pooled
mode; rounds farther than ``model_reach(d)`` (pooled metric) from it leave the pool
(``pooling.trimmed_pool``).  Where every round is that far, the pooled mode is an extrapolation
(in ``radon-slopes`` at 3,000 rows, epsilon = 16, a pool of 8 rounds sent the search 12 sds down
``log sigma_a`` and the run ended 5e5 sds off): the round just made stays alone, with its own
one-step estimate.  Checked on synthetic pools with noiseless releases, where each round's
one-step estimate has a closed form.
"""

from __future__ import annotations

import numpy as np

from stan_dp.adaptation import pooling

D = 2


def _round(theta: np.ndarray, grad: np.ndarray, hess: np.ndarray, sd_h: float = 1e-9) -> dict:
    """A round at ``theta`` in the identity frame with released gradient ``grad`` (almost no
    noise) and curvature ``hess`` with noise sd ``sd_h``."""
    frame = np.eye(D)
    return {"theta": np.asarray(theta, float), "grad": np.asarray(grad, float),
            "grad_sd": 1e-6, "hess": np.asarray(hess, float),
            "prior_hess": np.zeros((D, D)), "sd_h": sd_h, "frame": frame,
            "data_coordinates": np.ones(D, dtype=bool),
            "hess_diag_sd": pooling.curvature_diagonal_sd(sd_h, np.linalg.inv(frame))}


def test_a_pool_trusted_at_none_of_its_rounds_keeps_the_last_alone():
    """16 rounds at about one point, each released curvature 0 along the second axis (a
    direction the release cannot resolve) and the gradient 3 along it.  Each round's curvature
    there is floored against its own noise, the pool's against the noise of the mean, 4 times
    lower: its mode lies farther than ``model_reach(2)`` (7.2 pooled sds) from every round, while
    the last round's own estimate is within reach of it.  The last round is kept alone, with the
    estimate of a pool of it alone, and the move is shorter than the pooled one."""
    rounds = [_round([0.0, 0.01 * k], [0.0, 3.0], np.diag([1.0, 0.0]), 0.1) for k in range(16)]
    frame = np.eye(D)
    pooled = pooling._pooled_estimate(rounds, frame)
    reach = pooling.model_reach(D)
    assert all(pooling._distance(r["theta"], pooled) > reach for r in rounds)   # the case at hand
    kept, trimmed, extrapolated = pooling.trimmed_pool(rounds, pooled, frame, reach)
    assert extrapolated and len(kept) == 1 and kept[0] is rounds[-1]
    alone = pooling._pooled_estimate(rounds[-1:], frame)
    np.testing.assert_array_equal(trimmed.mode, alone.mode)
    assert pooling._distance(rounds[-1]["theta"], trimmed) <= reach
    step = lambda est: np.linalg.norm(est.mode - rounds[-1]["theta"])   # noqa: E731
    assert step(trimmed) < 0.5 * step(pooled)


def test_a_pool_within_reach_is_left_as_it_was():
    """Rounds of an exact quadratic (mode (1, -2), curvature diag(4, 2)) a few sds around it: the
    pooled mode is the mode, every round within reach, and the pool is returned unchanged."""
    h, mode = np.diag([4.0, 2.0]), np.array([1.0, -2.0])
    rng = np.random.default_rng(3)
    rounds = [_round(t, h @ (mode - t), h) for t in mode + rng.normal(size=(4, D))]
    frame = np.eye(D)
    pooled = pooling._pooled_estimate(rounds, frame)
    kept, trimmed, extrapolated = pooling.trimmed_pool(rounds, pooled, frame, pooling.model_reach(D))
    assert not extrapolated and kept is rounds and trimmed is pooled
    np.testing.assert_allclose(pooled.mode, mode, atol=1e-6)


def test_a_round_far_from_the_rest_leaves_and_the_rest_stay_pooled():
    """Three rounds of the exact quadratic near its mode and one 40 sds out whose gradient is off
    (its one-step estimate 8 sds off): it alone leaves, the others are pooled on their own, and
    the move is theirs (the rule as before this change)."""
    h, mode = np.diag([4.0, 2.0]), np.array([1.0, -2.0])
    near = [_round(mode + 0.3 * np.array([k, -k]), h @ (mode - (mode + 0.3 * np.array([k, -k]))), h)
            for k in range(3)]
    far_theta = mode + np.array([20.0, 0.0])
    far = _round(far_theta, h @ (mode - far_theta) + h @ np.array([4.0, 0.0]), h)
    rounds = near + [far]
    frame = np.eye(D)
    pooled = pooling._pooled_estimate(rounds, frame)
    kept, trimmed, extrapolated = pooling.trimmed_pool(rounds, pooled, frame, pooling.model_reach(D))
    assert not extrapolated and [id(r) for r in kept] == [id(r) for r in near]
    np.testing.assert_allclose(trimmed.mode, mode, atol=1e-6)
