"""A far-phase direction whose vote changes sign across a pause halves its step, where nothing else moved.

Step 3b of :func:`stan_dp.adaptation.far.far_phase`: a direction that moves again after rounds
within the gate, against its last vote beyond the gate, halves its step as at a flip (Rprop's rule:
the sign changed), where no other direction moved since that vote.  Checked on the traces of a
NumPy density, each checked to contain the event it is about (docs/adaptation.md §3, "Far phase").
"""

from __future__ import annotations

import numpy as np
import pytest

from stan_dp.adaptation import far
from densities import BoundedVaryingIntercept
from conftest import traced_adaptation


def _bounded() -> BoundedVaryingIntercept:
    rng = np.random.default_rng(0)
    g = rng.integers(0, 20, 1000)
    y = (1.5 + 0.3 * rng.normal(size=20))[g] + 0.75 * rng.normal(size=1000)
    return BoundedVaryingIntercept(y, g, 20)


def _far_rounds(density, epsilon: float, seed: int) -> list[dict]:
    trace, _ = traced_adaptation(density, epsilon, seed)
    rounds = [t for t in trace if t.get("far")]
    assert len(rounds) == far.FAR_ROUNDS
    return rounds


def _resumed_flips(rounds: list[dict], j: int) -> list[tuple[int, bool]]:
    """The rounds ``k`` in which coordinate ``j`` moved against its last move after a round without
    one, each with whether no other coordinate moved from that last move's round to round ``k - 1``."""
    moves = np.diff(np.array([r["theta"] for r in rounds]), axis=0)   # moves[k - 1]: round k's
    went = np.abs(moves) > far.NEGLIGIBLE_MOVE
    events = []
    for k in range(2, len(rounds)):
        before = np.flatnonzero(went[:k - 1, j])
        if went[k - 1, j] and not went[k - 2, j] and before.size \
                and np.sign(moves[k - 1, j]) == -np.sign(moves[before[-1], j]):
            others = np.delete(went[before[-1]:k - 1], j, axis=1)
            events.append((k, not others.any()))
    return events


@pytest.mark.parametrize("seed, alone", [(2, True), (8, False)])
def test_a_sign_change_across_a_pause_halves_the_step_where_nothing_else_moved(seed, alone):
    """``sigma``'s logit coordinate (the bounded radon-like intercepts, epsilon = 4).  Noise seed 2:
    it moved, stood within the gate while nothing else moved, then moved the other way; its step
    halved there (2.76 -> 1.38 e-folds) and the move took the halved step.  Noise seed 8: the
    same, but the group's intercepts moved during the pause, so the sign change may be theirs (the
    scale's conditional mode moved with them), and the step stays (3.41): halving it there
    stranded a ``uniform(0, 100)`` scale 10 sds above its mode once a far-off intercept came in
    (``tests/test_uniform_scale.py``'s replica, noise seed 18)."""
    density = _bounded()
    rounds = _far_rounds(density, 4.0, seed)
    j = density.dim - 1
    events = _resumed_flips(rounds, j)
    assert [a for _, a in events] == [alone], events
    k = events[0][0]
    expected = rounds[k - 1]["step"][j] / (far.GROWTH if alone else 1.0)
    assert rounds[k]["step"][j] == pytest.approx(expected, rel=1e-12)
    assert abs(rounds[k]["theta"][j] - rounds[k - 1]["theta"][j]) == pytest.approx(expected, rel=1e-9)
