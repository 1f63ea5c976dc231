"""A scale far above its mode under a uniform prior: ``real<lower=0, upper=100> sigma``.

``d_km ~ normal(a + b * temp, sigma)`` (600 rows, ``temp`` centred, the distances' scatter 0.002
km, no priors but the bounds) starts ``sigma`` at 50, the middle of its uniform and 4.4 decades
above its posterior.  Two parts of the search had not been made for it (docs/adaptation.md §7,
"A scale far above its mode under a uniform prior"); the oracle here is exact
(:class:`densities.UniformScaleRegression`, whose posterior is the flat-prior regression's):

* the far phase's first move of the slope, made once ``sigma`` had come down three decades, read
  the start's curvature scale (``far.first_move_variance`` now shrinks it by the growth of the
  slope's released median): the run ended 10^6 posterior sds off;
* the Newton rounds' steps along ``sigma``'s logit coordinate were tens of e-folds
  (``newton.BOUNDED_STEP_MAX`` now caps them as a log coordinate's);
* a step-back restored the frame the step was made in even where the step's release had shown it
  ten to ten thousand times too wide, and the rounds alternated to the end
  (``newton.KEEP_FRAME_CURVATURE`` now keeps the frame that release set: session 79);
* the far phase stepped and bracketed ``sigma``'s logit coordinate as a location's, and held it
  far above its mode by votes taken while ``a`` was still far off (``far.scale_coordinates`` now
  reads the logit transform too: session 80).

The counterfactual halves of the tests of sessions 78 and 79 run the far phase as it was when they
were measured (:func:`_far_phase_as_before`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import stan_dp
from stan_dp.adaptation import far, newton
from stan_dp.adaptation.plan import AdaptationSettings
from stan_dp.auto import _adapt
from densities import UniformScaleRegression

N = 600


def _km(seed: int = 0) -> tuple[UniformScaleRegression, np.ndarray, np.ndarray]:
    """The model, and the exact posterior means and sds of ``(a, b, log sigma)``."""
    rng = np.random.default_rng(seed)
    temp = rng.normal(14.0, 7.0, N) - 14.0
    d_km = 1.2555 + 0.0005 * temp + rng.normal(0.0, 0.002, N)
    model = UniformScaleRegression(np.column_stack([np.ones(N), temp]), d_km)
    mean, sd = model.exact()
    return model, mean, sd


def _error(model, mean, sd, epsilon: float, seed: int) -> tuple[float, bool]:
    """The fit's worst |mean error| over ``(a, b, log sigma)`` in posterior sds, and whether it
    raised a UtilityWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = stan_dp.sample(model, epsilon=epsilon, delta=1e-5, seed=seed, progress=False, draws=200)
    est = np.r_[fit.posterior["beta"].values.reshape(-1, 2).mean(0),
                np.log(fit.posterior["sigma"].values).mean()]
    warned = any(issubclass(w.category, stan_dp.UtilityWarning) for w in caught)
    return float(np.max(np.abs(est - mean) / sd)), warned


def test_the_replica_density_is_consistent():
    """The oracle's rows: values as ``row_log_lik`` gives them, gradients as central differences
    of the summed log-likelihood (at a point near the posterior and at the search's start)."""
    model, mean, _ = _km()
    for theta in (np.r_[mean[:2], mean[2] - np.log(100.0)], np.zeros(3)):
        values, grad = model.row_log_lik_grad(theta)
        np.testing.assert_array_equal(values, model.row_log_lik(theta))
        for j in range(3):
            h = np.zeros(3)
            h[j] = 1e-6 * max(1.0, abs(theta[j]))
            fd = (model.row_log_lik(theta + h) - model.row_log_lik(theta - h)) / (2.0 * h[j])
            np.testing.assert_allclose(grad[:, j], fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))


def test_a_late_first_move_is_at_most_the_newton_step_where_it_is_made():
    """The exact curvature along the slope and the rows' median ``|g|`` (no noise) at the start
    (``a = b = 0``, ``sigma = 50``) and where the slope first moved (``a`` at its mode, ``sigma``
    0.055, from the trace of epsilon = 4, seed 1): the first move's scale ``a_j^2`` must not
    exceed the inverse curvature there, which the start's scale does by 10^5."""
    model, mean, _ = _km()
    x = model.x[:, 1]

    def curvature_and_median(a: float, sigma: float) -> tuple[float, float]:
        r = model.y - a
        return float(np.sum(x * x) / sigma**2), float(np.median(np.abs(r * x) / sigma**2))

    c0, b0 = curvature_and_median(0.0, 50.0)
    c1, b1 = curvature_and_median(mean[0], 0.055)
    start_var = np.array([1.0 / c0])
    shrunk = far.first_move_variance(np.sqrt(start_var), np.array([b0]), np.array([b1]))
    assert shrunk[0] <= 1.0 / c1 < start_var[0] / 1e5
    assert shrunk[0] == pytest.approx(start_var[0] * (b0 / b1) ** 2, rel=1e-12)
    # where the median fell the start's scale stays, and nothing non-finite comes out
    same = far.first_move_variance(np.array([2.0, 3.0]), np.array([1.0, 0.0]), np.array([0.5, 0.0]))
    np.testing.assert_array_equal(same, [4.0, 9.0])
    np.testing.assert_array_equal(far.first_move_variance(np.array([2.0]), np.array([0.0]),
                                                          np.array([np.inf])), [0.0])


def test_the_slope_no_longer_leaves_by_a_million_sds(monkeypatch):
    """epsilon = 4, seed 1: the slope's first move comes in the far phase's last round.  With the
    start's scale it ends more than 10^4 posterior sds off (1.2e6 measured); now within 10 (7.6).
    Both runs warn (epsilon = 4 at 600 rows cannot promise 0.5 sds)."""
    model, mean, sd = _km()
    error, warned = _error(model, mean, sd, 4.0, 1)
    assert error < 10.0 and warned
    monkeypatch.setattr(far, "first_move_variance", lambda local_sd, start, now: np.asarray(local_sd) ** 2)
    error, warned = _error(model, mean, sd, 4.0, 1)
    assert error > 1e4 and warned


def _full_trace(model, seed: int, epsilon: float = 16.0) -> list:
    """The private search's trace, far rounds and Newton rounds (default settings)."""
    trace: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _adapt(model, epsilon=epsilon, delta=1e-5, share=1.0, seed=seed, relation="replace_one",
               public_n=None, start=np.zeros(3), settings=AdaptationSettings(), trace=trace)
    return trace


def _trace(model, seed: int) -> list:
    """The Newton rounds' trace of the private search at epsilon = 16 (default settings)."""
    return [t for t in _full_trace(model, seed) if "frame" in t]


def _far_phase_as_before(monkeypatch) -> None:
    """The far phase before session 80: ``sigma``'s logit coordinate stepped and bracketed as a
    location's (``far.scale_coordinates`` read the log transform only)."""
    monkeypatch.setattr(far, "scale_coordinates", lambda density, d: far.log_coordinates(density, d))


def test_only_a_bounded_scale_is_stepped_as_a_scale():
    """``far.scale_coordinates``: the log-transformed coordinates and the logit-transformed ones
    the program passes as a scale; a bounded coefficient (logit-transformed, not a scale) stays a
    location, bracketed after an overshoot; ``None`` where a density declares neither."""
    class Declared:
        def __init__(self, **masks):
            self.__dict__.update({k: np.array(v, dtype=bool) for k, v in masks.items()})

    both = Declared(log_coordinates=[0, 0, 1, 0], bounded_coordinates=[1, 1, 0, 1],
                    bounded_scale_coordinates=[0, 0, 0, 1])
    np.testing.assert_array_equal(far.scale_coordinates(both, 4), [False, False, True, True])
    coefficients = Declared(log_coordinates=[0, 0, 0], bounded_coordinates=[1, 1, 1],
                            bounded_scale_coordinates=[0, 0, 0])
    assert far.scale_coordinates(coefficients, 3) is None
    assert far.scale_coordinates(object(), 3) is None   # a NumPy density declaring nothing
    model, _, _ = _km()
    np.testing.assert_array_equal(far.scale_coordinates(model, 3), [False, False, True])


def test_the_far_phase_treats_a_logit_scale_as_a_scale(monkeypatch):
    """epsilon = 4.  Bracketed as a location's, ``sigma``'s logit coordinate (mode -10.9) was
    held by noise seed 17's far phase between -6.6 and -5.9, where votes taken while ``a`` was
    still far off had said "up"; it ended the phase 4.4 e-folds above its mode, the Newton rounds'
    frame measured there was 25-35 times too wide, and the run ended 34 posterior sds off
    (measured; asserted beyond 20).  As a scale's (``far.scale_coordinates``: never bracketed, its
    step held at ``LOG_STEP_MAX``) it ends the phase 1.4 e-folds above (asserted within 2) and the
    run 5.2 sds off (asserted within 10).  Noise seeds 1-12: one run beyond 10 sds measured (19.7;
    four as before: 27.6, 10.6, 12.7, 11.9), at most two asserted; every run beyond 0.5 warns."""
    model, mean, sd = _km()
    mode_u = mean[2] - math.log(100.0)   # sigma's logit coordinate, sigma / 100 being ~2e-5

    def far_end(seed: int) -> float:
        return float([t for t in _full_trace(model, seed, 4.0) if "frame" not in t][-1]["theta"][2])

    assert abs(far_end(17) - mode_u) < 2.0
    error, warned = _error(model, mean, sd, 4.0, 17)
    assert error < 10.0 and warned
    runs = [_error(model, mean, sd, 4.0, seed) for seed in range(1, 13)]
    assert sum(e > 10.0 for e, _ in runs) <= 2, runs
    assert all(warned for e, warned in runs if e > 0.5)
    _far_phase_as_before(monkeypatch)
    assert far_end(17) - mode_u > 4.0
    error, warned = _error(model, mean, sd, 4.0, 17)
    assert error > 20.0 and warned


def test_a_newton_step_moves_the_logit_scale_by_at_most_three(monkeypatch):
    """epsilon = 16, noise seeds 1-8: no Newton round moves ``sigma``'s logit coordinate by more
    than ``BOUNDED_STEP_MAX`` (3), where uncapped the rounds stepped 5-64 along it.  Over noise
    seeds 1-12, as the cap was measured (before a step-back kept a frame its release showed too
    wide: ``newton.KEEP_FRAME_CURVATURE``, off here), two runs end more than 10 posterior sds off
    (156 and 79 measured), four uncapped (150, 81, 375 and 81); every run beyond 0.5 warns, capped
    or not."""
    model, mean, sd = _km()
    monkeypatch.setattr(newton, "KEEP_FRAME_CURVATURE", math.inf)

    def largest_step(seed: int) -> float:
        return max(abs(float(t["step"][2])) for t in _trace(model, seed))

    assert max(largest_step(seed) for seed in range(1, 9)) <= newton.BOUNDED_STEP_MAX * (1 + 1e-12)
    runs = [_error(model, mean, sd, 16.0, seed) for seed in range(1, 13)]
    assert sum(e > 10.0 for e, _ in runs) <= 2
    assert all(warned for e, warned in runs if e > 0.5)
    monkeypatch.setattr(newton, "BOUNDED_STEP_MAX", math.inf)
    _far_phase_as_before(monkeypatch)
    assert max(largest_step(seed) for seed in range(1, 9)) > 10.0
    before = [_error(model, mean, sd, 16.0, seed) for seed in range(1, 13)]
    assert sum(e > 10.0 for e, _ in before) >= 4
    assert all(warned for e, warned in before if e > 0.5)


def test_a_step_back_keeps_a_frame_its_release_showed_ten_times_too_wide(monkeypatch):
    """epsilon = 16, noise seeds 1-12.  Restoring the frame a step was made in at every step-back,
    seed 4 alternated to its last round: a full step in a frame too wide along ``a``, ``b``, an
    overshoot, a step-back to that frame (15 of its 30 rounds), the step's release reading a larger
    curvature in the restored frame each time (12 to 3e4 measured), and no round was pooled; two
    runs ended more than 10 posterior sds off (156 and 79).  Keeping the frame the step's release
    set where that release read a curvature of ``KEEP_FRAME_CURVATURE`` (100) or more, seed 4's
    step-backs end by round 19 and its last rounds pool (10); no run ends beyond 10 (at most 1.25
    measured) and every run beyond 0.5 warns."""
    model, mean, sd = _km()

    def step_backs(seed: int) -> tuple[list[int], float, int]:
        """The rounds that stepped back, the largest curvature the released step before one of
        them read in its frame, and the rounds pooled at the end."""
        rounds = _trace(model, seed)
        back = [k for k, t in enumerate(rounds) if t["overshoot"] or t["collapse"]]
        top = max((float(np.max(rounds[k - 1]["eig"])) for k in back if k), default=0.0)
        return back, top, int(rounds[-1]["pooled"])

    back, _, pooled = step_backs(4)
    assert back and max(back) < 20 and pooled >= 2, (back, pooled)
    runs = [_error(model, mean, sd, 16.0, seed) for seed in range(1, 13)]
    assert max(e for e, _ in runs) < 10.0, runs
    assert all(warned for e, warned in runs if e > 0.5)
    monkeypatch.setattr(newton, "KEEP_FRAME_CURVATURE", math.inf)
    _far_phase_as_before(monkeypatch)
    back, top, pooled = step_backs(4)
    assert len(back) >= 10 and max(back) >= 27 and top > 1e3 and pooled == 0, (back, top, pooled)
    before = [_error(model, mean, sd, 16.0, seed) for seed in range(1, 13)]
    assert sum(e > 10.0 for e, _ in before) >= 2
