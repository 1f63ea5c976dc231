"""The chain-side warm-up of :mod:`stan_dp.adaptation.warmup` against independent computations.

Dual averaging: one step by hand from Stan's formulas, convergence to the step whose
acceptance is the target on a toy where the acceptance is a known decreasing function of
the step, and the warm-up schedule (restarts at 2/3 and 5/6, frozen at the end).  Mode
search: the exact iterates of a noise-free quadratic, the release count, the prior-support
rules.  The statistical check of the search's error against the averaged release noise
runs through the HMC gradient mechanism in
``tests/test_hmc.py::test_mode_search_error_is_the_averaged_release_noise`` and is not
repeated here.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pytest

from stan_dp.adaptation import warmup as W

TARGET = 0.3


def toy_accept(step: float) -> float:
    """Acceptance ``1 / (1 + (step / 0.1)^2)``: decreasing, equal to 0.3 at ``0.1 sqrt(7/3)``."""
    return 1.0 / (1.0 + (step / 0.1) ** 2)


TOY_STEP = 0.1 * math.sqrt(1.0 / TARGET - 1.0)


# ---------------------------------------------------------- dual averaging --
def test_one_and_two_steps_equal_stans_formulas_by_hand():
    """gamma 0.05, t0 10, kappa 0.75, from step 0.5 (mu = log 5):
    t = 1, accept 0.8: h = -0.5/11 = -1/22, log step = log 5 + 20/22, log bar = log step;
    t = 2, accept 0.1: h = (11/12)(-1/22) + 0.2/12 = -1/40, log step = log 5 + sqrt(2)/2,
    log bar = 2^-0.75 log step + (1 - 2^-0.75)(log 5 + 10/11)."""
    a = W.new_adaptation(0.5)
    assert a == W.Adaptation(math.log(5.0), math.log(0.5), 0.0, 0)

    a, step = W.dual_averaging(a, 0.8, TARGET)
    assert a.count == 1
    assert a.h_bar == pytest.approx(-1 / 22, rel=1e-14)
    assert step == pytest.approx(5.0 * math.exp(10 / 11), rel=1e-14)
    assert a.log_step_bar == pytest.approx(math.log(5.0) + 10 / 11, rel=1e-14)
    assert a.mu == math.log(5.0)

    a, step = W.dual_averaging(a, 0.1, TARGET)
    w = 2 ** -0.75
    assert a.count == 2
    assert a.h_bar == pytest.approx(-1 / 40, rel=1e-14)
    assert step == pytest.approx(5.0 * math.exp(math.sqrt(2) / 2), rel=1e-14)
    assert a.log_step_bar == pytest.approx(
        w * (math.log(5.0) + math.sqrt(2) / 2) + (1 - w) * (math.log(5.0) + 10 / 11), rel=1e-14)


@pytest.mark.parametrize("start", [1e-3, 1.0])
def test_dual_averaging_converges_to_the_step_with_the_target_acceptance(start):
    """From a step 150x too small or 6.5x too large, the averaged step of plain dual averaging
    reaches ``0.1 sqrt(7/3)`` (acceptance 0.3): within 5 % after 200 updates, 1 % after 2000
    (the pull towards ``mu`` leaves an error shrinking like ``1/sqrt(t)``)."""
    a, step = W.new_adaptation(start), start
    for t in range(1, 2001):
        a, step = W.dual_averaging(a, toy_accept(step), TARGET)
        if t == 200:
            assert math.exp(a.log_step_bar) == pytest.approx(TOY_STEP, rel=0.05)
    assert math.exp(a.log_step_bar) == pytest.approx(TOY_STEP, rel=0.01)
    assert step == pytest.approx(TOY_STEP, rel=0.01)


@pytest.mark.parametrize("start", [1e-3, 1.0])
def test_the_warmup_schedule_freezes_near_the_target(start):
    """A 300-iteration warm-up ends with acceptance within 0.01 of the target, then never moves."""
    a, step = W.new_adaptation(start), start
    for i in range(1, 301):
        a, step = W.adapt_step_size(a, step, i, toy_accept(step), warmup=300, target=TARGET)
    assert step == pytest.approx(TOY_STEP, rel=0.02)
    assert toy_accept(step) == pytest.approx(TARGET, abs=0.01)
    frozen = (a, step)
    for i in range(301, 320):
        assert W.adapt_step_size(a, step, i, 0.0, warmup=300, target=TARGET) == frozen


@pytest.mark.parametrize("warmup, restarts", [(60, {40, 50}), (100, {66, 83}), (3, {2})])
def test_restarts_at_two_thirds_and_five_sixths_of_the_warmup(warmup, restarts):
    """At ``floor(2/3 w)`` and ``floor(5/6 w)`` (one restart if they coincide) the averaging
    restarts from the averaged step, pulled towards twice it; the last warm-up iteration
    sets the step to the averaged one."""
    assert W.ADAPT_RESTARTS == (2 / 3, 5 / 6)
    a, step = W.new_adaptation(0.01), 0.01
    rng = np.random.default_rng(0)
    restarted = set()
    for i in range(1, warmup + 1):
        accept = float(rng.uniform())
        before = a
        averaged, _ = W.dual_averaging(before, accept, TARGET)
        a, step = W.adapt_step_size(a, step, i, accept, warmup=warmup, target=TARGET)
        if a.count == 0:
            restarted.add(i)
            bar = math.exp(averaged.log_step_bar)
            assert a == W.Adaptation(math.log(2.0 * bar), math.log(bar), 0.0, 0)
            assert step == pytest.approx(bar, rel=1e-14)
        else:
            assert a.count == before.count + 1
        if i == warmup:
            assert step == math.exp(a.log_step_bar)
    assert restarted == restarts


def test_no_adaptation_state_or_after_warmup_changes_nothing():
    assert W.adapt_step_size(None, 0.2, 1, 0.9, warmup=10, target=TARGET) == (None, 0.2)
    a = W.new_adaptation(0.2)
    assert W.adapt_step_size(a, 0.2, 11, 0.9, warmup=10, target=TARGET) == (a, 0.2)
    assert W.adapt_step_size(a, 0.2, 1, 0.9, warmup=0, target=TARGET) == (a, 0.2)


# ------------------------------------------------------------- mode search --
class Released(NamedTuple):
    grad: np.ndarray
    at: np.ndarray


class Recorder:
    """A release: ``grad`` of a log density at ``theta`` (no noise), ``None`` outside ``inside``."""

    def __init__(self, grad, inside=lambda theta: True):
        self.grad, self.inside = grad, inside
        self.calls: list[tuple[np.ndarray, bool]] = []

    def __call__(self, rng, theta):
        theta = np.array(theta, dtype=float)
        ok = bool(self.inside(theta))
        self.calls.append((theta, ok))
        return Released(self.grad(theta), theta) if ok else None

    @property
    def releases(self) -> int:
        return sum(ok for _, ok in self.calls)


def test_mode_search_noise_free_quadratic_has_the_exact_averaged_iterates():
    """log density ``-(theta - m)' H (theta - m) / 2``: the iterates are
    ``m + (I - s H)^j (theta_0 - m)``, j = 1..K-2, the chain starts at the mean of those with
    ``j >= K // 2`` and the release there is the K-th and last."""
    m = np.array([1.0, -2.0])
    hess = np.array([[2.0, 0.5], [0.5, 1.0]])
    start, s, k = np.array([5.0, 3.0]), 0.3, 20
    release = Recorder(lambda theta: -hess @ (theta - m))
    position, first = W.mode_search(release, np.random.default_rng(0), start, k, s)
    contraction = np.eye(2) - s * hess
    iterates = [m + np.linalg.matrix_power(contraction, j) @ (start - m) for j in range(1, k - 1)]
    expected = np.mean(iterates[k // 2 - 1:], axis=0)
    np.testing.assert_allclose(position, expected, rtol=1e-12)
    np.testing.assert_allclose(first.at, expected, rtol=1e-12)
    np.testing.assert_allclose(first.grad, -hess @ (expected - m), rtol=1e-12)
    assert release.releases == len(release.calls) == k
    np.testing.assert_allclose([c[0] for c in release.calls[1:k - 1]], iterates, rtol=1e-12)


def test_mode_search_halves_the_step_outside_the_prior_support():
    """Proposals outside the support make no release and are not taken; the next proposal
    from the same point uses half the step.  Every accepted point is inside, and at most K
    releases are made."""
    release = Recorder(lambda theta: np.ones(1), inside=lambda theta: theta[0] < 1.0)
    k, s = 30, 0.6
    position, first = W.mode_search(release, np.random.default_rng(0), np.zeros(1), k, s)
    assert release.releases <= k
    assert all(theta[0] < 1.0 for theta, ok in release.calls if ok)
    assert any(not ok for _, ok in release.calls)
    current, step, refused = 0.0, s, 0
    for theta, ok in release.calls[1:k - 1]:  # the ascent's K - 2 proposals (gradient 1)
        assert theta[0] == pytest.approx(current + step, rel=1e-12)
        if ok:
            current = theta[0]
        else:
            step, refused = step / 2, refused + 1
    assert refused >= 3
    assert 0.0 < position[0] < 1.0 and first.at[0] == position[0]


def test_mode_search_falls_back_to_the_last_iterate_when_the_average_is_outside():
    """Iterates alternate around 0 (``1 - s h = -0.9``), staying in the support ``|theta| > 0.5``,
    their average does not: the chain starts at the last iterate, with its release."""
    release = Recorder(lambda theta: -theta, inside=lambda theta: abs(theta[0]) > 0.5)
    k = 20
    position, first = W.mode_search(release, np.random.default_rng(0), np.array([10.0]), k, 1.9)
    last = 10.0 * (-0.9) ** (k - 2)
    assert position[0] == pytest.approx(last, rel=1e-12)
    assert first.at[0] == position[0]
    assert not release.calls[-1][1]  # the release at the average was refused
    assert release.releases == k - 1


def test_mode_search_refuses_a_start_outside_the_prior_support():
    release = Recorder(lambda theta: theta, inside=lambda theta: False)
    with pytest.raises(ValueError, match="not finite at the initial point"):
        W.mode_search(release, np.random.default_rng(0), np.zeros(2), 10, 0.1)


def test_mode_search_passes_the_noise_stream_to_every_release():
    seen = []

    def release(rng, theta):
        seen.append(rng)
        return Released(-theta, theta)

    rng = np.random.default_rng(0)
    W.mode_search(release, rng, np.ones(1), 12, 0.5)
    assert len(seen) == 12 and all(r is rng for r in seen)


def test_hmc_keeps_the_moved_names():
    from stan_dp.samplers import hmc as H

    assert H.mode_search is W.mode_search
    assert H.Adaptation is W.Adaptation
    assert H.ADAPT_RESTARTS is W.ADAPT_RESTARTS
    state = H.init(np.zeros(2), step_size=0.05, adapt=True)
    assert state.adapt == W.new_adaptation(0.05)
