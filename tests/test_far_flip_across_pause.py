"""A far-phase direction that moves again after a pause halves its step, where nothing else moved.

Step 3b of :func:`stan_dp.adaptation.far.far_phase`: a direction that moves again after rounds
within the gate halves its step where no other direction moved since its last vote beyond the gate
— against that vote (the sign changed: Rprop's rule) or along it (its vote fell within the gate at
the point it stands on).  Checked on the traces of a NumPy density, each checked to contain the
event it is about (docs/adaptation.md §3, "Far phase").
"""

from __future__ import annotations

import numpy as np
import pytest

from stan_dp.adaptation import far
from densities import BoundedVaryingIntercept, radon_like_rows
from conftest import traced_adaptation


def _bounded() -> BoundedVaryingIntercept:
    return BoundedVaryingIntercept(*radon_like_rows(0), 20)


def _far_rounds(density, epsilon: float, seed: int) -> list[dict]:
    trace, _ = traced_adaptation(density, epsilon, seed)
    rounds = [t for t in trace if t.get("far")]
    assert len(rounds) == far.FAR_ROUNDS
    return rounds


def _resumes(rounds: list[dict], j: int) -> list[tuple[int, bool, bool]]:
    """The rounds ``k`` in which coordinate ``j`` moved after a round without a move, each with
    whether no other coordinate moved from its last move's round to round ``k - 1`` and whether it
    moved the same way as then."""
    moves = np.diff(np.array([r["theta"] for r in rounds]), axis=0)   # moves[k - 1]: round k's
    went = np.abs(moves) > far.NEGLIGIBLE_MOVE
    events = []
    for k in range(2, len(rounds)):
        before = np.flatnonzero(went[:k - 1, j])
        if went[k - 1, j] and not went[k - 2, j] and before.size:
            others = np.delete(went[before[-1]:k - 1], j, axis=1)
            same = np.sign(moves[k - 1, j]) == np.sign(moves[before[-1], j])
            events.append((k, not others.any(), bool(same)))
    return events


@pytest.mark.parametrize("epsilon, seed, alone, same", [(4.0, 2, True, False), (4.0, 8, False, False),
                                                        (16.0, 3, True, True), (16.0, 5, False, True)])
def test_a_move_after_a_pause_halves_the_step_where_nothing_else_moved(epsilon, seed, alone, same):
    """``sigma``'s logit coordinate (the bounded radon-like intercepts).  Where it stood within the
    gate while nothing else moved and then moved again, its step halved and the move took the
    halved step: against its last move (epsilon = 4, noise seed 2: 2.76 -> 1.38 e-folds; the sign
    changed) and along it (epsilon = 16, seed 3: 0.69 -> 0.35; its vote fell within the gate where
    it stood).  Where others moved during the pause (epsilon = 4, seed 8; epsilon = 16, seed 5) the
    step stays: the scale's conditional mode may have moved with them, and halving there stranded
    a ``uniform(0, 100)`` scale 10 sds above its mode once a far-off intercept came in
    (``tests/test_uniform_scale.py``'s replica, noise seed 18).  Each run is checked to hold the
    event it is about; every resume in it follows the rule."""
    density = _bounded()
    rounds = _far_rounds(density, epsilon, seed)
    j = density.dim - 1
    events = _resumes(rounds, j)
    assert (alone, same) in [(a, m) for _, a, m in events], events
    for k, a, _ in events:
        expected = rounds[k - 1]["step"][j] / (far.GROWTH if a else 1.0)
        assert rounds[k]["step"][j] == pytest.approx(expected, rel=1e-12), k
        assert abs(rounds[k]["theta"][j] - rounds[k - 1]["theta"][j]) == pytest.approx(expected, rel=1e-9), k
