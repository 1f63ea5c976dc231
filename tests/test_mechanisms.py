"""Tests of stan_dp.mechanisms and stan_dp.samplers.proposals."""

from __future__ import annotations

import numpy as np
import pytest

from stan_dp.mechanisms import chain_streams, clamp_rows_l2, clip_log_ratios, gaussian_release
from stan_dp.samplers.proposals import make_proposal, validate_step_size


def test_clip_maps_everything_into_the_interval():
    r = np.array([0.5, -3.0, 3.0, np.inf, -np.inf, np.nan, 1.0])
    out, n = clip_log_ratios(r, 1.0)
    np.testing.assert_array_equal(out, [0.5, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0])
    assert n == 5  # |r| > bound or NaN; exactly-at-bound is not clipped


def test_clip_with_infinite_bound_is_identity_on_finite_values():
    r = np.array([1e300, -2.0])
    out, n = clip_log_ratios(r, np.inf)
    np.testing.assert_array_equal(out, r)
    assert n == 0


def test_clamp_rows_l2_projects_onto_ball():
    rows = np.array([[3.0, 4.0], [0.3, 0.4], [np.nan, 1.0]])
    out, n = clamp_rows_l2(rows, 1.0)
    np.testing.assert_allclose(out[0], [0.6, 0.8])
    np.testing.assert_allclose(out[1], [0.3, 0.4])
    np.testing.assert_allclose(out[2], [0.0, 1.0])
    assert n == 2
    assert np.all(np.linalg.norm(out, axis=1) <= 1.0 + 1e-12)
    with pytest.raises(ValueError):
        clamp_rows_l2(np.ones(3), 1.0)


def test_gaussian_release_has_the_stated_sd():
    rng = np.random.default_rng(0)
    x = gaussian_release(rng, np.zeros(200_000), 2.5)
    assert abs(x.std() / 2.5 - 1) < 0.01  # sd of the sd estimate ~ 1/sqrt(2n) = 0.0016
    assert isinstance(gaussian_release(rng, 1.0, 0.0), float)


def test_chain_streams_are_reproducible_and_separate():
    a = chain_streams(7, 3)
    b = chain_streams(7, 3)
    assert len(a) == 3
    for sa, sb in zip(a, b):
        assert sa.proposal.random() == sb.proposal.random()
        assert sa.noise.random() == sb.noise.random()
    draws = [s.proposal.random() for s in chain_streams(7, 3)] + [s.noise.random() for s in chain_streams(7, 3)]
    assert len(set(draws)) == 6
    # seed=None: fresh entropy
    assert chain_streams(None, 1)[0].noise.random() != chain_streams(None, 1)[0].noise.random()


def test_step_size_validation():
    np.testing.assert_array_equal(validate_step_size(0.5, 3), [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(validate_step_size([1, 2], 2), [1.0, 2.0])
    for bad in (0.0, -1.0, np.nan, np.inf, [1.0, 2.0, 3.0]):
        with pytest.raises(ValueError):
            validate_step_size(bad, 2)
    with pytest.raises(ValueError, match="unknown proposal"):
        make_proposal("hmc", 0.1, 2)


@pytest.mark.parametrize("kind", ["gaussian", "component", "guided"])
def test_proposal_norm_matches_the_move(kind):
    rng = np.random.default_rng(1)
    prop = make_proposal(kind, [0.1, 0.2, 0.3], 3)
    aux = prop.init_aux(rng)
    theta = np.zeros(3)
    for _ in range(50):
        move = prop.propose(rng, theta, aux)
        assert move.norm == pytest.approx(np.linalg.norm(move.position - theta))
        assert move.log_q_ratio == 0.0
        if kind != "gaussian":
            assert np.count_nonzero(move.position - theta) == 1
            assert move.step == [0.1, 0.2, 0.3][move.coordinate]


def test_guided_direction_kept_on_accept_flipped_on_reject():
    rng = np.random.default_rng(2)
    prop = make_proposal("guided", 0.1, 2)
    aux = np.array([1.0, -1.0])
    move = prop.propose(rng, np.zeros(2), aux)
    k = move.coordinate
    assert np.sign(move.position[k]) == aux[k]
    np.testing.assert_array_equal(prop.update_aux(aux, move, True), aux)
    flipped = prop.update_aux(aux, move, False)
    assert flipped[k] == -aux[k] and flipped[1 - k] == aux[1 - k]
    assert aux[k] in (1.0, -1.0)  # the input is not mutated
